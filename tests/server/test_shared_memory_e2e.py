"""Triton's system shared memory extension end to end: ``tritonclient.http`` and
``tritonclient.grpc`` with ``tritonclient.utils.shared_memory``, unchanged, against a real
``podium serve --shared-memory system`` (and one with the extension off, the default).

Every shared memory object a test makes is destroyed in ``finally``, and every region it
registered is unregistered."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import ml_dtypes
import numpy as np
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
import tritonclient.utils.shared_memory as shm
from conftest import TEST_MODELS, Server, run_server
from grpc_helpers import target
from tritonclient.utils import InferenceServerException, serialize_byte_tensor, serialized_byte_size

pytestmark = pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="needs /dev/shm (Linux)")

SHM_MODELS = TEST_MODELS / "shm"
PREFIX = "podium-e2e-"
MAX_REGIONS = 6
MAX_SIZE = 1 << 20
#: What each protocol's client reports for a status: ``exc.status()``.
CODES = {
    "invalid": {"http": "400", "grpc": "StatusCode.INVALID_ARGUMENT"},
    "forbidden": {"http": "403", "grpc": "StatusCode.PERMISSION_DENIED"},
    "not_found": {"http": "404", "grpc": "StatusCode.NOT_FOUND"},
    "exists": {"http": "409", "grpc": "StatusCode.ALREADY_EXISTS"},
    "too_much": {"http": "413", "grpc": "StatusCode.RESOURCE_EXHAUSTED"},
}


@pytest.fixture(scope="module")
def gates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("shm-gates")


@pytest.fixture(scope="module")
def server(gates: Path) -> Iterator[Server]:
    with run_server(
        SHM_MODELS,
        args=(
            "--shared-memory",
            "system",
            "--shm-key-prefix",
            PREFIX,
            "--max-shm-regions",
            str(MAX_REGIONS),
            "--max-shm-size",
            str(MAX_SIZE),
        ),
        env={"PODIUM_SHM_GATES": str(gates)},
    ) as running:
        yield running


@pytest.fixture(scope="module")
def off_server() -> Iterator[Server]:
    with run_server(SHM_MODELS) as running:
        yield running


class Client:
    """One protocol's tritonclient module and client, and a way to read its errors' codes."""

    def __init__(self, kind: str, server: Server) -> None:
        self.kind = kind
        self.mod: Any = thttp if kind == "http" else tgrpc
        url = server.url.split("://")[-1].rstrip("/") if kind == "http" else target(server)
        self.client: Any = self.mod.InferenceServerClient(url)

    def code(self, key: str) -> str:
        return CODES[key][self.kind]

    def fails(self, key: str, call: Callable[[], object], match: str) -> InferenceServerException:
        with pytest.raises(InferenceServerException, match=match) as caught:
            call()
        assert caught.value.status() == self.code(key), caught.value
        return caught.value

    def regions(self) -> list[str]:
        status = self.client.get_system_shared_memory_status()
        if self.kind == "http":
            return sorted(r["name"] for r in status)
        return sorted(status.regions)

    def input(self, name: str, shape: list[int], datatype: str) -> Any:
        return self.mod.InferInput(name, shape, datatype)

    def output(self, name: str) -> Any:
        return self.mod.InferRequestedOutput(name)


class Regions:
    """Shared memory objects made with tritonclient's utilities and registered on a server;
    all destroyed and unregistered at the end."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.handles: list[Any] = []

    def make(self, size: int, *, register: bool = True, name: str | None = None) -> Any:
        key = f"/{PREFIX}{uuid.uuid4().hex}"
        name = name or f"r-{uuid.uuid4().hex[:8]}"
        handle = shm.create_shared_memory_region(name, key, size)
        self.handles.append(handle)
        if register:
            self.client.client.register_system_shared_memory(name, key, size)
        return handle

    def close(self) -> None:
        try:
            self.client.client.unregister_system_shared_memory()
        finally:
            for handle in self.handles:
                shm.destroy_shared_memory_region(handle)


@pytest.fixture(params=["http", "grpc"])
def client(request: pytest.FixtureRequest, server: Server) -> Client:
    return Client(request.param, server)


@pytest.fixture
def regions(client: Client) -> Iterator[Regions]:
    made = Regions(client)
    try:
        yield made
    finally:
        made.close()


def name_of(handle: Any) -> str:
    return str(handle._triton_shm_name)


def key_of(handle: Any) -> str:
    return str(handle._shm_key)


