"""System shared memory in the data plane (``dataplane/_memory.py``): the registry of regions,
the tensors of a call read from and written to them, their lifetime, and the data plane's use of
it on every OIP call. Real POSIX shared memory objects (``/dev/shm``), no sockets; the front ends
are tested end to end in ``tests/server/test_shared_memory_e2e.py``."""

from __future__ import annotations

import mmap
import os
import uuid
from collections.abc import AsyncGenerator, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from podium.config import ModelConfig, SharedMemory
from podium.dataplane import DataPlane, RegionStatus, SystemSharedMemory
from podium.dataplane._memory import uses_shared_memory
from podium.errors import (
    Conflict,
    Forbidden,
    InvalidInput,
    InvalidTensor,
    NotFound,
    PayloadTooLarge,
)
from podium.runtime.registry import ModelVersion, Registry
from podium.types import (
    Call,
    Capabilities,
    InferenceRequest,
    InferenceResponse,
    InputKind,
    RequestInput,
    RequestOutput,
    ResponseOutput,
    WireProtocol,
)

pytestmark = pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="needs /dev/shm (Linux)")

SHM = Path("/dev/shm")


class Objects:
    """POSIX shared memory objects made for one test, each unlinked at its end."""

    def __init__(self) -> None:
        self.made: list[Path] = []

    def new(self, size: int, *, name: str | None = None) -> str:
        """A new object of ``size`` zero bytes; its key (``/name``)."""
        name = name or f"podium-test-{uuid.uuid4().hex}"
        path = SHM / name
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, size)
        finally:
            os.close(fd)
        self.made.append(path)
        return "/" + name

    @staticmethod
    def path(key: str) -> Path:
        return SHM / key.lstrip("/")

    def write(self, key: str, offset: int, data: bytes) -> None:
        with open(self.path(key), "r+b") as f:
            f.seek(offset)
            f.write(data)

    def read(self, key: str, offset: int, size: int) -> bytes:
        with open(self.path(key), "rb") as f:
            f.seek(offset)
            return f.read(size)

    def cleanup(self) -> None:
        for path in self.made:
            path.unlink(missing_ok=True)


@pytest.fixture
def objects() -> Iterator[Objects]:
    made = Objects()
    try:
        yield made
    finally:
        made.cleanup()


@pytest.fixture
def shm() -> Iterator[SystemSharedMemory]:
    registry = SystemSharedMemory(SharedMemory("system"))
    try:
        yield registry
    finally:
        registry.close()


def mapped(key: str) -> bool:
    """Whether this process maps the object ``key`` now."""
    target = str(SHM / key.lstrip("/"))
    with open("/proc/self/maps") as f:
        return any(line.split(maxsplit=5)[-1].strip().startswith(target) for line in f)


def shm_input(
    name: str, region: str, size: int, offset: int | None = None, **kw: Any
) -> RequestInput:
    params: dict[str, Any] = {"shared_memory_region": region, "shared_memory_byte_size": size}
    if offset is not None:
        params["shared_memory_offset"] = offset
    return RequestInput(
        name=name,
        shape=kw.pop("shape", [4]),
        datatype=kw.pop("datatype", "INT32"),
        parameters=params,
        **kw,
    )


def shm_output(name: str, region: str, size: int, offset: int = 0, **extra: Any) -> RequestOutput:
    params = {
        "shared_memory_region": region,
        "shared_memory_byte_size": size,
        "shared_memory_offset": offset,
        **extra,
    }
    return RequestOutput(name=name, parameters=params)


INTS = np.arange(4, dtype="<i4")


# -- registering -----------------------------------------------------------------------------


def test_register_status_unregister(shm: SystemSharedMemory, objects: Objects) -> None:
    key = objects.new(100)
    status = shm.register("a", key, 4, 96)
    assert status == RegionStatus(name="a", key=key, offset=4, byte_size=96)
    b = objects.new(10)
    shm.register("b", b, 0, 10)
    assert shm.status() == [status, RegionStatus(name="b", key=b, offset=0, byte_size=10)]
    assert shm.status("b") == [RegionStatus(name="b", key=b, offset=0, byte_size=10)]
    assert mapped(key) and mapped(b)
    shm.unregister("a")
    assert [s.name for s in shm.status()] == ["b"] and not mapped(key)
    shm.unregister("never-registered")  # as Triton: nothing to do, no error
    shm.unregister()
    assert shm.status() == [] and not mapped(b)


