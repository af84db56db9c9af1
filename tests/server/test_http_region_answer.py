"""An output written into shared memory is answered over REST as Triton answers it: name,
datatype and shape, none of the extension's parameters (Triton's C++ HTTP client, the one
``perf_analyzer`` uses, takes any output ``parameters`` for the binary extension's and fails
without ``binary_data_size``). The model's own parameters stay."""

from __future__ import annotations

import json

import pytest

from podium.server.http._oip import encode_response, render_binary
from podium.types import InferenceResponse, ResponseOutput

IN_REGION = {
    "shared_memory_region": "r",
    "shared_memory_offset": 4,
    "shared_memory_byte_size": 16,
}


def response(*, own: dict[str, object] | None = None) -> InferenceResponse:
    return InferenceResponse(
        model_name="m",
        outputs=[
            ResponseOutput(name="plain", shape=[1], datatype="FP32", data=[1.5]),
            ResponseOutput(
                name="y",
                shape=[4],
                datatype="INT32",
                parameters={**IN_REGION, **(own or {})},
            ),
            ResponseOutput(name="text", shape=[1], datatype="BYTES", data=[b"hi"]),
        ],
    )


def test_plain_json_answer_leaves_the_region_parameters_out() -> None:
    outputs = json.loads(encode_response(response()))["outputs"]
    assert outputs == [
        {"name": "plain", "shape": [1], "datatype": "FP32", "data": [1.5]},
        {"name": "y", "shape": [4], "datatype": "INT32"},
        {"name": "text", "shape": [1], "datatype": "BYTES", "data": ["hi"]},
    ]


@pytest.mark.parametrize("binary", [None, (True, {}), (False, {"plain": True})])
def test_binary_answer_leaves_the_region_parameters_out(
    binary: tuple[bool, dict[str, bool]] | None,
) -> None:
    body, length = render_binary(response(), binary)
    outputs = json.loads(body if length is None else body[:length])["outputs"]
    assert outputs[1] == {"name": "y", "shape": [4], "datatype": "INT32"}


def test_the_models_own_parameters_stay() -> None:
    outputs = json.loads(encode_response(response(own={"unit": "cm"})))["outputs"]
    assert outputs[1]["parameters"] == {"unit": "cm"}
    body, _ = render_binary(response(own={"unit": "cm"}), None)
    assert json.loads(body)["outputs"][1]["parameters"] == {"unit": "cm"}
