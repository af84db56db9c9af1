"""Echo with a plain ``def predict``: the benchmark's sync model (the same work as
examples/echo, whose predict is ``async def``), so the two rows differ only by the hand-off to a
thread and back.

``BatchModel`` (``bench/models/batch_echo_sync``, whose ``model.py`` links here) is the same
echo under dynamic batching, as ``batch_busy_sync`` batches (bench/RESULTS.md §67): each batch
waits 1 ms + 0.05 ms a request with a blocking ``time.sleep`` on the model's thread, and each
request is answered as ``Model`` answers it. ``batch_busy_sync`` asks for numpy arrays, answers
floats and adds its figures to every answer; this one takes each request itself (checked, not
decoded) and sends its data back as it came, so a batched request is compared with the
unbatched echo with the model's own work the same. As docs/protocols.md says, the first
parameter's annotation says what each request gives, and a batched ``predict`` gets a list of
those: here the requests themselves."""

import time

from podium import InferenceRequest, InferenceResponse, ResponseOutput


class Model:
    def predict(self, request: InferenceRequest) -> InferenceResponse:
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


class BatchModel(Model):
    def predict(self, batch: InferenceRequest) -> list:  # type: ignore[override]
        # ``batch``: a list of InferenceRequest (the annotation is each request's)
        requests: list = batch  # type: ignore[assignment]
        time.sleep(0.001 + 0.00005 * len(requests))
        echo = Model.predict
        return [echo(self, request) for request in requests]