def mapped_by(server: Server, key: str) -> bool:
    """Whether the server process maps the object ``key`` now."""
    path = "/dev/shm/" + key.lstrip("/")
    return path in Path(f"/proc/{server.proc.pid}/maps").read_text()


def until(condition: Callable[[], object], within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, f"not true within {within} s"
        time.sleep(0.01)


A = np.arange(16, dtype=np.int32).reshape(1, 16)
B = np.ones((1, 16), dtype=np.int32)


def simple_request(c: Client, region: str, *, outputs_in: str | None = None) -> tuple[Any, Any]:
    """Triton's shm example: INPUT0 at 0 and INPUT1 at 64 of ``region``; OUTPUT0 and OUTPUT1 at
    128 and 192 of ``outputs_in`` (default: the same region)."""
    ins = [c.input("INPUT0", [1, 16], "INT32"), c.input("INPUT1", [1, 16], "INT32")]
    ins[0].set_shared_memory(region, 64)
    ins[1].set_shared_memory(region, 64, offset=64)
    outs = [c.output("OUTPUT0"), c.output("OUTPUT1")]
    outs[0].set_shared_memory(outputs_in or region, 64, offset=128)
    outs[1].set_shared_memory(outputs_in or region, 64, offset=192)
    return ins, outs


# -- the extension -----------------------------------------------------------------------------


def test_the_extension_is_advertised_only_when_on(server: Server, off_server: Server) -> None:
    on = httpx.get(f"{server.url}/v2").json()["extensions"]
    off = httpx.get(f"{off_server.url}/v2").json()["extensions"]
    assert "system_shared_memory" in on and "system_shared_memory" not in off
    assert "cuda_shared_memory" not in on
    meta = tgrpc.InferenceServerClient(target(server)).get_server_metadata()
    assert "system_shared_memory" in meta.extensions
    # On without --auth: the start-up log says who can map what.
    warning = "system shared memory is on (--shared-memory system) without --auth"
    assert warning in server.log and f"objects named '{PREFIX}*'" in server.log
    assert "system shared memory is on" not in off_server.log


def test_register_infer_status_unregister(client: Client, regions: Regions, server: Server) -> None:
    c = client.client
    handle = regions.make(256)
    name, key = name_of(handle), key_of(handle)
    shm.set_shared_memory_region(handle, [A, B])
    ins, outs = simple_request(client, name)
    result = c.infer("simple", ins, outputs=outs)
    got0 = shm.get_contents_as_numpy(handle, np.int32, [1, 16], offset=128)
    got1 = shm.get_contents_as_numpy(handle, np.int32, [1, 16], offset=192)
    assert (got0 == A + B).all() and (got1 == A - B).all()
    # The answer carries no data; over gRPC it names where each output is. Over REST it is
    # Triton's (no parameters): Triton's C++ HTTP client, perf_analyzer's, takes any output
    # parameters for the binary extension's and fails without binary_data_size.
    response = result.get_response()
    if client.kind == "http":
        out0 = response["outputs"][0]
        assert out0 == {"name": "OUTPUT0", "datatype": "INT32", "shape": [1, 16]}
        status = c.get_system_shared_memory_status(name)
        assert status == [{"name": name, "key": key, "offset": 0, "byte_size": 256}]
    else:
        assert list(response.raw_output_contents) == [b"", b""]
        params = response.outputs[0].parameters
        assert params["shared_memory_region"].string_param == name
        assert params["shared_memory_byte_size"].int64_param == 64
        region = c.get_system_shared_memory_status(name).regions[name]
        assert (region.name, region.key, region.offset, region.byte_size) == (name, key, 0, 256)
    assert mapped_by(server, key)
    c.unregister_system_shared_memory(name)
    assert client.regions() == [] and not mapped_by(server, key)


def test_inputs_and_outputs_mixed_with_the_request(client: Client, regions: Regions) -> None:
    """INPUT0 in shared memory, INPUT1 in the request (raw: gRPC pairs raw contents with the
    inputs not in shared memory, as Triton); OUTPUT0 into shared memory, OUTPUT1 answered."""
    handle = regions.make(128)
    shm.set_shared_memory_region(handle, [A])
    ins = [client.input("INPUT0", [1, 16], "INT32"), client.input("INPUT1", [1, 16], "INT32")]
    ins[0].set_shared_memory(name_of(handle), 64)
    ins[1].set_data_from_numpy(B)
    outs = [client.output("OUTPUT0"), client.output("OUTPUT1")]
    outs[0].set_shared_memory(name_of(handle), 64, offset=64)
    result = client.client.infer("simple", ins, outputs=outs)
    assert (shm.get_contents_as_numpy(handle, np.int32, [1, 16], offset=64) == A + B).all()
    assert (result.as_numpy("OUTPUT1") == A - B).all()


def test_inputs_in_shared_memory_reach_the_model_as_views(client: Client, regions: Regions) -> None:
    handle = regions.make(128)
    shm.set_shared_memory_region(handle, [A, B])
    ins, _ = simple_request(client, name_of(handle))
    result = client.client.infer("simple", ins, outputs=[client.output("VIEW")])
    assert result.as_numpy("VIEW").tolist() == [True, True]  # read-only, and not its own data


def test_strings_are_length_prefixed(client: Client, regions: Regions) -> None:
    """Triton's simple_*_shm_string_client: BYTES tensors serialized into the regions."""
    a = np.array([str(x).encode() for x in range(16)], dtype=np.object_).reshape(1, 16)
    b = np.array([b"1"] * 16, dtype=np.object_).reshape(1, 16)
    sa, sb = serialize_byte_tensor(a), serialize_byte_tensor(b)
    size_a, size_b = serialized_byte_size(sa), serialized_byte_size(sb)
    inputs = regions.make(size_a + size_b)
    shm.set_shared_memory_region(inputs, [sa])
    shm.set_shared_memory_region(inputs, [sb], offset=size_a)
    outputs = regions.make(512)
    ins = [client.input("INPUT0", [1, 16], "BYTES"), client.input("INPUT1", [1, 16], "BYTES")]
    ins[0].set_shared_memory(name_of(inputs), size_a)
    ins[1].set_shared_memory(name_of(inputs), size_b, offset=size_a)
    outs = [client.output("OUTPUT0"), client.output("OUTPUT1")]
    outs[0].set_shared_memory(name_of(outputs), 256)
    outs[1].set_shared_memory(name_of(outputs), 256, offset=256)
    client.client.infer("simple_string", ins, outputs=outs)
    sums = shm.get_contents_as_numpy(outputs, np.object_, [1, 16])
    diffs = shm.get_contents_as_numpy(outputs, np.object_, [1, 16], offset=256)
    assert [int(x) for x in sums.ravel()] == [x + 1 for x in range(16)]
    assert [int(x) for x in diffs.ravel()] == [x - 1 for x in range(16)]


EVERY_DATATYPE: list[tuple[str, np.ndarray]] = [
    ("BOOL", np.array([[True, False, True]])),
    ("UINT8", np.array([0, 255], dtype=np.uint8)),
    ("UINT16", np.array([0, 65535], dtype=np.uint16)),
    ("UINT32", np.array([0, 2**32 - 1], dtype=np.uint32)),
    ("UINT64", np.array([0, 2**64 - 1], dtype=np.uint64)),
    ("INT8", np.array([-128, 127], dtype=np.int8)),
    ("INT16", np.array([-(2**15), 2**15 - 1], dtype=np.int16)),
    ("INT32", np.array([[-(2**31)], [2**31 - 1]], dtype=np.int32)),
    ("INT64", np.array([-(2**63), 2**63 - 1], dtype=np.int64)),
    ("FP16", np.array([1.5, -0.25, 65504], dtype=np.float16)),
    ("FP32", np.array([[1.5, -2.25], [3.0, 1e-3]], dtype=np.float32)),
    ("FP64", np.array([1e300, -1.5], dtype=np.float64)),
    ("BF16", np.array([1.0, -2.5, 3.140625], dtype=ml_dtypes.bfloat16)),
    ("BYTES", np.array([b"ab", b"", "\x00é".encode()], dtype=np.object_)),
]


@pytest.mark.parametrize(("datatype", "array"), EVERY_DATATYPE, ids=[d for d, _ in EVERY_DATATYPE])
def test_every_datatype_round_trips(
    client: Client, regions: Regions, datatype: str, array: np.ndarray
) -> None:
    value = serialize_byte_tensor(array) if datatype == "BYTES" else array
    size = serialized_byte_size(value) if datatype == "BYTES" else array.nbytes
    handle = regions.make(2 * size)
    shm.set_shared_memory_region(handle, [value])
    inp = client.input("INPUT0", list(array.shape), datatype)
    inp.set_shared_memory(name_of(handle), size)
    out = client.output("OUTPUT0")
    out.set_shared_memory(name_of(handle), size, offset=size)
    client.client.infer("identity", [inp], outputs=[out])
    dtype = np.object_ if datatype == "BYTES" else array.dtype
    got = shm.get_contents_as_numpy(handle, dtype, list(array.shape), offset=size)
    assert got.tolist() == array.tolist()


def test_a_stream_writes_each_response(regions: Regions, server: Server) -> None:
    """gRPC ModelStreamInfer to a generator model: each response is written into the region
    (the last one stays there), and each comes without data."""
    handle = regions.make(128)
    shm.set_shared_memory_region(handle, [A])
    c = tgrpc.InferenceServerClient(target(server))
    got: list[Any] = []
    c.start_stream(callback=lambda result, error: got.append(error or result))
    try:
        inp = tgrpc.InferInput("INPUT0", [1, 16], "INT32")
        inp.set_shared_memory(name_of(handle), 64)
        out = tgrpc.InferRequestedOutput("OUTPUT0")
        out.set_shared_memory(name_of(handle), 64, offset=64)
        c.async_stream_infer("counter", [inp], outputs=[out])
        until(lambda: len(got) == 3)
    finally:
        c.stop_stream()
    assert all(not isinstance(r, Exception) for r in got), got
    assert [r.get_response().raw_output_contents[0] for r in got] == [b""] * 3
    assert (shm.get_contents_as_numpy(handle, np.int32, [1, 16], offset=64) == A + 3).all()


def test_a_generator_model_gathered_into_one_region(client: Client, regions: Regions) -> None:
    handle = regions.make(64 + 3 * 64)
    shm.set_shared_memory_region(handle, [A])
    inp = client.input("INPUT0", [1, 16], "INT32")
    inp.set_shared_memory(name_of(handle), 64)
    out = client.output("OUTPUT0")
    out.set_shared_memory(name_of(handle), 3 * 64, offset=64)
    client.client.infer("counter", [inp], outputs=[out])
    got = shm.get_contents_as_numpy(handle, np.int32, [3, 16], offset=64)
    assert (got == np.concatenate([A + 1, A + 2, A + 3])).all()


# -- errors ------------------------------------------------------------------------------------


def test_registration_errors(client: Client, regions: Regions) -> None:
    c = client.client
    handle = regions.make(64)
    name, key = name_of(handle), key_of(handle)
    client.fails(
        "exists", lambda: c.register_system_shared_memory(name, key, 64), "already registered"
    )
    client.fails(
        "invalid",
        lambda: c.register_system_shared_memory("far", key, 64, offset=1),
        "go past the end of the object",
    )
    client.fails(
        "invalid",
        lambda: c.register_system_shared_memory("none", f"/{PREFIX}missing", 8),
        "no shared memory object with key",
    )
    client.fails(
        "forbidden",
        lambda: c.register_system_shared_memory("other", "/somebody-elses", 8),
        "--shm-key-prefix",
    )
    client.fails(
        "invalid",
        lambda: c.register_system_shared_memory("bad", "/a/b", 8),
        "not the name of a POSIX shared memory object",
    )
    client.fails(
        "not_found",
        lambda: c.get_system_shared_memory_status("unknown"),
        "no system shared memory region named 'unknown'",
    )
    c.unregister_system_shared_memory("unknown")  # as Triton: nothing to do
    assert client.regions() == [name]


def test_inference_errors(client: Client, regions: Regions) -> None:
    c = client.client
    handle = regions.make(256)
    name = name_of(handle)
    shm.set_shared_memory_region(handle, [A, B])

    def infer(
        in0: tuple[str, int, int] = (name, 64, 0),
        out0: tuple[str, int, int] | None = None,
        model: str = "simple",
    ) -> Any:
        ins = [client.input("INPUT0", [1, 16], "INT32"), client.input("INPUT1", [1, 16], "INT32")]
        ins[0].set_shared_memory(in0[0], in0[1], offset=in0[2])
        ins[1].set_shared_memory(name, 64, offset=64)
        outs = None
        if out0 is not None:
            outs = [client.output("OUTPUT0")]
            outs[0].set_shared_memory(out0[0], out0[1], offset=out0[2])
        return c.infer(model, ins, outputs=outs)

    client.fails(
        "invalid", lambda: infer(("nope", 64, 0)), "region 'nope', which is not registered"
    )
    # The harness's "offset past the region": 64 bytes at 250 of 256.
    client.fails(
        "invalid", lambda: infer((name, 64, 250)), "go past the end of shared memory region"
    )
    client.fails("invalid", lambda: infer((name, 64, 256)), "shared_memory_offset 256 is outside")
    client.fails("invalid", lambda: infer((name, 128, 0)), "needs 64 bytes of raw data, got 128")
    client.fails("invalid", lambda: infer(out0=(name, 32, 128)), "takes 64 bytes, more than the 32")
    client.fails("invalid", lambda: infer(out0=("nope", 64, 0)), "output 'OUTPUT0' names")
    infer(out0=(name, 64, 128))  # the region is still good after all of that
    assert (shm.get_contents_as_numpy(handle, np.int32, [1, 16], offset=128) == A + B).all()


def test_a_region_shrunk_by_its_client_is_refused(client: Client, regions: Regions) -> None:
    """Reading past an object's end would fault the server (SIGBUS): every use checks it."""
    handle = regions.make(8192)
    os.truncate(f"/dev/shm/{key_of(handle)[1:]}", 64)
    ins, _ = simple_request(client, name_of(handle))
    client.fails("invalid", lambda: client.client.infer("simple", ins), "shrank to 64 bytes")
    assert client.client.is_server_live()


def test_bounds(client: Client, regions: Regions) -> None:
    client.fails(
        "too_much",
        lambda: regions.make(MAX_SIZE + 1),
        f"this server maps at most {MAX_SIZE}",
    )
    for _ in range(MAX_REGIONS):
        regions.make(8)
    client.fails("too_much", lambda: regions.make(8), f"--max-shm-regions {MAX_REGIONS}")
    client.client.unregister_system_shared_memory(client.regions()[0])
    regions.make(8)  # room again


def test_cuda_shared_memory_is_answered_as_triton_without_gpus(client: Client) -> None:
    c = client.client
    status = c.get_cuda_shared_memory_status()
    assert (status == []) if client.kind == "http" else (len(status.regions) == 0)
    c.unregister_cuda_shared_memory()
    c.unregister_cuda_shared_memory("any")
    handle = "aGFuZGxl" if client.kind == "http" else b"aGFuZGxl"  # both take it base64'd
    client.fails(
        "invalid",
        lambda: c.register_cuda_shared_memory("g", handle, 0, 64),
        "Podium has no CUDA shared memory",
    )
    client.fails("not_found", lambda: c.get_cuda_shared_memory_status("g"), "no CUDA shared")


def test_off_by_default(off_server: Server) -> None:
    for kind in ("http", "grpc"):
        client = Client(kind, off_server)
        c = client.client
        key = f"/{PREFIX}{uuid.uuid4().hex}"
        handle = shm.create_shared_memory_region("r", key, 256)
        try:
            assert client.regions() == []
            client.fails(
                "forbidden",
                lambda c=c, key=key: c.register_system_shared_memory("r", key, 256),
                "system shared memory is off on this server.*--shared-memory system",
            )
            client.fails("forbidden", c.unregister_system_shared_memory, "is off")
            if kind == "http":  # refused before its body is read
                refused = httpx.post(
                    f"{off_server.url}/v2/systemsharedmemory/region/r/register", content=b"{"
                )
                assert refused.status_code == 403
            ins, _ = simple_request(client, "r")
            client.fails(
                "forbidden", lambda c=c, ins=ins: c.infer("simple", ins), "naming shared memory"
            )
            assert not mapped_by(off_server, key)
        finally:
            shm.destroy_shared_memory_region(handle)


# -- REST details ------------------------------------------------------------------------------


def test_rest_bodies_and_methods(server: Server) -> None:
    base = f"{server.url}/v2/systemsharedmemory"
    key = f"/{PREFIX}{uuid.uuid4().hex}"
    handle = shm.create_shared_memory_region("rest", key, 128)
    try:
        with httpx.Client(base_url=base) as http:
            bad = http.post("/region/rest/register")
            error = bad.json()["error"]
            assert bad.status_code == 400 and "empty; expected shared memory register" in error
            bad = http.post("/region/rest/register", content=b"{not json")
            assert bad.status_code == 400 and "malformed JSON" in bad.json()["error"]
            bad = http.post("/region/rest/register", json={"key": key})
            assert bad.status_code == 400 and "byte_size" in bad.json()["error"]
            bad = http.post("/region/rest/register", json={"key": key, "byte_size": "64"})
            assert bad.status_code == 400
            # offset may be left out (0), as Triton reads it
            done = http.post("/region/rest/register", json={"key": key, "byte_size": 128})
            assert (done.status_code, done.content) == (200, b"")
            assert http.get("/status").json() == [
                {"name": "rest", "key": key, "offset": 0, "byte_size": 128}
            ]
            wrong = http.get("/region/rest/register")
            assert wrong.status_code == 405 and wrong.headers["allow"] == "POST"
            # An input with both data and a region is refused, naming both.
            body = {
                "inputs": [
                    {
                        "name": "INPUT0",
                        "shape": [1, 16],
                        "datatype": "INT32",
                        "data": list(range(16)),
                        "parameters": {
                            "shared_memory_region": "rest",
                            "shared_memory_byte_size": 64,
                        },
                    },
                    {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16},
                ]
            }
            both = httpx.post(f"{server.url}/v2/models/simple/infer", json=body)
            assert both.status_code == 400
            assert "has both data and the shared memory region 'rest'" in both.json()["error"]
            # binary_data_output asks for every output binary: one in a region stays there.
            data = np.arange(16, dtype="<i4").tobytes() + np.ones(16, "<i4").tobytes()
            shm.set_shared_memory_region(handle, [np.zeros(32, np.int32)])
            header = {
                "inputs": [
                    {
                        "name": name,
                        "shape": [1, 16],
                        "datatype": "INT32",
                        "parameters": {"binary_data_size": 64},
                    }
                    for name in ("INPUT0", "INPUT1")
                ],
                "outputs": [
                    {
                        "name": "OUTPUT0",
                        "parameters": {
                            "shared_memory_region": "rest",
                            "shared_memory_byte_size": 64,
                        },
                    },
                    {"name": "OUTPUT1"},
                ],
                "parameters": {"binary_data_output": True},
            }
            head = json.dumps(header).encode()
            mixed = httpx.post(
                f"{server.url}/v2/models/simple/infer",
                content=head + data,
                headers={"Inference-Header-Content-Length": str(len(head))},
            )
            assert mixed.status_code == 200, mixed.text
            length = int(mixed.headers["inference-header-content-length"])
            outputs = json.loads(mixed.content[:length])["outputs"]
            assert "parameters" not in outputs[0]  # Triton's answer (C++ clients need it)
            assert outputs[1]["parameters"] == {"binary_data_size": 64}
            sums = shm.get_contents_as_numpy(handle, np.int32, [16])
            assert sums.tolist() == list(range(1, 17))
            assert np.frombuffer(mixed.content[length:], "<i4").tolist() == list(range(-1, 15))
            done = http.post("/region/rest/unregister")
            assert (done.status_code, done.content) == (200, b"")
            cuda = httpx.post(
                f"{server.url}/v2/cudasharedmemory/region/g/register",
                json={"raw_handle": {"b64": ""}, "device_id": 0, "byte_size": 8},
            )
            assert cuda.status_code == 400
    finally:
        httpx.post(f"{base}/unregister")
        shm.destroy_shared_memory_region(handle)


# -- lifetime ------------------------------------------------------------------------------------


def test_unregistering_a_region_in_use(
    client: Client, regions: Regions, server: Server, gates: Path
) -> None:
    """A call holds its regions until it is answered: unregistering them meanwhile takes their
    names away at once (they may be registered again), and the call still reads and writes the
    regions it started with; they are unmapped when it is done."""
    for gate in ("started", "open"):
        (gates / gate).unlink(missing_ok=True)
    handle = regions.make(256)
    name, key = name_of(handle), key_of(handle)
    shm.set_shared_memory_region(handle, [A, B])
    ins, outs = simple_request(client, name)
    other = Client("http" if client.kind == "grpc" else "grpc", server).client

    def infer() -> Any:  # a client of its own: tritonclient.http's belongs to its thread
        return Client(client.kind, server).client.infer("gated", ins, outputs=outs[:1])

    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(infer)
        try:
            until(lambda: (gates / "started").exists())
            other.unregister_system_shared_memory()
            assert client.regions() == []
            assert mapped_by(server, key)  # the call still holds it
            again = regions.make(256, name=name)  # the name is free
            assert client.regions() == [name]
        finally:
            (gates / "open").touch()
        answer.result(timeout=30)
    # The call wrote where it started, not into the region now registered under its name.
    assert (shm.get_contents_as_numpy(handle, np.int32, [1, 16], offset=128) == A + B).all()
    assert not shm.get_contents_as_numpy(again, np.int32, [1, 16], offset=128).any()
    until(lambda: not mapped_by(server, key))
    assert mapped_by(server, key_of(again))