def test_status_of_an_unknown_region_is_not_found(shm: SystemSharedMemory) -> None:
    with pytest.raises(NotFound, match="no system shared memory region named 'x'"):
        shm.status("x")


def test_a_name_is_registered_once(shm: SystemSharedMemory, objects: Objects) -> None:
    key = objects.new(8)
    shm.register("a", key, 0, 8)
    with pytest.raises(Conflict, match="'a' is already registered"):
        shm.register("a", objects.new(8), 0, 8)
    shm.unregister("a")
    shm.register("a", key, 0, 8)  # free again


def test_the_key_leading_slashes_are_optional(shm: SystemSharedMemory, objects: Objects) -> None:
    key = objects.new(8)
    shm.register("one", key.lstrip("/"), 0, 8)
    shm.register("three", "//" + key, 0, 8)
    assert [s.key for s in shm.status()] == [key.lstrip("/"), "//" + key]


@pytest.mark.parametrize(
    "key", ["", "/", "///", "a/b", "/a/b", "..", "/..", ".", "x\0y", "k" * 256]
)
def test_a_key_must_name_an_object(shm: SystemSharedMemory, key: str) -> None:
    with pytest.raises(InvalidInput, match="is not the name of a POSIX shared memory object"):
        shm.register("r", key, 0, 8)


def test_a_missing_object_is_named(shm: SystemSharedMemory) -> None:
    with pytest.raises(InvalidInput, match="no shared memory object with key '/podium-none'"):
        shm.register("r", "/podium-none", 0, 8)


def test_semaphores_and_links_and_directories_are_refused(
    shm: SystemSharedMemory, objects: Objects
) -> None:
    with pytest.raises(Forbidden, match="names a POSIX semaphore"):
        shm.register("r", "/sem.anything", 0, 8)
    target = objects.new(8)
    link = SHM / f"podium-test-link-{uuid.uuid4().hex}"
    link.symlink_to(objects.path(target))
    objects.made.append(link)
    with pytest.raises(InvalidInput, match="cannot open key"):
        shm.register("r", "/" + link.name, 0, 8)
    folder = SHM / f"podium-test-dir-{uuid.uuid4().hex}"
    folder.mkdir()
    try:
        with pytest.raises(InvalidInput, match="cannot open key|is not a shared memory object"):
            shm.register("r", "/" + folder.name, 0, 8)
    finally:
        folder.rmdir()
    assert shm.status() == []


@pytest.mark.parametrize(
    ("offset", "size"), [(0, 65), (1, 64), (64, 1), (65, 0), (2**64, 1), (2**33, 1)]
)
def test_a_region_lies_within_its_object(
    shm: SystemSharedMemory, objects: Objects, offset: int, size: int
) -> None:
    key = objects.new(64)
    with pytest.raises(InvalidInput, match="cannot register shared memory region 'r'"):
        shm.register("r", key, offset, size)
    assert shm.status() == []


@pytest.mark.parametrize(("offset", "size"), [(-1, 8), (0, -8), (True, 8), (0, "8"), (0.5, 8)])
def test_offset_and_size_are_non_negative_integers(
    shm: SystemSharedMemory, objects: Objects, offset: Any, size: Any
) -> None:
    with pytest.raises(InvalidInput, match="must be a non-negative integer"):
        shm.register("r", objects.new(64), offset, size)


def test_a_region_needs_a_name(shm: SystemSharedMemory, objects: Objects) -> None:
    for name in ("", "n" * 257):
        with pytest.raises(InvalidInput, match="needs a name"):
            shm.register(name, objects.new(8), 0, 8)


def test_an_offset_anywhere_in_a_large_object(shm: SystemSharedMemory, objects: Objects) -> None:
    """Mappings start at page boundaries: an offset inside a page (or pages in) still reads the
    region's own bytes (Triton's large-offset test)."""
    page = mmap.ALLOCATIONGRANULARITY
    key = objects.new(3 * page)
    objects.write(key, 2 * page + 12, INTS.tobytes())
    shm.register("r", key, 2 * page + 12, 16)
    placement = shm.place(InferenceRequest(inputs=[shm_input("x", "r", 16)]))
    assert placement.request.inputs[0].data.tolist() == [0, 1, 2, 3]
    placement.release()


