"""Open Inference Protocol REST end to end: health, metadata, versions and infer, with httpx and
Triton's own client (JSON tensors, ``binary_data=False``)."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest
import tritonclient.http as triton
from conftest import Server
from e2e_helpers import outputs_by_name, tensor, text
from tritonclient.utils import InferenceServerException

pytest_plugins = ["e2e_fixtures"]

VERSIONS = ["1", "2", "10"]


def triton_client(server: Server) -> triton.InferenceServerClient:
    return triton.InferenceServerClient(server.url.removeprefix("http://"))


# -- server health and metadata ------------------------------------------------------------------


@pytest.mark.anyio
async def test_server_metadata_and_health(client: httpx.AsyncClient) -> None:
    r = await client.get("/v2")
    assert r.status_code == 200
    meta = r.json()
    assert meta["name"] == "podium"
    assert meta["version"]
    assert {"generate", "infer_stream"} <= set(meta["extensions"])
    r = await client.get("/v2/health/live")
    assert (r.status_code, r.json()) == (200, {"live": True})
    r = await client.get("/v2/health/ready")
    assert (r.status_code, r.json()) == (200, {"ready": True})


def test_tritonclient_health_and_metadata(models_server: Server) -> None:
    c = triton_client(models_server)
    try:
        assert c.is_server_live()
        assert c.is_server_ready()
        assert c.get_server_metadata()["name"] == "podium"
        assert c.is_model_ready("versioned")
        assert c.is_model_ready("versioned", "2")
        meta = c.get_model_metadata("versioned")
        assert meta["name"] == "versioned"
        assert meta["version"] == "10"
        assert meta["versions"] == VERSIONS
        assert meta["platform"] == "e2e-test"
        assert meta["inputs"] == [{"name": "x", "datatype": "FP64", "shape": [-1]}]
        assert meta["outputs"] == [{"name": "version", "datatype": "BYTES", "shape": [1]}]
        assert c.get_model_metadata("versioned", "1")["version"] == "1"
        with pytest.raises(InferenceServerException) as info:
            c.get_model_metadata("versioned", "7")
        assert "'versioned' version 7 is not found" in str(info.value)
    finally:
        c.close()


@pytest.mark.anyio
@pytest.mark.parametrize("route", ["", "/ready"])
async def test_an_unknown_model_or_version_is_404_on_rest(
    client: httpx.AsyncClient, models_server: Server, route: str
) -> None:
    # Triton answers 400 "Model version not ready" for an unknown model's /ready; Podium keeps
    # 404 (503 for a known model that is not ready). tritonclient.http reads any non-200 as
    # not ready.
    for path in (
        "/v2/models/nope",
        "/v2/models/versioned/versions/7",
        "/v2/models/emit/versions/2",
    ):
        r = await client.get(path + route)
        assert r.status_code == 404, path
    c = triton_client(models_server)
    try:
        assert c.is_model_ready("nope") is False
        assert c.is_model_ready("versioned", "7") is False
    finally:
        c.close()


# -- versions: an unversioned model is version "1" too ------------------------------------------


@pytest.mark.anyio
async def test_an_unversioned_model_lists_and_answers_to_version_1(
    client: httpx.AsyncClient,
) -> None:
    for base in ("/v2/models/tensors", "/v2/models/tensors/versions/1"):
        r = await client.get(base)
        assert (r.status_code, r.json()["versions"]) == (200, ["1"])
        r = await client.get(base + "/ready")
        assert (r.status_code, r.json()["ready"]) == (200, True)
        r = await client.post(base + "/infer", json={"inputs": [tensor("x", "INT64", [1], [3])]})
        assert r.status_code == 200, r.text
        assert outputs_by_name(r.json())["x"]["data"] == [3]
    r = await client.post("/v2/models/tensors/versions/2/infer", json={"inputs": []})
    assert r.status_code == 404
    assert "version 2 is not found (versions: 1 (unversioned))" in r.json()["error"]


def test_tritonclient_pinning_version_1_reaches_an_unversioned_model(
    models_server: Server,
) -> None:
    c = triton_client(models_server)
    try:
        assert c.is_model_ready("tensors", "1")
        assert c.get_model_metadata("tensors", "1")["versions"] == ["1"]
        x = triton.InferInput("x", [2], "INT32")
        x.set_data_from_numpy(np.array([5, 6], dtype=np.int32), binary_data=False)
        result = c.infer("tensors", [x], model_version="1")
        assert result.as_numpy("x").tolist() == [5, 6]
    finally:
        c.close()


# -- versions: every model route, unversioned (default: the highest, 10) and versioned ---------


@pytest.mark.anyio
@pytest.mark.parametrize("version", [None, *VERSIONS])
async def test_every_model_route_reaches_the_version(
    client: httpx.AsyncClient, version: str | None
) -> None:
    base = "/v2/models/versioned" + (f"/versions/{version}" if version else "")
    expected = version or "10"

    r = await client.get(base)
    assert r.status_code == 200
    assert r.json()["version"] == expected

    r = await client.get(base + "/ready")
    assert r.status_code == 200
    assert r.json()["ready"] is True
    assert r.json().get("version") == version

    request = {"inputs": [tensor("x", "FP64", [1], [1.0])]}
    r = await client.post(base + "/infer", json=request)
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["model_name"], body["model_version"]) == ("versioned", expected)
    assert outputs_by_name(body)["version"]["data"] == [expected]

    # Triton's generate form: the field is the model's declared input x (FP64 [-1]).
    r = await client.post(base + "/generate", json={"x": 1.5})
    assert r.status_code == 200, r.text
    assert r.json()["version"] == expected
    assert r.json()["model_version"] == expected

    for action in ("infer_stream", "generate_stream"):
        r = await client.post(base + "/" + action, json=request)
        assert r.status_code == 200, r.text
        assert r.headers["content-type"].startswith("text/event-stream")
        (event,) = [e for e in r.text.split("\n\n") if e]
        assert event.startswith("data: ")
        item = json.loads(event.removeprefix("data: "))
        assert item["model_version"] == expected
        assert outputs_by_name(item)["version"]["data"] == [expected]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("method", "route"),
    [
        ("GET", ""),
        ("GET", "/ready"),
        ("POST", "/infer"),
        ("POST", "/infer_stream"),
        ("POST", "/generate"),
        ("POST", "/generate_stream"),
    ],
)
async def test_unknown_version_is_404_naming_model_and_version(
    client: httpx.AsyncClient, method: str, route: str
) -> None:
    body = {"inputs": [tensor("x", "FP64", [1], [1.0])]}
    r = await client.request(
        method, f"/v2/models/versioned/versions/7{route}", json=body if method == "POST" else None
    )
    assert r.status_code == 404
    message = r.json()["error"]
    assert message.startswith("Request for unknown model: 'versioned' version 7 is not found")
    r = await client.request(
        method, f"/v2/models/no-such-model{route}", json=body if method == "POST" else None
    )
    assert r.status_code == 404
    assert "'no-such-model'" in r.json()["error"]


# -- infer with Triton's client, JSON tensors -----------------------------------------------------


def test_tritonclient_infer_echo_example(examples_server: Server) -> None:
    c = triton_client(examples_server)
    try:
        ints = np.arange(6, dtype=np.int32).reshape(2, 3)
        words = np.array([b"hello", "wörld".encode()], dtype=np.object_)
        inputs = [
            triton.InferInput("ints", [2, 3], "INT32"),
            triton.InferInput("words", [2], "BYTES"),
        ]
        inputs[0].set_data_from_numpy(ints, binary_data=False)
        inputs[1].set_data_from_numpy(words, binary_data=False)
        outputs = [
            triton.InferRequestedOutput("words", binary_data=False),
            triton.InferRequestedOutput("ints", binary_data=False),
        ]
        result = c.infer("echo", inputs, outputs=outputs, request_id="req-42")
        assert result.get_response()["id"] == "req-42"
        assert result.get_response()["model_name"] == "echo"
        got = result.as_numpy("ints")
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, ints)
        assert result.as_numpy("words").tolist() == ["hello", "wörld"]
        # The outputs come back in the order asked for.
        assert [o["name"] for o in result.get_response()["outputs"]] == ["words", "ints"]
    finally:
        c.close()


TENSOR_CASES = [
    ("BOOL", np.array([[True, False], [False, True]])),
    ("UINT8", np.array([0, 7, 255], dtype=np.uint8)),
    ("UINT16", np.array([0, 65535], dtype=np.uint16)),
    ("UINT32", np.array([0, 2**32 - 1], dtype=np.uint32)),
    ("UINT64", np.array([0, 2**64 - 1], dtype=np.uint64)),
    ("INT8", np.array([-128, 0, 127], dtype=np.int8)),
    ("INT16", np.array([-32768, 32767], dtype=np.int16)),
    ("INT32", np.array([[-(2**31), 1], [2, 2**31 - 1]], dtype=np.int32)),
    ("INT64", np.array([-(2**63), 2**63 - 1], dtype=np.int64)),
    ("FP16", np.array([0.5, -1.25, 65504.0], dtype=np.float16)),
    ("FP32", np.array([[1.5, -2.25, 3.0e38]], dtype=np.float32)),
    ("FP64", np.array([0.1, -1e300], dtype=np.float64)),
    ("BYTES", np.array([b"ab", "ü".encode()], dtype=np.object_)),
]


def test_tritonclient_every_json_datatype_decodes_and_encodes(models_server: Server) -> None:
    c = triton_client(models_server)
    try:
        inputs, outputs = [], []
        for datatype, array in TENSOR_CASES:
            name = f"x_{datatype.lower()}"
            inp = triton.InferInput(name, list(array.shape), datatype)
            inp.set_data_from_numpy(array, binary_data=False)
            inputs.append(inp)
            outputs.append(triton.InferRequestedOutput(name, binary_data=False))
        outputs.append(triton.InferRequestedOutput("kinds", binary_data=False))
        result = c.infer("tensors", inputs, outputs=outputs)
        kinds = set(result.as_numpy("kinds").tolist())
        for datatype, array in TENSOR_CASES:
            name = f"x_{datatype.lower()}"
            response = next(o for o in result.get_response()["outputs"] if o["name"] == name)
            if datatype == "BYTES":
                # BYTES without content_type arrive as list[bytes].
                assert f"{name}:list[bytes]:2" in kinds
                assert result.as_numpy(name).tolist() == ["ab", "ü"]
                continue
            # The model saw an array of exactly the datatype's dtype and the sent shape...
            assert f"{name}:{array.dtype}:{list(array.shape)}" in kinds
            # ...and it comes back as the same datatype, shape and values.
            assert response["datatype"] == datatype
            got = result.as_numpy(name)
            assert got.dtype == array.dtype
            np.testing.assert_array_equal(got, array)
    finally:
        c.close()


@pytest.mark.anyio
async def test_bytes_with_content_type_str_arrive_as_str(client: httpx.AsyncClient) -> None:
    r = await client.post(
        "/v2/models/tensors/infer",
        json={"inputs": [tensor("t", "BYTES", [2], ["a", "ß"], content_type="str")]},
    )
    assert r.status_code == 200, r.text
    outs = outputs_by_name(r.json())
    assert outs["kinds"]["data"] == ["t:list[str]:2"]
    assert outs["t"]["data"] == ["a", "ß"]


@pytest.mark.anyio
async def test_nested_and_flat_data_decode_the_same(client: httpx.AsyncClient) -> None:
    flat = tensor("m", "INT16", [2, 3], [1, 2, 3, 4, 5, 6])
    nested = tensor("m", "INT16", [2, 3], [[1, 2, 3], [4, 5, 6]])
    answers = []
    for t in (flat, nested):
        r = await client.post("/v2/models/tensors/infer", json={"inputs": [t]})
        assert r.status_code == 200, r.text
        answers.append(outputs_by_name(r.json()))
    assert answers[0] == answers[1]
    assert answers[0]["m"] == {
        "name": "m",
        "datatype": "INT16",
        "shape": [2, 3],
        "data": [1, 2, 3, 4, 5, 6],
    }
    assert answers[0]["kinds"]["data"] == ["m:int16:[2, 3]"]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("bad", "words"),
    [
        (tensor("pixels", "FP32", [2, 2], [1.0, 2.0, 3.0]), ["pixels", "4 elements", "3"]),
        (tensor("pixels", "FP32", [3], [[1.0, 2.0], [3.0, 4.0]]), ["pixels", "3 element"]),
        (tensor("pixels", "FLOAT", [1], [1.0]), ["pixels", "unknown datatype", "FLOAT"]),
        (tensor("pixels", "INT32", [2], ["a", "b"]), ["pixels", "INT32", "'a'"]),
        (tensor("pixels", "INT8", [1], [300]), ["pixels", "INT8", "300"]),
        (tensor("pixels", "BOOL", [1], [1]), ["pixels", "BOOL"]),
        (tensor("pixels", "BYTES", [1], [5]), ["pixels", "BYTES"]),
    ],
)
async def test_bad_tensor_is_400_naming_the_input(
    client: httpx.AsyncClient, bad: dict, words: list[str]
) -> None:
    r = await client.post("/v2/models/tensors/infer", json={"inputs": [bad]})
    assert r.status_code == 400
    message = r.json()["error"]
    for word in words:
        assert word in message
    r = await client.post("/v2/models/tensors/infer", json={"inputs": [text("ok", "fine")]})
    assert r.status_code == 200


@pytest.mark.anyio
async def test_requested_outputs_select_and_order(client: httpx.AsyncClient) -> None:
    request = {
        "inputs": [tensor("a", "INT8", [1], [1]), tensor("b", "INT8", [1], [2])],
        "outputs": [{"name": "b"}, {"name": "a"}],
    }
    r = await client.post("/v2/models/tensors/infer", json=request)
    assert r.status_code == 200, r.text
    assert [o["name"] for o in r.json()["outputs"]] == ["b", "a"]

    request["outputs"] = [{"name": "a"}, {"name": "nope"}]
    r = await client.post("/v2/models/tensors/infer", json=request)
    assert r.status_code == 400
    message = r.json()["error"]
    assert "'nope'" in message
    for produced in ("a", "b", "kinds"):
        assert produced in message


@pytest.mark.anyio
async def test_explicit_nulls_for_optional_fields_are_accepted(client: httpx.AsyncClient) -> None:
    request = {
        "id": None,
        "parameters": None,
        "outputs": None,
        "inputs": [
            {"name": "a", "datatype": "INT8", "shape": [1], "data": [5], "parameters": None}
        ],
    }
    r = await client.post("/v2/models/tensors/infer", json=request)
    assert r.status_code == 200, r.text
    body = r.json()
    assert "id" not in body or body["id"] is None
    assert outputs_by_name(body)["a"]["data"] == [5]
    # Nulls inside requested outputs too.
    request["outputs"] = [{"name": "a", "parameters": None}]
    r = await client.post("/v2/models/tensors/infer", json=request)
    assert r.status_code == 200, r.text
    assert [o["name"] for o in r.json()["outputs"]] == ["a"]


@pytest.mark.anyio
async def test_response_echoes_the_request_id(client: httpx.AsyncClient) -> None:
    request = {"id": "abc-123", "inputs": [tensor("a", "INT8", [1], [1])]}
    r = await client.post("/v2/models/tensors/infer", json=request)
    assert r.status_code == 200
    assert r.json()["id"] == "abc-123"
    assert r.json()["model_name"] == "tensors"
    r = await client.post("/v2/models/tensors/generate", json={"id": "gen-7", "a": 1})
    assert r.status_code == 200, r.text
    assert r.json()["id"] == "gen-7"


@pytest.mark.anyio
async def test_whole_responses_carry_content_length_not_chunking(
    client: httpx.AsyncClient,
) -> None:
    body = {"inputs": [{"name": "x", "shape": [2], "datatype": "INT64", "data": [1, 2]}]}
    for r in (
        await client.post("/v2/models/tensors/infer", json=body),
        await client.get("/v2/health/ready"),
        await client.post("/v2/models/nope/infer", json=body),
    ):
        assert r.headers.get("content-length") == str(len(r.content)), r.request.url
        assert "transfer-encoding" not in r.headers


# -- BYTES outputs in JSON are text --------------------------------------------------------------


@pytest.mark.anyio
async def test_bytes_outputs_are_text_in_json(client: httpx.AsyncClient) -> None:
    """A model returning ``bytes`` for a BYTES output (as a Triton python model does): the JSON
    answer holds their UTF-8 text, as Triton's (``["2","3"]``, not base64), on every JSON route."""
    request = {"inputs": [text("kind", "bytes-tensor")]}
    r = await client.post("/v2/models/emit/infer", json=request)
    assert r.status_code == 200, r.text
    outputs = outputs_by_name(r.json())
    assert outputs["y"]["data"] == ["2", "3"]
    assert outputs["n"]["data"] == [["a", "b"]]  # nested lists as sent, each element text
    r = await client.post("/v2/models/emit/infer_stream", json=request)
    (event,) = [e for e in r.text.split("\n\n") if e]
    item = json.loads(event.removeprefix("data: "))
    assert outputs_by_name(item)["y"]["data"] == ["2", "3"]
    r = await client.post("/v2/models/emit/generate", json={"kind": "bytes-tensor"})
    assert (r.status_code, r.json()["y"]) == (200, ["2", "3"])


