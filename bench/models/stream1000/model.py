"""Podium's side of the streaming benchmark (native model contract).

`predict` is an async generator: Podium streams each item it yields as one Server-Sent Event
on `/v2/models/stream1000/generate_stream`. The number of items comes from the request's INT64
input "n" (default 1000); each item is a plain dict `{"output": i}`, which Podium encodes as
an OIP output tensor.
"""

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

DEFAULT_N = 1000


def _first_scalar(value: Any) -> int:
    """The first element of a scalar, list, nested list or array-like, as an int."""
    if hasattr(value, "reshape"):  # numpy array
        value = value.reshape(-1)[0]
    while isinstance(value, Sequence) and not isinstance(value, str | bytes):
        value = value[0]
    return int(value)


def _count(inputs: Any) -> int:
    """Read N from whatever form the inputs arrive in: a mapping of name -> tensor, an OIP
    request-like object with `.inputs`, or a sequence of tensor-like objects with `.name`."""
    if inputs is None:
        return DEFAULT_N
    if isinstance(inputs, Mapping):
        if "n" in inputs:
            return _first_scalar(inputs["n"])
        if "inputs" in inputs:  # a raw OIP JSON body
            return _count(inputs["inputs"])
        return DEFAULT_N
    tensors = getattr(inputs, "inputs", inputs)
    if isinstance(tensors, Sequence) and not isinstance(tensors, str | bytes):
        for tensor in tensors:
            name = (
                tensor.get("name") if isinstance(tensor, Mapping) else getattr(tensor, "name", None)
            )
            if name == "n":
                data = tensor.get("data") if isinstance(tensor, Mapping) else tensor.data
                return _first_scalar(data)
    return DEFAULT_N


class Model:
    async def predict(self, inputs: Any) -> AsyncIterator[dict[str, int]]:
        for i in range(_count(inputs)):
            yield {"output": i}
