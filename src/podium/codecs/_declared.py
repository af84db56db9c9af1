"""A request against the tensors its model declares: :func:`check_declared`."""

from __future__ import annotations

from typing import NoReturn

from podium.errors import InvalidTensor
from podium.types import InferenceRequest, RequestInput, Signature, TensorSpec

__all__ = ["check_declared"]


def check_declared(request: InferenceRequest, signature: Signature, model: str) -> None:
    """Raise :class:`InvalidTensor`, naming the input and ``model`` (its label, such as
    ``model 'm'``), unless ``request`` has exactly the inputs ``signature`` declares, each with
    the declared datatype and a shape of the declared rank whose every dimension is the
    declared one (``-1``: any size); with a ``max_batch_size``, every input's first dimension
    (its batch size) is the same and at most that. Only names, datatypes and shapes are read:
    the data is the protocol's to check (:func:`check_request`)."""
    declared = signature.by_name
    inputs = request.inputs
    for inp in inputs:
        spec = declared.get(inp.name)
        if spec is None:
            raise InvalidTensor(
                f"{model} has no input '{inp.name}'; it declares {_list(signature.inputs)}"
            )
        if inp.datatype != spec.datatype:
            raise InvalidTensor(
                f"input '{inp.name}' has datatype {inp.datatype}, but {model} declares it "
                f"{spec.datatype}"
            )
        shape = inp.shape
        if len(shape) != len(spec.shape):
            _shape_error(inp, spec, model)
        for index, size in spec.fixed:  # a loop over a few dimensions, no generator: cheaper
            if shape[index] != size:
                _shape_error(inp, spec, model)
    if len(inputs) != len(declared):
        sent = {inp.name for inp in inputs}
        missing = [spec for spec in signature.inputs if spec.name not in sent]
        if missing:
            what = "input" if len(missing) == 1 else "inputs"
            raise InvalidTensor(f"{model} needs {what} {_list(missing)}, missing from the request")
    batch = signature.max_batch_size
    if batch and inputs:
        _check_batch(inputs[0].name, inputs, batch, model)


def _shape_error(inp: RequestInput, spec: TensorSpec, model: str) -> NoReturn:
    raise InvalidTensor(
        f"input '{inp.name}' has shape {list(inp.shape)}, but {model} declares "
        f"{list(spec.shape)} (-1: any size)"
    )


def _check_batch(first: str, inputs: list[RequestInput], batch: int, model: str) -> None:
    size = inputs[0].shape[0]
    for inp in inputs:
        if inp.shape[0] != size:
            raise InvalidTensor(
                f"inputs '{first}' and '{inp.name}' have different batch sizes (first "
                f"dimensions) {size} and {inp.shape[0]}"
            )
    if size > batch:
        raise InvalidTensor(
            f"input '{first}' has batch size {size} (its first dimension), but {model} takes at "
            f"most {batch} (its max_batch_size)"
        )


def _list(specs: tuple[TensorSpec, ...] | list[TensorSpec]) -> str:
    return ", ".join(spec.describe() for spec in specs) or "no inputs"
