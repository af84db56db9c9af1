"""MLServer's adaptive batching, as the runtime sees it: many requests merged into one.

``merge`` builds the one request MLServer hands a runtime for a batch: the inputs of the same name
concatenated along the first axis (their ``data`` appended, ``shape[0]`` summed), the request
parameters merged (later requests win), the input parameters merged as MLServer merges them (a
key present in several requests becomes the list of their values, except ``content_type`` and
``headers``), and no ``id``. ``split`` cuts the runtime's one response back into one response per
request, each output's rows by the number of rows each request sent.

Both work on JSON-like dicts (``model_dump()`` of the messages), so they serve MLServer's own
types and Podium's alike.
"""

from __future__ import annotations

import math
from typing import Any

from ...codecs import output_elements
from ...errors import BadModelOutput
from ...types import InferenceResponse, ResponseOutput

__all__ = ["merge", "rows_of", "split"]

_SHARED = ("content_type", "headers")


def rows_of(request: dict[str, Any]) -> int:
    """How many rows a request sends: the first dimension of its inputs (MLServer assumes every
    input of a request has the same; a scalar counts as one row)."""
    for inp in request.get("inputs") or []:
        shape = inp.get("shape") or [1]
        return int(shape[0])
    return 0


def _merge_input_parameters(
    merged: dict[str, Any] | None, params: dict[str, Any]
) -> dict[str, Any]:
    if merged is None:
        return dict(params)
    out: dict[str, Any] = {}
    for key in merged.keys() | params.keys():
        if key in merged and key in params and key not in _SHARED:
            earlier = merged[key]
            out[key] = (
                [*earlier, params[key]] if isinstance(earlier, list) else [earlier, params[key]]
            )
        else:
            out[key] = params[key] if key in params else merged[key]
    return out


def _join(parts: list[Any]) -> Any:
    first = parts[0]
    if isinstance(first, str):
        return "".join(parts)
    if isinstance(first, bytes):
        return b"".join(parts)
    if isinstance(first, list):
        return [item for part in parts for item in part]
    return parts


def merge(requests: list[dict[str, Any]]) -> dict[str, Any]:
    """The one request a runtime sees for a batch of ``requests`` (dicts of OIP requests)."""
    by_name: dict[str, list[dict[str, Any]]] = {}
    outputs: dict[str, dict[str, Any]] = {}
    parameters: dict[str, Any] = {}
    asked_outputs = False
    for req in requests:
        parameters.update(req.get("parameters") or {})
        for inp in req.get("inputs") or []:
            by_name.setdefault(inp["name"], []).append(inp)
        if req.get("outputs") is not None:
            asked_outputs = True
            for out in req["outputs"]:
                merged_out = outputs.setdefault(out["name"], {"name": out["name"]})
                if out.get("parameters"):
                    merged_out["parameters"] = {
                        **merged_out.get("parameters", {}),
                        **out["parameters"],
                    }
    inputs = []
    for name, parts in by_name.items():
        params: dict[str, Any] | None = None
        for part in parts:
            if part.get("parameters"):
                params = _merge_input_parameters(params, part["parameters"])
        shape = list(parts[0].get("shape") or [1])
        shape[0] = sum(int((p.get("shape") or [1])[0]) for p in parts)
        merged_input: dict[str, Any] = {
            "name": name,
            "datatype": parts[0]["datatype"],
            "shape": shape,
            "data": _join([p.get("data") for p in parts]),
        }
        if params:
            merged_input["parameters"] = params
        inputs.append(merged_input)
    merged: dict[str, Any] = {"inputs": inputs}
    if parameters:
        merged["parameters"] = parameters
    if asked_outputs:
        merged["outputs"] = list(outputs.values())
    return merged


def _split_parameters(params: dict[str, Any] | None, starts: list[int]) -> list[Any]:
    """Per request: ``content_type`` and ``headers`` as they are; another parameter holding a
    list gives each request the element at the request's first row (as a string, as MLServer
    does); any other value is shared."""
    if not params:
        return [params] * len(starts)
    split: list[dict[str, Any]] = []
    for start in starts:
        own: dict[str, Any] = {}
        for key, value in params.items():
            if key in _SHARED or not isinstance(value, list):
                own[key] = value
            elif start < len(value):
                own[key] = str(value[start])
        split.append(own)
    return split


def split(
    model: str, response: InferenceResponse, rows: list[int], ids: list[str | None]
) -> list[InferenceResponse]:
    """One response per request of a batch: each output's rows cut by ``rows``; ``BadModelOutput``
    naming the output when its first dimension is not the batch's total rows."""
    total = sum(rows)
    starts = [sum(rows[:i]) for i in range(len(rows))]
    per_request: list[list[ResponseOutput]] = [[] for _ in rows]
    for out in response.outputs:
        shape = list(out.shape) or [1]
        if shape[0] != total:
            raise BadModelOutput(
                f"model '{model}' answered a batch of {len(rows)} requests ({total} rows) with "
                f"output '{out.name}' of shape {shape}; with adaptive batching every output's "
                f"first dimension must be the batch's rows ({total})"
            )
        data = output_elements(out.name, out.data)
        width = math.prod(shape[1:])
        params = _split_parameters(out.parameters, starts)
        for i, (start, count) in enumerate(zip(starts, rows, strict=True)):
            per_request[i].append(
                ResponseOutput(
                    name=out.name,
                    shape=[count, *shape[1:]],
                    datatype=out.datatype,
                    parameters=params[i],
                    data=data[start * width : (start + count) * width],
                )
            )
    return [
        InferenceResponse(
            outputs=outputs,
            model_name=response.model_name,
            model_version=response.model_version,
            id=request_id,
            parameters=response.parameters,
        )
        for outputs, request_id in zip(per_request, ids, strict=True)
    ]
