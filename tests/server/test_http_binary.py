"""The binary tensor extension of OIP REST, end to end: Triton's client with its defaults
(``binary_data=True`` on inputs and outputs), and hand-built bodies for the exact framing and for
every way the framing can be wrong."""

from __future__ import annotations

import json
import struct
from typing import Any

import httpx
import ml_dtypes
import numpy as np
import pytest
import tritonclient.http as triton
from conftest import Server
from e2e_helpers import info, outputs_by_name, tensor
from tritonclient.utils import InferenceServerException

pytest_plugins = ["e2e_fixtures"]

HEADER = "Inference-Header-Content-Length"

#: One tensor of every kind the tests send: name → (datatype, array).
ARRAYS: dict[str, tuple[str, np.ndarray]] = {
    "fp32": ("FP32", np.array([[1.5, -2.25, 3.0], [0.0, 1e-7, -1e30]], dtype=np.float32)),
    "int64": ("INT64", np.array([-(2**63), 2**63 - 1, 0, 42], dtype=np.int64)),
    "uint8": ("UINT8", np.array([[0, 1], [254, 255]], dtype=np.uint8)),
    "bool": ("BOOL", np.array([True, False, True], dtype=np.bool_)),
    "fp16": ("FP16", np.array([0.5, -65504.0, 1e-3], dtype=np.float16)),
    "bf16": ("BF16", np.array([1.5, -2.0, 3.140625, 1e38], dtype=ml_dtypes.bfloat16)),
    "bytes": ("BYTES", np.array([b"hello", b"", b"\x00\xff raw \x01"], dtype=object)),
}


def triton_client(server: Server) -> triton.InferenceServerClient:
    return triton.InferenceServerClient(server.url.removeprefix("http://"))


def triton_input(name: str, datatype: str, arr: np.ndarray, binary: bool = True) -> Any:
    inp = triton.InferInput(name, list(arr.shape), datatype)
    inp.set_data_from_numpy(arr, binary_data=binary)
    return inp


def length_prefixed(*items: bytes) -> bytes:
    return b"".join(struct.pack("<I", len(item)) + item for item in items)


def binary_body(
    inputs: list[tuple[dict[str, Any], bytes | None]], **fields: Any
) -> tuple[bytes, dict[str, str]]:
    """A request body with binary tensors: ``(spec, raw)`` per input, raw None for JSON data."""
    specs = []
    for spec, raw in inputs:
        spec = dict(spec)
        if raw is not None:
            spec["parameters"] = {**spec.get("parameters", {}), "binary_data_size": len(raw)}
        specs.append(spec)
    head = json.dumps({"inputs": specs, **fields}).encode()
    body = head + b"".join(raw for _, raw in inputs if raw is not None)
    return body, {HEADER: str(len(head))}


def framed(inputs: list[dict[str, Any]], tail: bytes = b"") -> tuple[bytes, dict[str, str]]:
    """A body of these inputs' JSON, exactly as given, followed by ``tail``."""
    head = json.dumps({"inputs": inputs}).encode()
    return head + tail, {HEADER: str(len(head))}