@pytest.mark.anyio
async def test_bytes_that_are_not_utf8_need_the_binary_extension(
    client: httpx.AsyncClient,
) -> None:
    r = await client.post(
        "/v2/models/emit/infer", json={"inputs": [text("kind", "badbytes-tensor")]}
    )
    assert r.status_code == 400
    message = r.json()["error"]
    assert "model 'emit'" in message and "output 'y'" in message and "not valid UTF-8" in message
    assert "ask for it as binary data" in message
    request = {
        "inputs": [text("kind", "badbytes-tensor")],
        "outputs": [{"name": "y", "parameters": {"binary_data": True}}],
    }
    r = await client.post("/v2/models/emit/infer", json=request)
    assert r.status_code == 200
    length = int(r.headers["inference-header-content-length"])
    assert r.content[length:] == b"\x02\x00\x00\x00\xff\x00"


def test_tritonclient_reads_bytes_outputs_as_triton_sends_them(models_server: Server) -> None:
    # The same request tritonclient sends Triton: JSON outputs give the text (Triton's
    # ["2","3"]), binary outputs the bytes.
    c = triton_client(models_server)
    try:
        kind = triton.InferInput("kind", [1], "BYTES")
        kind.set_data_from_numpy(np.array([b"bytes-tensor"], dtype=np.object_), binary_data=False)
        as_json = triton.InferRequestedOutput("y", binary_data=False)
        result = c.infer("emit", [kind], outputs=[as_json])
        assert result.get_output("y")["data"] == ["2", "3"]
        assert result.as_numpy("y").tolist() == ["2", "3"]
        as_binary = triton.InferRequestedOutput("y", binary_data=True)
        assert c.infer("emit", [kind], outputs=[as_binary]).as_numpy("y").tolist() == [b"2", b"3"]
    finally:
        c.close()


