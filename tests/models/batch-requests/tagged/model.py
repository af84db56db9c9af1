"""A batched predict whose request parameter says what it gets: the list of the requests, in
the batch's order. Each answer comes from its own request's header and body. The same file
serves in a worker process (tagged-proc) and as a stateful sequence model's batches
(tagged-seq): model.py links here."""

from starlette.requests import Request


class Model:
    def predict(self, batch: list[dict], requests: list[Request]) -> list[dict]:
        return [
            {
                "tag": r.headers["x-tag"],
                "n": inputs["n"],
                "requests": type(requests).__name__,
                "batch": len(requests),
            }
            for inputs, r in zip(batch, requests, strict=True)
        ]