def raw_input(name: str, datatype: str, shape: list[int], **parameters: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": name, "datatype": datatype, "shape": shape}
    if parameters:
        spec["parameters"] = parameters
    return spec


def split(r: httpx.Response) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The JSON of a binary response and each binary output's bytes, by name."""
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/octet-stream"
    length = int(r.headers[HEADER])
    head = json.loads(r.content[:length])
    blobs: dict[str, bytes] = {}
    offset = length
    for out in head["outputs"]:
        size = (out.get("parameters") or {}).get("binary_data_size")
        if size is not None:
            assert "data" not in out
            blobs[out["name"]] = r.content[offset : offset + size]
            offset += size
    assert offset == len(r.content)
    return head, blobs


def assert_same(got: np.ndarray, sent: np.ndarray) -> None:
    assert got.dtype == sent.dtype
    assert got.shape == sent.shape
    if sent.dtype == object:
        assert got.tolist() == sent.tolist()
    else:
        np.testing.assert_array_equal(got, sent)


# -- tritonclient with its defaults --------------------------------------------------------------


def test_server_metadata_advertises_the_extension(models_server: Server) -> None:
    c = triton_client(models_server)
    try:
        assert "binary_tensor_data" in c.get_server_metadata()["extensions"]
    finally:
        c.close()


@pytest.mark.parametrize("name", sorted(ARRAYS))
def test_tritonclient_defaults_round_trip_through_echo(examples_server: Server, name: str) -> None:
    datatype, arr = ARRAYS[name]
    c = triton_client(examples_server)
    try:
        result = c.infer("echo", [triton_input("x", datatype, arr)])
        out = result.get_output("x")
        assert out["datatype"] == datatype
        assert out["shape"] == list(arr.shape)
        assert "data" not in out
        size = len(length_prefixed(*arr.tolist())) if datatype == "BYTES" else arr.nbytes
        assert out["parameters"] == {"binary_data_size": size}
        assert_same(result.as_numpy("x"), arr)
    finally:
        c.close()


def test_tritonclient_every_datatype_in_one_request(examples_server: Server) -> None:
    c = triton_client(examples_server)
    try:
        inputs = [triton_input(name, dt, arr) for name, (dt, arr) in ARRAYS.items()]
        result = c.infer("echo", inputs, request_id="r-1")
        assert result.get_response()["id"] == "r-1"
        assert [o["name"] for o in result.get_response()["outputs"]] == list(ARRAYS)
        for name, (_, arr) in ARRAYS.items():
            assert_same(result.as_numpy(name), arr)
    finally:
        c.close()


def test_tritonclient_binary_tensors_reach_a_model_decoded(models_server: Server) -> None:
    """The model gets what JSON tensors give it: numpy arrays of the dtype, list[bytes]."""
    c = triton_client(models_server)
    try:
        inputs = [triton_input(name, dt, arr) for name, (dt, arr) in ARRAYS.items()]
        # The model's BYTES outputs pass through encode_output, which needs UTF-8 text.
        texts = np.array([b"hello", b"", "h\u00e9".encode()], dtype=object)
        inputs[-1] = triton_input("bytes", "BYTES", texts)
        result = c.infer("tensors", inputs)
        kinds = [k.decode() for k in result.as_numpy("kinds").tolist()]
        assert kinds == [
            "fp32:float32:[2, 3]",
            "int64:int64:[4]",
            "uint8:uint8:[2, 2]",
            "bool:bool:[3]",
            "fp16:float16:[3]",
            "bf16:float32:[4]",
            "bytes:list[bytes]:3",
        ]
        for name in ("fp32", "int64", "uint8", "bool", "fp16"):
            assert_same(result.as_numpy(name), ARRAYS[name][1])
        # BF16 arrives as float32 holding exactly the sent values, and goes back as FP32.
        assert result.get_output("bf16")["datatype"] == "FP32"
        assert_same(result.as_numpy("bf16"), ARRAYS["bf16"][1].astype(np.float32))
        assert_same(result.as_numpy("bytes"), texts)
    finally:
        c.close()


def test_tritonclient_bytes_reach_the_model_as_bytes(models_server: Server) -> None:
    c = triton_client(models_server)
    try:
        sent = np.array([b"\xff\x00", b"ok"], dtype=object)
        result = c.infer("probe-binary", [triton_input("s", "BYTES", sent)])
        got = json.loads(result.as_numpy("info")[0])
        assert got["s"]["data"] == {"type": "list[bytes]", "values": ["ff00", "6f6b"]}
    finally:
        c.close()


def test_inference_request_model_gets_numpy_data(models_server: Server) -> None:
    c = triton_client(models_server)
    try:
        arr = np.array([[1, 2], [3, 4]], dtype=np.int32)
        result = c.infer("probe-binary", [triton_input("x", "INT32", arr)])
        got = json.loads(result.as_numpy("info")[0])["x"]
        assert got == {
            "datatype": "INT32",
            "shape": [2, 2],
            # binary_data_size is framing: the model sees the input as JSON data would give it
            "parameters": None,
            "data": {
                "type": "ndarray",
                "dtype": "int32",
                "shape": [2, 2],
                "writeable": False,  # a view of the request body, not a copy
                "values": [1, 2, 3, 4],
            },
        }
    finally:
        c.close()


def test_tritonclient_mixed_binary_and_json_inputs(examples_server: Server) -> None:
    c = triton_client(examples_server)
    try:
        a = np.arange(6, dtype=np.float32).reshape(2, 3)
        b = np.array([7, 8], dtype=np.int64)
        s = np.array([b"json text"], dtype=object)
        d = np.array([0.25], dtype=np.float16)
        inputs = [
            triton_input("a", "FP32", a),
            triton_input("b", "INT64", b, binary=False),
            triton_input("s", "BYTES", s, binary=False),
            triton_input("d", "FP16", d),
        ]
        result = c.infer("echo", inputs)
        for name, arr in (("a", a), ("b", b), ("s", s), ("d", d)):
            assert_same(result.as_numpy(name), arr)
    finally:
        c.close()


def test_tritonclient_binary_outputs_per_output(models_server: Server) -> None:
    c = triton_client(models_server)
    try:
        a = np.array([1.0, 2.0], dtype=np.float32)
        b = np.array([3, 4], dtype=np.int64)
        outputs = [
            triton.InferRequestedOutput("b", binary_data=False),
            triton.InferRequestedOutput("a", binary_data=True),
        ]
        inputs = [triton_input("a", "FP32", a), triton_input("b", "INT64", b)]
        result = c.infer("tensors", inputs, outputs=outputs)
        response = result.get_response()
        assert [o["name"] for o in response["outputs"]] == ["b", "a"]
        by_name = outputs_by_name(response)
        assert by_name["b"]["data"] == [3, 4]
        assert "parameters" not in by_name["b"]
        assert by_name["a"]["parameters"] == {"binary_data_size": 8}
        assert "data" not in by_name["a"]
        assert_same(result.as_numpy("a"), a)
        assert_same(result.as_numpy("b"), b)
    finally:
        c.close()


def test_tritonclient_json_inputs_binary_outputs(examples_server: Server) -> None:
    """With no outputs named, tritonclient asks for every output binary (binary_data_output)."""
    c = triton_client(examples_server)
    try:
        a = np.array([1.0, 2.0], dtype=np.float64)
        s = np.array([b"x", b"yz"], dtype=object)
        inputs = [triton_input("a", "FP64", a, binary=False), triton_input("s", "BYTES", s, False)]
        result = c.infer("echo", inputs)
        for out in result.get_response()["outputs"]:
            assert "binary_data_size" in out["parameters"]
        assert_same(result.as_numpy("a"), a)
        assert_same(result.as_numpy("s"), s)
    finally:
        c.close()


def test_tritonclient_binary_inputs_json_outputs(examples_server: Server) -> None:
    c = triton_client(examples_server)
    try:
        a = np.array([1.5], dtype=np.float32)
        s = np.array([b"text"], dtype=object)
        outputs = [
            triton.InferRequestedOutput("a", binary_data=False),
            triton.InferRequestedOutput("s", binary_data=False),
        ]
        result = c.infer("echo", [triton_input("a", "FP32", a), triton_input("s", "BYTES", s)])
        assert_same(result.as_numpy("a"), a)
        result = c.infer(
            "echo", [triton_input("a", "FP32", a), triton_input("s", "BYTES", s)], outputs=outputs
        )
        by_name = outputs_by_name(result.get_response())
        assert by_name["a"] == {"name": "a", "shape": [1], "datatype": "FP32", "data": [1.5]}
        assert by_name["s"] == {"name": "s", "shape": [1], "datatype": "BYTES", "data": ["text"]}
    finally:
        c.close()


def test_tritonclient_versioned_route(models_server: Server) -> None:
    c = triton_client(models_server)
    try:
        x = np.array([1.0], dtype=np.float64)
        result = c.infer("versioned", [triton_input("x", "FP64", x)], model_version="2")
        assert result.as_numpy("version").tolist() == [b"2"]
    finally:
        c.close()


def test_tritonclient_error_is_reported_and_the_next_call_works(models_server: Server) -> None:
    c = triton_client(models_server)
    try:
        with pytest.raises(InferenceServerException) as info_:
            c.infer(
                "tensors",
                [triton_input("x", "FP32", np.zeros(2, np.float32))],
                outputs=[triton.InferRequestedOutput("nope")],
            )
        assert info_.value.status() == "400"
        assert "requested output 'nope'" in info_.value.message()
        result = c.infer("tensors", [triton_input("x", "FP32", np.ones(2, np.float32))])
        assert_same(result.as_numpy("x"), np.ones(2, np.float32))
    finally:
        c.close()


# -- the framing, built by hand ------------------------------------------------------------------


@pytest.mark.anyio
async def test_binary_response_framing(client: httpx.AsyncClient) -> None:
    arr = np.array([1, 2, 3], dtype=np.int32)
    body, headers = binary_body(
        [(raw_input("a", "INT32", [3]), arr.tobytes()), (tensor("t", "FP64", [1], [0.5]), None)],
        parameters={"binary_data_output": True},
        id="req-9",
    )
    r = await client.post("/v2/models/tensors/infer", content=body, headers=headers)
    head, blobs = split(r)
    assert head["model_name"] == "tensors"
    assert head["id"] == "req-9"
    assert list(blobs) == ["a", "t", "kinds"]
    assert blobs["a"] == arr.tobytes()
    assert blobs["t"] == struct.pack("<d", 0.5)
    assert blobs["kinds"] == length_prefixed(b"a:int32:[3]", b"t:float64:[1]")


@pytest.mark.anyio
async def test_binary_data_false_overrides_binary_data_output(client: httpx.AsyncClient) -> None:
    body, headers = binary_body(
        [(raw_input("a", "UINT8", [2]), b"\x01\x02")],
        parameters={"binary_data_output": True},
        outputs=[{"name": "kinds", "parameters": {"binary_data": False}}, {"name": "a"}],
    )
    r = await client.post("/v2/models/tensors/infer", content=body, headers=headers)
    head, blobs = split(r)
    by_name = outputs_by_name(head)
    assert by_name["kinds"]["data"] == ["a:uint8:[2]"]
    assert blobs == {"a": b"\x01\x02"}


@pytest.mark.anyio
async def test_binary_request_without_binary_outputs_gets_plain_json(
    client: httpx.AsyncClient,
) -> None:
    body, headers = binary_body([(raw_input("a", "FP32", [1]), struct.pack("<f", 2.5))])
    r = await client.post("/v2/models/tensors/infer", content=body, headers=headers)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    assert HEADER.lower() not in r.headers
    assert outputs_by_name(r.json())["a"]["data"] == [2.5]


@pytest.mark.anyio
async def test_json_request_asking_binary_outputs_gets_binary(client: httpx.AsyncClient) -> None:
    body = {
        "inputs": [tensor("a", "FP32", [2], [1.0, 2.0])],
        "outputs": [{"name": "a", "parameters": {"binary_data": True}}],
    }
    head, blobs = split(await client.post("/v2/models/tensors/infer", json=body))
    assert outputs_by_name(head)["a"]["parameters"] == {"binary_data_size": 8}
    assert blobs == {"a": np.array([1.0, 2.0], dtype="<f4").tobytes()}


@pytest.mark.anyio
async def test_content_type_str_makes_binary_bytes_text(client: httpx.AsyncClient) -> None:
    body, headers = binary_body(
        [
            (
                raw_input("s", "BYTES", [2], content_type="str"),
                length_prefixed("hé".encode(), b"x"),
            ),
            (raw_input("b", "BYTES", [1]), length_prefixed(b"\xff")),
        ]
    )
    r = await client.post("/v2/models/probe/infer", content=body, headers=headers)
    assert r.status_code == 200, r.text
    assert info(r.json()) == {
        "dict": {
            "s": {"list": [{"str": "hé"}, {"str": "x"}]},
            "b": {"list": [{"bytes": "\xff"}]},
        }
    }


@pytest.mark.anyio
async def test_content_type_str_with_bad_utf8_is_a_400(client: httpx.AsyncClient) -> None:
    body, headers = binary_body(
        [(raw_input("s", "BYTES", [1], content_type="str"), length_prefixed(b"\xff"))]
    )
    r = await client.post("/v2/models/probe/infer", content=body, headers=headers)
    assert r.status_code == 400
    assert "input 's' has content_type 'str' but element" in r.json()["error"]


@pytest.mark.anyio
async def test_empty_tensors(client: httpx.AsyncClient) -> None:
    body, headers = binary_body(
        [(raw_input("e", "FP32", [0, 3]), b""), (raw_input("s", "BYTES", [0]), b"")],
        parameters={"binary_data_output": True},
        outputs=[{"name": "e"}],
    )
    head, blobs = split(
        await client.post("/v2/models/tensors/infer", content=body, headers=headers)
    )
    assert outputs_by_name(head)["e"]["shape"] == [0, 3]
    assert blobs == {"e": b""}


@pytest.mark.anyio
async def test_non_utf8_bytes_go_back_binary_but_not_as_json(examples_server: Server) -> None:
    raw = length_prefixed(b"\xff\xfe", b"ok")
    async with httpx.AsyncClient(base_url=examples_server.url) as c:
        body, headers = binary_body(
            [(raw_input("s", "BYTES", [2]), raw)], parameters={"binary_data_output": True}
        )
        r = await c.post("/v2/models/echo/infer", content=body, headers=headers)
        assert split(r)[1] == {"s": raw}
        body, headers = binary_body([(raw_input("s", "BYTES", [2]), raw)])
        r = await c.post("/v2/models/echo/infer", content=body, headers=headers)
        assert r.status_code == 400
        assert r.json()["error"] == (
            "model 'echo' returned output 's' with bytes that are not valid UTF-8, which JSON "
            "cannot carry; ask for it as binary data"
        )
        body, headers = binary_body([(raw_input("s", "BYTES", [1]), length_prefixed(b"fine"))])
        r = await c.post("/v2/models/echo/infer", content=body, headers=headers)
        assert r.status_code == 200
        assert r.json()["outputs"][0]["data"] == ["fine"]


@pytest.mark.anyio
@pytest.mark.parametrize("action", ["infer_stream", "generate", "generate_stream"])
async def test_binary_inputs_on_the_other_oip_routes(
    client: httpx.AsyncClient, action: str
) -> None:
    body, headers = binary_body(
        [
            (raw_input("a", "INT16", [2]), np.array([-1, 7], dtype="<i2").tobytes()),
            (raw_input("s", "BYTES", [1]), length_prefixed(b"txt")),
        ],
        parameters={"binary_data_output": True},
    )
    r = await client.post(f"/v2/models/tensors/{action}", content=body, headers=headers)
    assert r.status_code == 200, r.text
    if action == "generate":
        response = r.json()
    else:
        assert r.text.startswith("data: ")
        response = json.loads(r.text.removeprefix("data: ").strip())
    by_name = outputs_by_name(response)  # these routes answer in JSON
    assert by_name["a"]["data"] == [-1, 7]
    assert by_name["s"]["data"] == ["txt"]
    assert by_name["kinds"]["data"] == ["a:int16:[2]", "s:list[bytes]:1"]


# -- bad framing: a 400 that says what is wrong, and the next request still works -----------------


def _good() -> tuple[bytes, dict[str, str]]:
    return binary_body([(raw_input("a", "FP32", [2]), struct.pack("<2f", 1.0, 2.0))])


FP32_6 = np.arange(6, dtype=np.float32).tobytes()

BAD: list[tuple[str, Any, str]] = [
    (
        "header not an integer",
        lambda: (b'{"inputs":[]}', {HEADER: "twelve"}),
        "Inference-Header-Content-Length header must be a non-negative integer, got 'twelve'",
    ),
    (
        "header a float",
        lambda: (b'{"inputs":[]}', {HEADER: "12.0"}),
        "Inference-Header-Content-Length header must be a non-negative integer, got '12.0'",
    ),
    (
        "header negative",
        lambda: (b'{"inputs":[]}', {HEADER: "-4"}),
        "Inference-Header-Content-Length header must not be negative, got -4",
    ),
    (
        "header larger than the body",
        lambda: (b'{"inputs":[]}', {HEADER: "14"}),
        "Inference-Header-Content-Length header is 14, larger than the request body of 13 bytes",
    ),
    (
        "header zero",
        lambda: (b'{"inputs":[]}', {HEADER: "0"}),
        "request body is empty; expected inference request",
    ),
    (
        "header cuts the JSON",
        lambda: (b'{"inputs":[]}', {HEADER: "5"}),
        "malformed JSON body",
    ),
    (
        "too few bytes",
        lambda: framed([raw_input("x", "FP32", [2, 3], binary_data_size=24)], FP32_6[:20]),
        "the request body has 20 bytes after its {json}-byte JSON header, but the inputs' "
        "binary_data_size add up to 24 ('x': 24): 4 bytes missing",
    ),
    (
        "too many bytes",
        lambda: framed(
            [
                raw_input("x", "FP32", [2, 3], binary_data_size=24),
                raw_input("y", "UINT8", [1], binary_data_size=1),
            ],
            FP32_6 + b"\x01\x00\x00",
        ),
        "the request body has 27 bytes after its {json}-byte JSON header, but the inputs' "
        "binary_data_size add up to 25 ('x': 24, 'y': 1): 2 bytes too many",
    ),
    (
        "bytes after the JSON but no binary input",
        lambda: (b'{"inputs":[]}xyz', {HEADER: "13"}),
        "the request body has 3 bytes after its 13-byte JSON header, but the inputs' "
        "binary_data_size add up to 0 (none): 3 bytes too many",
    ),
    (
        "size not matching the shape",
        lambda: binary_body([(raw_input("x", "FP32", [2, 3]), FP32_6[:20])]),
        "input 'x' of datatype FP32 and shape [2, 3] needs 24 bytes of raw data, got 20",
    ),
    (
        "BYTES with fewer elements than the shape",
        lambda: binary_body([(raw_input("s", "BYTES", [3]), length_prefixed(b"a", b"b"))]),
        "input 's' has shape [3] (3 elements) but 2 data elements",
    ),
    (
        "BYTES truncated",
        lambda: binary_body([(raw_input("s", "BYTES", [2]), length_prefixed(b"a", b"bcd")[:-1])]),
        "input 's' of datatype BYTES is truncated: element 1 declares 3 bytes but only 2 remain",
    ),
    (
        "BYTES with trailing bytes",
        lambda: binary_body([(raw_input("s", "BYTES", [1]), length_prefixed(b"a") + b"\x09")]),
        "input 's' of datatype BYTES and shape [1] has 1 trailing byte after its 1 element",
    ),
    (
        "binary_data_size and data",
        lambda: binary_body([({**tensor("x", "FP32", [1], [1.0])}, struct.pack("<f", 1.0))]),
        "input 'x' has both data and parameters.binary_data_size",
    ),
    (
        "binary_data_size not an integer",
        lambda: framed([raw_input("x", "UINT8", [1], binary_data_size="1")], b"\x00"),
        "input 'x' has parameters.binary_data_size '1'; it must be a non-negative integer",
    ),
    (
        "binary_data_size negative",
        lambda: framed([raw_input("x", "UINT8", [1], binary_data_size=-1)]),
        "input 'x' has parameters.binary_data_size -1; it must be a non-negative integer",
    ),
    (
        "unknown datatype",
        lambda: binary_body([(raw_input("x", "FP8", [1]), b"\x00")]),
        "input 'x' has unknown datatype 'FP8'",
    ),
]


@pytest.mark.anyio
@pytest.mark.parametrize(("what", "make", "message"), BAD, ids=[b[0] for b in BAD])
async def test_bad_binary_request_is_a_400_then_a_good_one_works(
    client: httpx.AsyncClient, what: str, make: Any, message: str
) -> None:
    body, headers = make()
    r = await client.post("/v2/models/tensors/infer", content=body, headers=headers)
    assert r.status_code == 400, (what, r.text)
    assert r.headers["content-type"] == "application/json"
    assert message.format(json=headers[HEADER]) in r.json()["error"], what
    body, headers = _good()
    r = await client.post("/v2/models/tensors/infer", content=body, headers=headers)
    assert r.status_code == 200, r.text
    assert outputs_by_name(r.json())["a"]["data"] == [1.0, 2.0]


@pytest.mark.anyio
async def test_binary_output_of_a_versioned_route(client: httpx.AsyncClient) -> None:
    body = {
        "inputs": [tensor("x", "FP64", [1], [1.0])],
        "parameters": {"binary_data_output": True},
    }
    head, blobs = split(await client.post("/v2/models/versioned/versions/1/infer", json=body))
    assert blobs == {"version": length_prefixed(b"1")}
    assert outputs_by_name(head)["version"]["datatype"] == "BYTES"