def test_off_refuses_all_but_status(objects: Objects) -> None:
    shm = SystemSharedMemory()
    assert shm.status() == []
    with pytest.raises(Forbidden, match="--shared-memory system"):
        shm.register("r", objects.new(8), 0, 8)
    with pytest.raises(Forbidden, match="system shared memory is off"):
        shm.unregister()
    with pytest.raises(Forbidden, match="input 'x' naming shared memory region 'r'"):
        shm.place(InferenceRequest(inputs=[shm_input("x", "r", 16)]))


def test_a_key_prefix_limits_what_is_mapped(objects: Objects) -> None:
    shm = SystemSharedMemory(SharedMemory("system", key_prefix="/podium-test-ok"))
    try:
        shm.register("yes", objects.new(8, name=f"podium-test-ok-{uuid.uuid4().hex}"), 0, 8)
        with pytest.raises(Forbidden, match="start with 'podium-test-ok' \\(--shm-key-prefix\\)"):
            shm.register("no", objects.new(8), 0, 8)
        assert [s.name for s in shm.status()] == ["yes"]
    finally:
        shm.close()


def test_regions_and_bytes_are_bounded(objects: Objects) -> None:
    shm = SystemSharedMemory(SharedMemory("system", max_regions=2, max_size=100))
    try:
        shm.register("a", objects.new(60), 0, 60)
        with pytest.raises(PayloadTooLarge, match="--max-shm-size"):
            shm.register("b", objects.new(60), 0, 41)
        shm.register("b", objects.new(40), 0, 40)
        with pytest.raises(PayloadTooLarge, match="--max-shm-regions 2"):
            shm.register("c", objects.new(1), 0, 1)
        shm.unregister("a")
        shm.register("c", objects.new(60), 0, 60)  # room again
    finally:
        shm.close()


