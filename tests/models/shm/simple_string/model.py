"""Triton's `simple_string` example model: BYTES tensors of decimal integers; OUTPUT0 is the
element-wise sum, OUTPUT1 the difference, as UTF-8 bytes. It takes the request itself, so that
the inputs it sees are those the data plane placed (read from shared memory)."""

from podium import InferenceRequest, InferenceResponse, ResponseOutput


def _ints(tensor) -> list[int]:
    return [int(x.decode() if isinstance(x, bytes) else x) for x in tensor.data]


class Model:
    def predict(self, request: InferenceRequest) -> InferenceResponse:
        by_name = {i.name: i for i in request.inputs}
        a, b = by_name["INPUT0"], by_name["INPUT1"]
        sums = [str(x + y).encode() for x, y in zip(_ints(a), _ints(b), strict=True)]
        diffs = [str(x - y).encode() for x, y in zip(_ints(a), _ints(b), strict=True)]
        return InferenceResponse(
            outputs=[
                ResponseOutput(name="OUTPUT0", shape=a.shape, datatype="BYTES", data=sums),
                ResponseOutput(name="OUTPUT1", shape=a.shape, datatype="BYTES", data=diffs),
            ]
        )
