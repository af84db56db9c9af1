"""The unbatched echo's twin under dynamic batching (bench/RESULTS.md §67): ``batch_busy_sync``'s
batches and its wait (1 ms + 0.05 ms a request, a blocking ``time.sleep`` on the model's thread),
answering every request as ``examples/echo`` does: its inputs back as they came, no parameters.

``batch_busy_sync`` asks for numpy arrays (a decode per request), answers floats (``tolist``) and
adds its figures to every answer; the echo takes the request itself, checked but not decoded, and
sends its data back as it came. A batched request is compared with an unbatched one here with
the model's own work the same. As docs/protocols.md says, the first parameter's annotation says
what each request gives, and a batched ``predict`` gets a list of those: here the requests
themselves."""

import time

from podium import InferenceRequest, InferenceResponse, ResponseOutput


def _echo(request: InferenceRequest) -> InferenceResponse:
    return InferenceResponse(
        outputs=[
            ResponseOutput(
                name=i.name,
                shape=i.shape,
                datatype=i.datatype,
                data=i.data,
                parameters=i.parameters,
            )
            for i in request.inputs
        ]
    )


class Model:
    def predict(self, batch: InferenceRequest) -> list:
        # ``batch``: a list of InferenceRequest (the annotation is each request's)
        requests: list = batch  # type: ignore[assignment]
        time.sleep(0.001 + 0.00005 * len(requests))
        return [_echo(request) for request in requests]