@pytest.mark.parametrize(
    "settings",
    [{"max_regions": 0}, {"max_size": 0}, {"max_regions": True}, {"key_prefix": "a/b"}],
)
def test_settings_are_checked(settings: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        SystemSharedMemory(SharedMemory("system", **settings))


# -- the tensors of a call -------------------------------------------------------------------


def test_an_input_is_a_read_only_view_of_the_region(
    shm: SystemSharedMemory, objects: Objects
) -> None:
    key = objects.new(64)
    objects.write(key, 16, INTS.tobytes())
    shm.register("r", key, 0, 64)
    asked = InferenceRequest(inputs=[shm_input("x", "r", 16, 16)])
    placement = shm.place(asked)
    data = placement.request.inputs[0].data
    assert data.tolist() == [0, 1, 2, 3] and data.dtype == np.int32
    assert not data.flags.writeable
    objects.write(key, 16, np.array([9], "<i4").tobytes())  # no copy: the view sees it
    assert data.tolist() == [9, 1, 2, 3]
    assert placement.request.inputs[0].parameters is None  # the extension's parameters go
    assert asked.inputs[0].data is None  # the caller's request is left as it was
    placement.release()


def test_other_parameters_of_an_input_stay(shm: SystemSharedMemory, objects: Objects) -> None:
    shm.register("r", objects.new(16), 0, 16)
    inp = shm_input("x", "r", 16)
    assert inp.parameters is not None
    inp.parameters["content_type"] = "np"
    placement = shm.place(InferenceRequest(inputs=[inp]))
    assert placement.request.inputs[0].parameters == {"content_type": "np"}
    placement.release()


def test_bytes_inputs_are_length_prefixed(shm: SystemSharedMemory, objects: Objects) -> None:
    key = objects.new(64)
    raw = b"".join(len(s).to_bytes(4, "little") + s for s in (b"ab", b"", b"xyz"))
    objects.write(key, 0, raw)
    shm.register("r", key, 0, 64)
    placement = shm.place(
        InferenceRequest(inputs=[shm_input("s", "r", len(raw), shape=[3], datatype="BYTES")])
    )
    assert placement.request.inputs[0].data == [b"ab", b"", b"xyz"]
    placement.release()


@pytest.mark.parametrize(
    ("inp", "message"),
    [
        (shm_input("x", "nope", 16), "names shared memory region 'nope', which is not registered"),
        (
            shm_input("x", "r", 16, 64),
            "shared_memory_offset 64 is outside shared memory region 'r'",
        ),
        (
            shm_input("x", "r", 16, 56),
            "16 bytes at offset 56 go past the end of shared memory region 'r'",
        ),
        (shm_input("x", "r", 2**70, 0), "go past the end"),
        (shm_input("x", "r", 12), "needs 16 bytes of raw data, got 12"),
        (
            shm_input("x", "r", 16, data=[1, 2, 3, 4]),
            "has both data and the shared memory region 'r'",
        ),
        (
            RequestInput(
                name="x", shape=[4], datatype="INT32", parameters={"shared_memory_region": "r"}
            ),
            "needs shared_memory_byte_size as well",
        ),
        (shm_input("x", "r", "16"), "shared_memory_byte_size must be a non-negative integer"),  # type: ignore[arg-type]
        (shm_input("x", "r", 16, -1), "shared_memory_offset must be a non-negative integer"),
        (shm_input("x", "r", 16, True), "shared_memory_offset must be a non-negative integer"),  # type: ignore[arg-type]
        (shm_input("x", 7, 16), "must be the name of a registered region"),  # type: ignore[arg-type]
    ],
)
def test_a_bad_input_is_named(
    shm: SystemSharedMemory, objects: Objects, inp: RequestInput, message: str
) -> None:
    shm.register("r", objects.new(64), 0, 64)
    with pytest.raises(InvalidInput, match=message) as caught:
        shm.place(InferenceRequest(inputs=[inp]))
    assert "input 'x'" in caught.value.message
    shm.unregister("r")  # nothing holds it: a failed placement lets go of what it took
    assert not shm._regions


def test_a_tensor_byte_size_mismatch_is_an_invalid_tensor(
    shm: SystemSharedMemory, objects: Objects
) -> None:
    shm.register("r", objects.new(64), 0, 64)
    with pytest.raises(InvalidTensor):
        shm.place(InferenceRequest(inputs=[shm_input("x", "r", 32)]))


def test_outputs_are_written_into_their_regions(shm: SystemSharedMemory, objects: Objects) -> None:
    key = objects.new(64)
    shm.register("r", key, 8, 56)
    placement = shm.place(
        InferenceRequest(
            inputs=[],
            outputs=[
                shm_output("y", "r", 16, 4),
                shm_output("s", "r", 24, 24),
                RequestOutput(name="plain"),
            ],
        )
    )
    response = InferenceResponse(
        model_name="m",
        outputs=[
            ResponseOutput(name="y", shape=[4], datatype="INT32", data=[5, 6, 7, 8]),
            ResponseOutput(name="s", shape=[2], datatype="BYTES", data=["hi", b"\xff"]),
            ResponseOutput(name="plain", shape=[1], datatype="FP32", data=[1.5]),
        ],
    )
    placement.write(response)
    placement.release()
    assert np.frombuffer(objects.read(key, 12, 16), "<i4").tolist() == [5, 6, 7, 8]
    assert objects.read(key, 32, 11) == b"\x02\x00\x00\x00hi\x01\x00\x00\x00\xff"
    y, s, plain = response.outputs
    assert y == ResponseOutput(
        name="y",
        shape=[4],
        datatype="INT32",
        parameters={
            "shared_memory_region": "r",
            "shared_memory_offset": 4,
            "shared_memory_byte_size": 16,
        },
    )
    assert s.data is None and s.parameters is not None
    assert s.parameters["shared_memory_byte_size"] == 11  # what it took, of the 24 given
    assert plain.data == [1.5]


def test_an_output_larger_than_its_span_is_refused(
    shm: SystemSharedMemory, objects: Objects
) -> None:
    key = objects.new(64)
    shm.register("r", key, 0, 64)
    placement = shm.place(InferenceRequest(inputs=[], outputs=[shm_output("y", "r", 12)]))
    response = InferenceResponse(
        model_name="m",
        outputs=[ResponseOutput(name="y", shape=[4], datatype="INT32", data=[1, 2, 3, 4])],
    )
    with pytest.raises(
        InvalidInput, match="output 'y' of model 'm' takes 16 bytes, more than the 12"
    ):
        placement.write(response)
    assert objects.read(key, 0, 16) == bytes(16)  # nothing written
    placement.release()


def test_an_output_in_a_region_and_binary_is_refused(
    shm: SystemSharedMemory, objects: Objects
) -> None:
    shm.register("r", objects.new(64), 0, 64)
    with pytest.raises(
        InvalidInput, match="output 'y' asks for both shared_memory_region and binary_data"
    ):
        shm.place(InferenceRequest(inputs=[], outputs=[shm_output("y", "r", 16, binary_data=True)]))
    with pytest.raises(InvalidInput, match="output 'y': shared_memory_offset 64 is outside"):
        shm.place(InferenceRequest(inputs=[], outputs=[shm_output("y", "r", 16, 64)]))


def test_a_shrunk_object_is_refused_not_faulted(shm: SystemSharedMemory, objects: Objects) -> None:
    """Reading mapped memory past an object's end faults (SIGBUS); every use checks first."""
    key = objects.new(2 * mmap.PAGESIZE)
    shm.register("r", key, 0, 2 * mmap.PAGESIZE)
    os.truncate(objects.path(key), 16)
    with pytest.raises(InvalidInput, match="shrank to 16 bytes since it was registered"):
        shm.place(InferenceRequest(inputs=[shm_input("x", "r", 16, mmap.PAGESIZE)]))
    placement = shm.place(InferenceRequest(inputs=[], outputs=[shm_output("y", "r", 16, 0)]))
    response = InferenceResponse(
        outputs=[ResponseOutput(name="y", shape=[4], datatype="INT32", data=[1, 2, 3, 4])]
    )
    with pytest.raises(InvalidInput, match="shrank"):
        placement.write(response)
    placement.release()


# -- lifetime ------------------------------------------------------------------------------


def test_unregistering_a_region_in_use_waits_for_its_calls(
    shm: SystemSharedMemory, objects: Objects
) -> None:
    key = objects.new(64)
    objects.write(key, 0, INTS.tobytes())
    shm.register("r", key, 0, 64)
    placement = shm.place(
        InferenceRequest(inputs=[shm_input("x", "r", 16)], outputs=[shm_output("y", "r", 16, 16)])
    )
    shm.unregister()
    # The name is free at once, and may map something else ...
    assert shm.status() == []
    other = objects.new(64)
    shm.register("r", other, 0, 64)
    # ... while the call keeps the region it started with: its input reads, its output lands.
    assert mapped(key)
    data = placement.request.inputs[0].data
    assert data.tolist() == [0, 1, 2, 3]
    response = InferenceResponse(
        outputs=[ResponseOutput(name="y", shape=[4], datatype="INT32", data=(data * 2).tolist())]
    )
    placement.write(response)
    assert np.frombuffer(objects.read(key, 16, 16), "<i4").tolist() == [0, 2, 4, 6]
    assert objects.read(other, 16, 16) == bytes(16)
    placement.release()
    placement.release()  # once
    # Unmapped once the call's arrays go with it (Python refuses to unmap viewed memory).
    del data, placement
    assert not mapped(key) and mapped(other)


def test_an_array_kept_by_a_model_keeps_the_mapping(
    shm: SystemSharedMemory, objects: Objects
) -> None:
    key = objects.new(64)
    objects.write(key, 0, INTS.tobytes())
    shm.register("r", key, 0, 64)
    placement = shm.place(InferenceRequest(inputs=[shm_input("x", "r", 16)]))
    kept = placement.request.inputs[0].data
    placement.release()
    shm.unregister("r")  # the unmap is refused by Python while the array views it: no crash
    assert mapped(key)
    assert kept.tolist() == [0, 1, 2, 3]
    del kept, placement
    assert not mapped(key)


def test_close_unmaps_everything(objects: Objects) -> None:
    shm = SystemSharedMemory(SharedMemory("system"))
    keys = [objects.new(8) for _ in range(3)]
    for i, key in enumerate(keys):
        shm.register(f"r{i}", key, 0, 8)
    shm.close()
    assert shm.status() == [] and not any(mapped(k) for k in keys)


# -- the data plane ----------------------------------------------------------------------------

OIP = WireProtocol.OIP_REST


class Instance:
    def __init__(self, kind: InputKind = InputKind.DEFAULT, *, streaming: bool = False) -> None:
        self.capabilities = Capabilities(input_kind=kind, streaming=streaming)

    async def load(self) -> None:
        pass


class Scheduler:
    """Answers ``result`` (``infer``) or ``items`` (``stream``); records the inputs it got."""

    def __init__(self, result: Any = None, items: list[Any] | None = None) -> None:
        self.result = result
        self.items = items or []
        self.inputs: list[Any] = []

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def infer(self, inputs: Any, request: Any) -> Any:
        self.inputs.append(inputs)
        return self.result

    async def stream(self, inputs: Any, request: Any) -> AsyncGenerator[Any, None]:
        self.inputs.append(inputs)
        for item in self.items:
            yield item


def served(
    shm: SystemSharedMemory, scheduler: Scheduler, instance: Instance | None = None
) -> tuple[DataPlane, ModelVersion]:
    mv = ModelVersion(
        ModelConfig(name="m"),
        instance or Instance(),  # type: ignore[arg-type]
        scheduler,  # type: ignore[arg-type]
        source="/models/m",
    )
    mv.state = mv.state.READY
    registry = Registry()
    registry.add(mv)
    return DataPlane(registry, shared_memory=shm), mv


def test_the_extension_is_advertised_only_when_on(shm: SystemSharedMemory) -> None:
    assert "system_shared_memory" in DataPlane(shared_memory=shm).server_metadata().extensions
    assert "system_shared_memory" not in DataPlane().server_metadata().extensions


@pytest.mark.anyio
async def test_infer_reads_and_writes_regions(shm: SystemSharedMemory, objects: Objects) -> None:
    key = objects.new(64)
    objects.write(key, 0, INTS.tobytes())
    shm.register("r", key, 0, 64)
    scheduler = Scheduler(result={"y": np.array([7, 8], dtype=np.int64)})
    plane, mv = served(shm, scheduler)
    request = InferenceRequest(
        inputs=[shm_input("x", "r", 16)], outputs=[shm_output("y", "r", 16, 32)]
    )
    call = Call("m", None, OIP, request)
    answer = await plane.infer(call, mv)
    (inputs,) = scheduler.inputs
    assert inputs["x"].tolist() == [0, 1, 2, 3]
    assert np.frombuffer(objects.read(key, 32, 16), "<i8").tolist() == [7, 8]
    (out,) = answer.value.outputs
    assert out.data is None and out.parameters["shared_memory_byte_size"] == 16
    assert call.payload is request and request.inputs[0].data is None  # the call stays as sent
    assert shm._regions["r"].users == 0


@pytest.mark.anyio
async def test_a_streamed_call_writes_each_item(shm: SystemSharedMemory, objects: Objects) -> None:
    key = objects.new(8)
    shm.register("r", key, 0, 8)
    items = [{"y": np.array([k], dtype=np.int64)} for k in (1, 2, 3)]
    plane, mv = served(shm, Scheduler(items=items), Instance(streaming=True))
    request = InferenceRequest(inputs=[], outputs=[shm_output("y", "r", 8)])
    seen = []
    stream = plane.stream(Call("m", None, OIP, request), mv)
    async for response in stream:
        seen.append(np.frombuffer(objects.read(key, 0, 8), "<i8").tolist())
        assert response.outputs[0].data is None
    assert seen == [[1], [2], [3]]
    assert shm._regions["r"].users == 0


@pytest.mark.anyio
async def test_a_failed_call_lets_go_of_its_regions(
    shm: SystemSharedMemory, objects: Objects
) -> None:
    shm.register("r", objects.new(8), 0, 8)
    plane, mv = served(shm, Scheduler(result={"other": 1}))
    request = InferenceRequest(inputs=[], outputs=[shm_output("y", "r", 8)])
    with pytest.raises(InvalidInput, match="requested output 'y' is not produced"):
        await plane.infer(Call("m", None, OIP, request), mv)
    assert shm._regions["r"].users == 0


@pytest.mark.anyio
async def test_a_model_taking_the_request_gets_the_placed_one(
    shm: SystemSharedMemory, objects: Objects
) -> None:
    key = objects.new(16)
    objects.write(key, 0, INTS.tobytes())
    shm.register("r", key, 0, 16)
    scheduler = Scheduler(result={"y": 1})
    plane, mv = served(shm, scheduler, Instance(InputKind.OIP_REQUEST))
    request = InferenceRequest(inputs=[shm_input("x", "r", 16)])
    await plane.infer(Call("m", None, OIP, request), mv)
    (got,) = scheduler.inputs
    assert isinstance(got, InferenceRequest) and got.inputs[0].data.tolist() == [0, 1, 2, 3]


def test_only_calls_naming_a_region_are_placed() -> None:
    plain = RequestInput(name="x", shape=[1], datatype="FP32", data=[1.0], parameters={"a": 1})
    assert not uses_shared_memory(
        InferenceRequest(inputs=[plain], outputs=[RequestOutput(name="y")])
    )
    assert uses_shared_memory(InferenceRequest(inputs=[], outputs=[shm_output("y", "r", 8)]))
    assert uses_shared_memory(InferenceRequest(inputs=[shm_input("x", "r", 8)]))
