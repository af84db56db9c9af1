"""Every cell of docs/protocols.md's inputs and outputs tables, end to end.

Each test names the cell it covers as ``row × column``. The streaming table is covered in
test_http_streaming.py; batching's list inputs in test_http_concurrency.py.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import pytest
from e2e_helpers import RawHttp, error_text, info, outputs_by_name, tensor, text

pytest_plugins = ["e2e_fixtures"]

OIP_ACTIONS = ["infer", "infer_stream", "generate", "generate_stream"]


async def oip_call(client: httpx.AsyncClient, model: str, action: str, body: Any) -> dict:
    """The one response of an OIP call; a streaming action must send exactly one SSE event."""
    r = await client.post(f"/v2/models/{model}/{action}", json=body)
    assert r.status_code == 200, r.text
    if not action.endswith("_stream"):
        return r.json()
    assert r.headers["content-type"].startswith("text/event-stream")
    events = [e for e in r.text.split("\n\n") if e]
    assert len(events) == 1, r.text
    assert events[0].startswith("data: ")
    return json.loads(events[0][len("data: ") :])


TENSOR_REQUEST = {
    "inputs": [
        tensor("ints", "INT32", [2, 2], [[1, 2], [3, 4]]),
        tensor("raw", "BYTES", [2], ["a", "b"]),
        tensor("words", "BYTES", [1], ["hi"], content_type="str"),
        tensor("flag", "BOOL", [1], [True]),
    ]
}

TRITON_REQUEST = {
    "text_input": "hi",
    "n": 3,
    "f": 0.5,
    "b": True,
    "ints": [1, 2],
    "floats": [1.5, 2],
    "words": ["a", "b"],
    "flags": [True, False],
    "id": "r1",
    "parameters": {"temperature": 0.1},
}

JSON_VALUES = [
    (
        {"a": 1, "b": [True, None]},
        {"dict": {"a": {"int": 1}, "b": {"list": [{"bool": True}, {"none": None}]}}},
    ),
    ([1, "x"], {"list": [{"int": 1}, {"str": "x"}]}),
    ("text", {"str": "text"}),
    (3, {"int": 3}),
    (2.5, {"float": 2.5}),
    (True, {"bool": True}),
    (None, {"none": None}),
]

ORDER = {"item": "pen", "qty": 3, "tags": ["a", "b"]}


# == inputs table ===============================================================================

# -- row: OIP REST, tensor form -----------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("action", OIP_ACTIONS)
async def test_oip_tensor_form_x_no_annotation(client: httpx.AsyncClient, action: str) -> None:
    # Cell: OIP tensor form × no annotation: dict of name → ndarray of the datatype and shape;
    # BYTES → list[bytes], or list[str] with content_type "str".
    got = info(await oip_call(client, "probe", action, TENSOR_REQUEST))
    assert got == {
        "dict": {
            "ints": {"ndarray": "int32", "shape": [2, 2], "data": [[1, 2], [3, 4]]},
            "raw": {"list": [{"bytes": "a"}, {"bytes": "b"}]},
            "words": {"list": [{"str": "hi"}]},
            "flag": {"ndarray": "bool", "shape": [1], "data": [True]},
        }
    }


@pytest.mark.anyio
@pytest.mark.parametrize("action", OIP_ACTIONS)
async def test_oip_tensor_form_x_inference_request(client: httpx.AsyncClient, action: str) -> None:
    # Cell: OIP tensor form × annotated InferenceRequest: the request itself.
    body = {**TENSOR_REQUEST, "id": "t-1", "parameters": {"p": 1}}
    got = info(await oip_call(client, "probe-oip", action, body))
    assert got == {"type": "InferenceRequest", "request": body}


@pytest.mark.anyio
@pytest.mark.parametrize("action", OIP_ACTIONS)
async def test_oip_tensor_form_x_pydantic(client: httpx.AsyncClient, action: str) -> None:
    # Cell: OIP tensor form × pydantic BaseModel: inputs as JSON values (one-element tensor as
    # its scalar) validated into the model.
    body = {
        "inputs": [
            text("item", "pen"),
            tensor("qty", "INT64", [1], [3]),
            tensor("tags", "BYTES", [2], ["a", "b"], content_type="str"),
        ]
    }
    got = info(await oip_call(client, "probe-schema", action, body))
    assert got == {"type": "Order", "data": ORDER}


@pytest.mark.anyio
async def test_oip_tensor_form_x_pydantic_failure_lists_locations(
    client: httpx.AsyncClient,
) -> None:
    # Cell: validation failure (OIP) → 400 whose details list the field locations.
    body = {"inputs": [text("qty", "many")]}
    r = await client.post("/v2/models/probe-schema/infer", json=body)
    assert r.status_code == 400
    error = r.json()
    assert "probe-schema" in error["error"]
    assert sorted(d["loc"] for d in error["details"]) == [["item"], ["qty"]]


# -- row: OIP generate, Triton's form -----------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("action", ["generate", "generate_stream"])
async def test_triton_form_x_no_annotation(client: httpx.AsyncClient, action: str) -> None:
    # Cell: Triton generate form × no annotation: every top-level field but id and parameters
    # is an input: str → list[str] of one, number → 1-element INT64/FP64, bool → BOOL,
    # flat list → 1-D tensor.
    answer = await oip_call(client, "probe", action, TRITON_REQUEST)
    assert answer["model_name"] == "probe"
    assert answer["id"] == "r1"
    assert info(answer) == {
        "dict": {
            "text_input": {"list": [{"str": "hi"}]},
            "n": {"ndarray": "int64", "shape": [1], "data": [3]},
            "f": {"ndarray": "float64", "shape": [1], "data": [0.5]},
            "b": {"ndarray": "bool", "shape": [1], "data": [True]},
            "ints": {"ndarray": "int64", "shape": [2], "data": [1, 2]},
            "floats": {"ndarray": "float64", "shape": [2], "data": [1.5, 2.0]},
            "words": {"list": [{"str": "a"}, {"str": "b"}]},
            "flags": {"ndarray": "bool", "shape": [2], "data": [True, False]},
        }
    }


@pytest.mark.anyio
@pytest.mark.parametrize("action", ["generate", "generate_stream"])
async def test_triton_form_x_inference_request(client: httpx.AsyncClient, action: str) -> None:
    # Cell: Triton generate form × InferenceRequest: the converted request.
    body = {"text_input": "hi", "n": 3, "id": "r2", "parameters": {"max_tokens": 4}}
    got = info(await oip_call(client, "probe-oip", action, body))
    assert got == {
        "type": "InferenceRequest",
        "request": {
            "id": "r2",
            "parameters": {"max_tokens": 4},
            "inputs": [
                {
                    "name": "text_input",
                    "shape": [1],
                    "datatype": "BYTES",
                    "data": ["hi"],
                    "parameters": {"content_type": "str"},
                },
                {"name": "n", "shape": [1], "datatype": "INT64", "data": [3]},
            ],
        },
    }


@pytest.mark.anyio
@pytest.mark.parametrize("action", ["generate", "generate_stream"])
async def test_triton_form_x_pydantic(client: httpx.AsyncClient, action: str) -> None:
    # Cell: Triton generate form × pydantic: as the tensor form.
    got = info(await oip_call(client, "probe-schema", action, ORDER))
    assert got == {"type": "Order", "data": ORDER}


@pytest.mark.anyio
async def test_triton_form_rejects_fields_that_are_no_tensor(client: httpx.AsyncClient) -> None:
    # Triton form: a field that is not a string, number, bool or (rectangular) list of them → 400.
    r = await client.post("/v2/models/probe/generate", json={"text_input": {"a": 1}})
    assert r.status_code == 400
    assert "text_input" in error_text(r)


# -- row: Truss :predict ------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(("value", "described"), JSON_VALUES)
async def test_truss_x_no_annotation(client: httpx.AsyncClient, value: Any, described: Any) -> None:
    # Cell: Truss × no annotation: the parsed JSON value (dict, list, str, number, bool, None).
    r = await client.post(
        "/v1/models/probe:predict",
        content=json.dumps(value),
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 200, r.text
    assert info(r.json()) == described


@pytest.mark.anyio
async def test_truss_x_inference_request(client: httpx.AsyncClient) -> None:
    # Cell: Truss × InferenceRequest: the body converted (400 if it is not one).
    r = await client.post("/v1/models/probe-oip:predict", json=TENSOR_REQUEST)
    assert r.status_code == 200, r.text
    assert info(r.json()) == {"type": "InferenceRequest", "request": TENSOR_REQUEST}
    r = await client.post("/v1/models/probe-oip:predict", json={"prompt": "not a request"})
    assert r.status_code == 400
    assert "probe-oip" in error_text(r)


@pytest.mark.anyio
async def test_truss_x_pydantic(client: httpx.AsyncClient) -> None:
    # Cell: Truss × pydantic: the body validated; a failure is a 400 listing locations.
    r = await client.post("/v1/models/probe-schema:predict", json={"item": "pen", "qty": 3})
    assert r.status_code == 200, r.text
    assert info(r.json()) == {"type": "Order", "data": {"item": "pen", "qty": 3, "tags": []}}
    r = await client.post("/v1/models/probe-schema:predict", json={"item": 5, "qty": "many"})
    assert r.status_code == 400
    body = r.json()
    assert set(body) == {"error"}  # Truss's shape: the message names each location
    assert "probe-schema" in body["error"]
    assert "item:" in body["error"] and "qty:" in body["error"]
    assert r.headers["x-baseten-error-code"] == "700"


# -- row: TorchServe, JSON content type ---------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    "content_type", ["application/json", "application/json; charset=utf-8", "application/x+json"]
)
@pytest.mark.parametrize(("value", "described"), JSON_VALUES[:3])
async def test_torchserve_json_x_no_annotation(
    client: httpx.AsyncClient, content_type: str, value: Any, described: Any
) -> None:
    # Cell: TorchServe application/json (or +json) × no annotation: the parsed JSON value.
    r = await client.post(
        "/predictions/probe", content=json.dumps(value), headers={"content-type": content_type}
    )
    assert r.status_code == 200, r.text
    assert info(r.json()) == described


@pytest.mark.anyio
async def test_torchserve_json_x_inference_request(client: httpx.AsyncClient) -> None:
    # Cell: TorchServe JSON × InferenceRequest: converted (400 if it is not one).
    r = await client.post("/predictions/probe-oip", json=TENSOR_REQUEST)
    assert r.status_code == 200, r.text
    assert info(r.json()) == {"type": "InferenceRequest", "request": TENSOR_REQUEST}
    r = await client.post("/predictions/probe-oip", json=[1, 2])
    assert r.status_code == 400
    assert "probe-oip" in error_text(r)


@pytest.mark.anyio
async def test_torchserve_json_x_pydantic(client: httpx.AsyncClient) -> None:
    # Cell: TorchServe JSON × pydantic: validated into the model.
    r = await client.post("/predictions/probe-schema", json=ORDER)
    assert r.status_code == 200, r.text
    assert info(r.json()) == {"type": "Order", "data": ORDER}
    r = await client.post("/predictions/probe-schema", json={"item": "pen"})
    assert r.status_code == 400
    assert [d["loc"] for d in r.json()["details"]] == [["qty"]]


# -- row: TorchServe, any other content type ----------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("content_type", ["text/plain", "application/octet-stream", None])
async def test_torchserve_other_x_no_annotation(
    client: httpx.AsyncClient, content_type: str | None
) -> None:
    # Cell: TorchServe other content type × no annotation: bytes.
    headers = {"content-type": content_type} if content_type else {}
    r = await client.post("/predictions/probe", content=b'{"a": 1}\xff', headers=headers)
    assert r.status_code == 200, r.text
    assert info(r.json()) == {"bytes": '{"a": 1}\xff'}


@pytest.mark.anyio
async def test_torchserve_other_x_inference_request(client: httpx.AsyncClient) -> None:
    # Cell: TorchServe other content type × InferenceRequest: the bytes parsed as one (400 if not).
    headers = {"content-type": "text/plain"}
    r = await client.post(
        "/predictions/probe-oip", content=json.dumps(TENSOR_REQUEST), headers=headers
    )
    assert r.status_code == 200, r.text
    assert info(r.json()) == {"type": "InferenceRequest", "request": TENSOR_REQUEST}
    r = await client.post("/predictions/probe-oip", content=b"\x00\x01 not json", headers=headers)
    assert r.status_code == 400
    assert "probe-oip" in error_text(r)


@pytest.mark.anyio
async def test_torchserve_other_x_pydantic(client: httpx.AsyncClient) -> None:
    # Cell: TorchServe other content type × pydantic: the bytes validated as JSON.
    headers = {"content-type": "application/octet-stream"}
    r = await client.post("/predictions/probe-schema", content=json.dumps(ORDER), headers=headers)
    assert r.status_code == 200, r.text
    assert info(r.json()) == {"type": "Order", "data": ORDER}
    r = await client.post(
        "/predictions/probe-schema", content=b'{"item": "pen", "qty": []}', headers=headers
    )
    assert r.status_code == 400
    assert [d["loc"] for d in r.json()["details"]] == [["qty"]]


# -- a method that takes only the request: the body is never parsed -----------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("path", "content_type"),
    [
        ("/v1/models/rawbody:predict", "application/json"),
        ("/predictions/rawbody", "application/json"),
        ("/predictions/rawbody", "application/octet-stream"),
        ("/v2/models/rawbody/infer", "application/json"),
    ],
)
async def test_request_only_model_reads_the_unparsed_body(
    client: httpx.AsyncClient, path: str, content_type: str
) -> None:
    # Cell: a method that takes only the request gets no inputs; Podium never parses the body
    # (this body is not JSON), and the model reads it itself with request.body().
    r = await client.post(path, content=b"not json {", headers={"content-type": content_type})
    assert r.status_code == 200, r.text
    body = r.json()
    if "outputs" in body:
        body = {k: v["data"][0] for k, v in outputs_by_name(body).items()}
    assert body == {"size": 10, "head": "not json {", "method": "POST", "path": path}


@pytest.mark.anyio
async def test_request_only_model_streams_a_chunked_body(models_server: Any) -> None:
    # Cell: the model may read the body itself with request.stream(), chunk by chunk.
    raw = await RawHttp.connect(models_server.url)
    try:
        await raw.send("POST", "/v1/models/rawbody:predict?mode=stream", [b"abc", b"def", b"ghi"])
        status, headers = await raw.head()
        body = json.loads(await raw.body(headers))
    finally:
        await raw.close()
    assert status == 200
    assert (body["size"], body["head"]) == (9, "abcdefghi")


# == outputs table ==============================================================================

RESPONSE_OUTPUTS = [
    {"name": "a", "shape": [1], "datatype": "INT64", "data": [7]},
    {"name": "b", "shape": [2], "datatype": "FP32", "data": [1.5, 2.5]},
]

# kind → the outputs an OIP infer answer carries.
OIP_OUTPUTS: dict[str, list[dict]] = {
    "response": RESPONSE_OUTPUTS,
    "dict": [
        {"name": "f", "shape": [1, 2], "datatype": "FP64", "data": [1.0, 2.0]},
        {"name": "i", "shape": [1], "datatype": "INT64", "data": [3]},
        {"name": "s", "shape": [1], "datatype": "BYTES", "data": ["hi"]},
        {"name": "l", "shape": [3], "datatype": "INT64", "data": [1, 2, 3]},
    ],
    "ndarray": [
        {"name": "output", "shape": [2, 3], "datatype": "INT32", "data": [0, 1, 2, 3, 4, 5]}
    ],
    "list": [{"name": "output", "shape": [2], "datatype": "FP64", "data": [1.5, 2.5]}],
    "number": [{"name": "output", "shape": [1], "datatype": "INT64", "data": [42]}],
    "float": [{"name": "output", "shape": [1], "datatype": "FP64", "data": [0.25]}],
    "bool": [{"name": "output", "shape": [1], "datatype": "BOOL", "data": [True]}],
    "str": [{"name": "output", "shape": [1], "datatype": "BYTES", "data": ["héllo wörld"]}],
    "bytes": [{"name": "output", "shape": [1], "datatype": "BYTES", "data": ["raw bytes"]}],
}

# kind → the top-level fields of a Triton-form generate answer.
TRITON_FIELDS: dict[str, dict] = {
    "response": {"a": 7, "b": [1.5, 2.5]},
    "dict": {"f": [1.0, 2.0], "i": 3, "s": "hi", "l": [1, 2, 3]},
    "ndarray": {"output": [0, 1, 2, 3, 4, 5]},
    "list": {"output": [1.5, 2.5]},
    "number": {"output": 42},
    "float": {"output": 0.25},
    "bool": {"output": True},
    "str": {"output": "héllo wörld"},
    "bytes": {"output": "raw bytes"},
}

# kind → the JSON a Truss client gets (TorchServe too, except str and bytes).
JSON_ANSWERS: dict[str, Any] = {
    "response": {"outputs": RESPONSE_OUTPUTS, "parameters": {"from": "model"}},
    "dict": {"f": [[1.0, 2.0]], "i": 3, "s": "hi", "l": [1, 2, 3]},
    "ndarray": [[0, 1, 2], [3, 4, 5]],
    "list": [1.5, 2.5],
    "number": 42,
    "float": 0.25,
    "bool": True,
    "str": "héllo wörld",
    "bytes": base64.b64encode(b"raw bytes").decode(),
    "none": None,
    "nested": {"outer": {"inner": 1}},
    "ragged": [[1], [1, 2]],
}

NOT_FOR_OIP = ["badbytes", "starlette", "none", "nested", "ragged", "object"]


@pytest.mark.anyio
@pytest.mark.parametrize("kind", sorted(OIP_OUTPUTS))
async def test_outputs_x_oip_infer(client: httpx.AsyncClient, kind: str) -> None:
    # Cells: column OIP infer, rows InferenceResponse (name, version and the request's id
    # filled in), dict (one output per key, datatype from the value), ndarray/list/number/bool
    # (one output "output"), str (BYTES [1]) and bytes (BYTES, UTF-8).
    body = {"id": f"id-{kind}", "inputs": [text("kind", kind)]}
    r = await client.post("/v2/models/emit/infer", json=body)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["model_name"] == "emit"
    assert answer["id"] == f"id-{kind}"
    assert answer["outputs"] == OIP_OUTPUTS[kind]
    if kind == "response":
        assert answer["parameters"] == {"from": "model"}


@pytest.mark.anyio
@pytest.mark.parametrize("kind", NOT_FOR_OIP)
async def test_outputs_x_oip_infer_unrepresentable(client: httpx.AsyncClient, kind: str) -> None:
    # Cells: column OIP infer, rows non-UTF-8 bytes, starlette Response and anything OIP cannot
    # carry (None, nested dicts, ragged lists, objects): 400 naming the model and the reason.
    r = await client.post("/v2/models/emit/infer", json={"inputs": [text("kind", kind)]})
    assert r.status_code == 400, r.text
    message = error_text(r)
    assert "'emit'" in message
    assert "cannot carry" in message or "not representable" in message
    r = await client.post("/v2/models/emit/infer", json={"inputs": [text("kind", "number")]})
    assert r.status_code == 200


@pytest.mark.anyio
@pytest.mark.parametrize("kind", sorted(TRITON_FIELDS))
async def test_outputs_x_triton_generate(client: httpx.AsyncClient, kind: str) -> None:
    # Cells: column OIP generate in Triton's form: each output a top-level field, a
    # one-element output as its scalar.
    r = await client.post("/v2/models/emit/generate", json={"kind": kind})
    assert r.status_code == 200, r.text
    assert r.json() == {"model_name": "emit", **TRITON_FIELDS[kind]}


@pytest.mark.anyio
@pytest.mark.parametrize("kind", NOT_FOR_OIP)
async def test_outputs_x_triton_generate_unrepresentable(
    client: httpx.AsyncClient, kind: str
) -> None:
    # Cells: column Triton generate, rows starlette Response and what OIP cannot carry: 400.
    r = await client.post("/v2/models/emit/generate", json={"kind": kind})
    assert r.status_code == 400, r.text
    assert "'emit'" in error_text(r)


@pytest.mark.anyio
@pytest.mark.parametrize("kind", sorted(JSON_ANSWERS))
async def test_outputs_x_truss(client: httpx.AsyncClient, kind: str) -> None:
    # Cells: column Truss :predict: JSON for every row (arrays as nested lists, str a JSON
    # string, bytes a base64 JSON string, None/nested/ragged as JSON since they encode).
    r = await client.post("/v1/models/emit:predict", json={"kind": kind})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    assert r.json() == JSON_ANSWERS[kind]


@pytest.mark.anyio
@pytest.mark.parametrize("kind", sorted(JSON_ANSWERS))
async def test_outputs_x_torchserve(client: httpx.AsyncClient, kind: str) -> None:
    # Cells: column TorchServe: str as text/plain, bytes as application/octet-stream, the rest
    # JSON.
    r = await client.post("/predictions/emit", json={"kind": kind})
    assert r.status_code == 200, r.text
    content_type = r.headers["content-type"]
    if kind == "str":
        assert content_type.startswith("text/plain")
        assert r.text == "héllo wörld"
    elif kind == "bytes":
        assert content_type == "application/octet-stream"
        assert r.content == b"raw bytes"
    else:
        assert content_type == "application/json"
        assert r.json() == JSON_ANSWERS[kind]


@pytest.mark.anyio
async def test_outputs_x_torchserve_bytes_that_are_not_text(client: httpx.AsyncClient) -> None:
    # Cell: bytes × TorchServe: the bytes as they are, even when they are not UTF-8.
    r = await client.post("/predictions/emit", json={"kind": "badbytes"})
    assert r.status_code == 200
    assert r.content == b"\xff\xfe\x00"


@pytest.mark.anyio
@pytest.mark.parametrize("path", ["/v1/models/emit:predict", "/predictions/emit"])
async def test_outputs_starlette_response_is_sent_as_is(
    client: httpx.AsyncClient, path: str
) -> None:
    # Cells: starlette Response × Truss and × TorchServe: sent as it is.
    r = await client.post(path, json={"kind": "starlette"})
    assert r.status_code == 201
    assert r.headers["x-made-by"] == "emit"
    assert r.headers["content-type"].startswith("text/x-custom")
    assert r.text == "made by the model"


@pytest.mark.anyio
@pytest.mark.parametrize("path", ["/v1/models/emit:predict", "/predictions/emit"])
async def test_outputs_that_json_cannot_encode_are_refused(
    client: httpx.AsyncClient, path: str
) -> None:
    # Cells: "anything OIP cannot carry" × Truss / TorchServe, when not even JSON can encode it:
    # Truss's server answers 500 (its "Unhandled exception", code 500), TorchServe's frontend 400.
    r = await client.post(path, json={"kind": "object"})
    assert "Opaque" in error_text(r)
    if path.startswith("/v1/"):
        assert r.status_code == 500
        assert r.json() == {
            "error": "Unhandled exception: TypeError: Object of type Opaque is not JSON serializable"
        }
        assert r.headers["x-baseten-error-code"] == "500"
    else:
        assert r.status_code == 400
    r = await client.post(path, json={"kind": "number"})
    assert r.status_code == 200
