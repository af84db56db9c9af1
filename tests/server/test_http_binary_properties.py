"""Property tests of the binary tensor extension's framing as the REST front end parses and
renders it (``parse_binary`` / ``render_binary``), without a server.

- A body of JSON and the raw bytes of its binary inputs, in input order, mixed with JSON inputs,
  parses to the same tensors bit for bit; an answer with binary outputs renders to JSON of
  ``Inference-Header-Content-Length`` bytes followed by each output's bytes, which decode back.
- Any body and header (wrong sizes, missing or extra bytes, bad headers, any input fields)
  parses and decodes, or raises :class:`InvalidInput`.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
from hypothesis import event, example, given
from hypothesis import strategies as st
from tensor_strategies import (
    DTYPES,
    ITEMSIZE,
    any_datatypes,
    bits,
    datatypes_and_arrays,
    json_values,
    texts,
)

from podium import codecs
from podium.errors import InvalidInput
from podium.server.http._oip import parse_binary, render_binary
from podium.types import InferenceResponse, ResponseOutput


def json_safe(arr: np.ndarray) -> np.ndarray:
    """``arr`` with NaN and infinities, which JSON cannot carry, replaced by 0."""
    if arr.dtype.kind != "f":
        return arr
    out = arr.copy()
    out[~np.isfinite(out)] = 0
    return out


def raw_of(datatype: str, arr: np.ndarray) -> bytes:
    return codecs.encode_raw(
        ResponseOutput(name="x", shape=list(arr.shape), datatype=datatype, data=arr)
    )


@given(
    st.lists(
        st.tuples(datatypes_and_arrays(), st.booleans()),  # (tensor, sent as binary)
        min_size=1,
        max_size=4,
    )
)
def test_binary_and_json_inputs_parse_to_the_tensors_sent(
    cases: list[tuple[tuple[str, np.ndarray], bool]],
) -> None:
    specs: list[dict[str, Any]] = []
    blobs: list[bytes] = []
    for index, ((datatype, arr), binary) in enumerate(cases):
        spec: dict[str, Any] = {"name": f"x{index}", "shape": list(arr.shape), "datatype": datatype}
        if binary:
            blob = raw_of(datatype, arr)
            spec["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            spec["data"] = json_safe(arr).ravel().tolist()
        specs.append(spec)
    head = msgspec.json.encode({"inputs": specs})
    request = parse_binary(head + b"".join(blobs), str(len(head)).encode())
    decoded = codecs.decode_request(request)
    for index, ((datatype, arr), binary) in enumerate(cases):
        got = decoded[f"x{index}"]
        sent = arr if binary else json_safe(arr)
        assert got.dtype == DTYPES[datatype] and got.shape == arr.shape
        assert np.array_equal(bits(got), bits(sent))
        assert not (request.inputs[index].parameters or {}).get("binary_data_size")


@given(st.lists(datatypes_and_arrays(), min_size=1, max_size=4))
def test_binary_outputs_render_as_json_then_their_bytes(
    cases: list[tuple[str, np.ndarray]],
) -> None:
    outputs = [
        ResponseOutput(name=f"y{i}", shape=list(arr.shape), datatype=dt, data=arr)
        for i, (dt, arr) in enumerate(cases)
    ]
    body, length = render_binary(InferenceResponse(outputs=outputs, model_name="m"), (True, {}))
    assert length is not None
    head = msgspec.json.decode(body[:length])
    offset = length
    for index, (datatype, arr) in enumerate(cases):
        described = head["outputs"][index]
        size = described["parameters"]["binary_data_size"]
        assert size == arr.size * ITEMSIZE[datatype] and "data" not in described
        got = codecs.decode_raw("y", datatype, described["shape"], body[offset : offset + size])
        assert np.array_equal(bits(got), bits(arr))
        offset += size
    assert offset == len(body)


# -- malformed bodies --------------------------------------------------------------------------

wire_inputs = st.fixed_dictionaries(
    {
        "name": texts,
        "shape": st.lists(st.integers(min_value=-2, max_value=2**64 - 1), max_size=3),
        "datatype": any_datatypes,
    },
    optional={
        "parameters": st.dictionaries(
            st.sampled_from(["binary_data_size", "content_type"]),
            st.one_of(st.integers(min_value=-2, max_value=64), json_values),
            max_size=2,
        ),
        "data": json_values,
    },
)

headers = st.one_of(
    st.none(),  # the right length
    st.binary(max_size=6),
    st.sampled_from([b"", b"-1", b" 3 ", b"\xd9\xa3", b"99999999999999999999"]),
)


@given(st.lists(wire_inputs, max_size=3), st.binary(max_size=40), headers)
@example(  # the size adds up, but the bytes do not frame a BYTES tensor
    [{"name": "s", "shape": [1], "datatype": "BYTES", "parameters": {"binary_data_size": 4}}],
    b"\x09\x00\x00\x00",
    None,
)
@example(  # a 0-size shape numpy cannot hold
    [{"name": "a", "shape": [0, 2**63], "datatype": "FP32", "parameters": {"binary_data_size": 0}}],
    b"",
    None,
)
def test_any_binary_body_parses_and_decodes_or_raises_invalid_input(
    inputs: list[dict[str, Any]], tail: bytes, header: bytes | None
) -> None:
    head = msgspec.json.encode({"inputs": inputs})
    try:
        request = parse_binary(head + tail, str(len(head)).encode() if header is None else header)
        codecs.decode_request(request)
    except InvalidInput as exc:
        event(f"rejected: {type(exc).__name__}")
        return
    event("decoded")