# -- Triton's generate form: nested lists ------------------------------------------------------


@pytest.mark.anyio
async def test_generate_accepts_nested_lists_as_triton_does(client: httpx.AsyncClient) -> None:
    # Triton's generate maps {"INPUT0": [["hello"]]} onto its input; Podium takes the shape from
    # the nesting and the datatype from the values.
    body = {"INPUT0": [["hello"]], "m": [[1, 2], [3, 4]], "f": [[0.5], [1]], "b": [[True, False]]}
    r = await client.post("/v2/models/tensors/generate", json=body)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["INPUT0"] == "hello"
    assert answer["m"] == [1, 2, 3, 4]
    assert answer["kinds"] == [
        "INPUT0:list[str]:1",
        "m:int64:[2, 2]",
        "f:float64:[2, 1]",
        "b:bool:[1, 2]",
    ]
    r = await client.post("/v2/models/tensors/generate_stream", json={"x": [["a", "b"]]})
    assert r.status_code == 200 and '"x":["a","b"]' in r.text


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("value", "words"),
    [
        ([["a"], ["b", "c"]], "ragged"),
        ([["a"], "b"], "ragged"),
        ([[1, "a"]], "must be a string, number, boolean or a list"),
        ([[]], "must be a string, number, boolean or a list"),
        ([[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]], "deeper than 32"),
    ],
)
async def test_generate_refuses_nested_lists_that_are_no_tensor(
    client: httpx.AsyncClient, value: list, words: str
) -> None:
    r = await client.post("/v2/models/tensors/generate", json={"x": value})
    assert r.status_code == 400
    assert "generate field 'x'" in r.json()["error"] and words in r.json()["error"]
