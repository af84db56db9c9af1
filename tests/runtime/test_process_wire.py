"""The messages between the server and its worker processes, and their framing on the socket:
podium.runtime.process._messages and _wire, without a process."""

from __future__ import annotations

import os
import pickle
import typing
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from podium.errors import ModelError, WorkerDied
from podium.runtime.process import _messages as m
from podium.runtime.process._wire import FAST, PLAIN_BUDGET, SHARED_MIN, Decoder, Ring, encode
from podium.types import (
    Capabilities,
    InferenceRequest,
    InferenceResponse,
    InputKind,
    RequestInput,
    RequestOutput,
    ResponseOutput,
)


def _frame(message: m.Message) -> bytes:
    return b"".join(bytes(piece) for piece in encode(message))


def _decode(data: bytes, chunk: int | None = None) -> list[m.Message]:
    got: list[m.Message] = []
    decoder = Decoder(got.append)
    step = chunk or len(data) or 1
    for at in range(0, len(data), step):
        decoder.feed(data[at : at + step])
    return got


SAMPLES: list[m.Message] = [
    m.Infer(1, {"x": [1, 2]}, None),
    m.Stream(2, "text", ({"method": "POST"}, b"body")),
    m.Batch(3, [1, 2], [None, None]),
    m.Cancel(4),
    m.Credit(5, 8),
    m.Ready(Capabilities(input_kind=InputKind.RAW, streaming=True, has_preprocess=True)),
    m.StartFailed("ImportError: no module named 'nothing'"),
    m.Answer(6, {"y": 1.5}),
    m.Error(7, *m.pack_error(ModelError("model 'm' predict raised KeyError: 'a'"))),
    m.Item(8, "token"),
    m.End(9),
    m.Stopped(10),
    m.Report(None, [(("tokens", "counter", "", ("kind",), ()), ("a",), 2.0)]),
    m.Release(1 << 22),
]


def test_every_message_has_a_tag_and_the_samples_cover_them() -> None:
    assert set(m.MESSAGES) == set(typing.get_args(m.Message))
    assert len(set(m.MESSAGES)) == len(m.MESSAGES)
    sampled = {type(s) for s in SAMPLES}
    assert sampled == set(m.MESSAGES) - {m.Init}


@pytest.mark.parametrize("chunk", [None, 1, 7])
def test_messages_round_trip_whole_or_in_any_chunks(chunk: int | None) -> None:
    data = b"".join(_frame(s) for s in SAMPLES)
    got = _decode(data, chunk)
    assert [type(g) for g in got] == [type(s) for s in SAMPLES]
    for sent, came in zip(SAMPLES, got, strict=True):
        if isinstance(sent, m.Error):
            assert isinstance(came, m.Error)
            assert (came.cid, came.type, came.message) == (sent.cid, sent.type, sent.message)
        else:
            assert came == sent


def test_large_arrays_travel_out_of_band_and_arrive_writable() -> None:
    big = np.arange(10_000, dtype=np.float64)  # 80 kB
    small = np.arange(4, dtype=np.int32)
    pieces = encode(m.Answer(1, {"big": big, "small": small}))
    assert len(pieces) == 3  # header, pickle, the big array's own memory
    assert pieces[2].nbytes == big.nbytes
    assert len(pieces[1]) < 1000  # not copied into the pickle
    (got,) = _decode(b"".join(bytes(p) for p in pieces), chunk=4096)
    assert isinstance(got, m.Answer)
    np.testing.assert_array_equal(got.value["big"], big)
    np.testing.assert_array_equal(got.value["small"], small)
    got.value["big"][0] = -1.0  # a writable array over the received frame


@pytest.mark.skipif(not Ring.available(), reason="no /dev/shm")
def test_very_large_arrays_go_through_a_shared_memory_ring_that_the_reader_releases() -> None:
    name = f"podium-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    ring = Ring(name, size=16 << 20)
    big = np.arange(1 << 20, dtype=np.float32)  # 4 MiB: at least SHARED_MIN
    middle = np.arange(SHARED_MIN // 8 - 1, dtype=np.float64)  # under it: through the socket
    got: list[m.Message] = []
    decoder = Decoder(got.append)
    try:
        data = b"".join(bytes(p) for p in encode(m.Answer(1, {"big": big, "middle": middle}), ring))
        assert len(data) < middle.nbytes + 1000  # the big array is not in the frame
        assert Path("/dev/shm", name).exists()
        for at in range(0, len(data), 4096):
            decoder.feed(data[at : at + 4096])
        assert not Path("/dev/shm", name).exists()  # the reader mapped it and unlinked the name
        (came,) = got
        assert isinstance(came, m.Answer)
        np.testing.assert_array_equal(came.value["big"], big)
        np.testing.assert_array_equal(came.value["middle"], middle)
        came.value["big"][0] = -1.0  # writable, and the reader's own copy:
        assert ring.put(memoryview(big)) is not None  # the ring's region may be reused
        # 16 MiB taken of 16, none released: the next does not fit (it takes the socket)
        assert ring.put(memoryview(big)) is not None
        assert ring.put(memoryview(big)) is not None
        assert ring.put(memoryview(big)) is None
        released = decoder.take_released()
        assert released == 4 << 20 and decoder.take_released() == 0
        ring.release(released)
        assert ring.put(memoryview(big)) is not None
        # without a ring the socket carries everything
        assert sum(len(bytes(p)) for p in encode(m.Answer(1, big))) > big.nbytes
    finally:
        ring.close()
        decoder.close()
        Ring.sweep(name)


def test_sweep_removes_a_ring_no_reader_mapped() -> None:
    prefix = f"podium-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    rings = [Ring(f"{prefix}-s"), Ring(f"{prefix}-c")]
    for ring in rings:
        encode(m.Answer(1, np.zeros(1 << 18, np.float32)), ring)
        ring.close()
    if not Ring.available():
        return
    assert len(list(Path("/dev/shm").glob(f"{prefix}-*"))) == 2
    assert Ring.sweep(prefix) == 2
    assert not list(Path("/dev/shm").glob(f"{prefix}-*"))


def test_a_frame_is_no_larger_than_a_string_tagged_tuple() -> None:
    inputs = {"x": np.arange(16, dtype=np.float32)}
    snapshot = ({"method": "POST", "path": "/v2/models/m/infer"}, b"{}")

    def tuple_frame(message: tuple[Any, ...]) -> int:  # the framing before the messages had types
        return 8 + len(pickle.dumps(message, protocol=5))

    assert len(_frame(m.Infer(12345, inputs, snapshot))) < tuple_frame(
        ("call", 12345, "infer", inputs, snapshot)
    )
    assert len(_frame(m.Answer(12345, inputs))) < tuple_frame(("ok", 12345, inputs))
    assert len(_frame(m.Item(12345, "tok"))) < tuple_frame(("item", 12345, "tok"))
    assert len(_frame(m.Credit(12345, 8))) < tuple_frame(("credit", 12345, 8))


class _Picky(Exception):
    def __init__(self, a: int, b: int) -> None:  # not constructible from its message alone
        super().__init__(f"{a}/{b}")
        self.a = a
        self.lock = __import__("threading").Lock()  # cannot be pickled


def test_errors_cross_as_class_message_and_picklable_attributes() -> None:
    error = m.Error(1, *m.pack_error(_Picky(1, 2)))
    (came,) = _decode(_frame(error))
    assert isinstance(came, m.Error)
    exc = came.exception()
    assert type(exc) is _Picky and str(exc) == "1/2"
    assert exc.a == 1 and not hasattr(exc, "lock")
    died = m.Failed.of(WorkerDied("worker process 7 died"))
    rebuilt = pickle.loads(pickle.dumps(died, protocol=5)).exception()
    assert isinstance(rebuilt, WorkerDied) and rebuilt.message == "worker process 7 died"


def test_the_package_exports_what_other_packages_use() -> None:
    import podium.runtime.process as process

    assert sorted(process.__all__) == process.__all__
    assert set(process.__all__) == {
        "Failed",
        "HostFactory",
        "ProcessWorker",
        "RemoteInstance",
        "Runner",
        "WorkerGone",
        "process_pool",
    }
    for name in process.__all__:
        assert hasattr(process, name), name


@pytest.mark.skipif(not Ring.available(), reason="no /dev/shm")
def test_a_ring_that_cannot_be_made_leaves_the_socket_to_carry_everything() -> None:
    name = f"podium-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    Path("/dev/shm", name).write_bytes(b"someone else's")  # the ring cannot be made there
    ring = Ring(name)
    big = np.arange(1 << 20, dtype=np.float32)
    try:
        for _ in range(2):
            pieces = encode(m.Answer(1, big), ring)
            assert sum(len(bytes(p)) for p in pieces) > big.nbytes
            (came,) = _decode(b"".join(bytes(p) for p in pieces))
            assert isinstance(came, m.Answer)
            np.testing.assert_array_equal(came.value, big)
        assert Path("/dev/shm", name).read_bytes() == b"someone else's"
    finally:
        Path("/dev/shm", name).unlink()


def _oip_request(data: Any, **extra: Any) -> InferenceRequest:
    tensor = RequestInput(name="x", shape=[1, 4], datatype="FP32", data=data, **extra)
    return InferenceRequest(inputs=[tensor], id="r1", outputs=[RequestOutput(name="y")])


def _oip_response(data: Any, **extra: Any) -> InferenceResponse:
    tensor = ResponseOutput(name="y", shape=[4], datatype="FP32", data=data, **extra)
    return InferenceResponse(outputs=[tensor], model_name="m", parameters={"a": [1, "b"]})


def _types(value: Any) -> Any:
    """The exact type of everything in ``value``, nested (what must not change on the way)."""
    if isinstance(value, dict):
        return (dict, {k: _types(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return (type(value), [_types(v) for v in value])
    if isinstance(value, InferenceRequest | InferenceResponse | RequestInput | ResponseOutput):
        fields = {f: _types(getattr(value, f)) for f in value.__struct_fields__}
        return (type(value), fields)
    return type(value)


PLAIN_MESSAGES: list[m.Message] = [
    m.Infer(1, {"a": [1, 2.5, "s", None, True, {"b": [[1], []]}], "c": b"raw"}, None, "rid"),
    m.Infer(2, _oip_request([[1, 2], [3, 4]], parameters={"p": 1}), None, None),
    m.Infer(3, m.Unvalidated({"x": [1.0]}), None, "rid"),
    m.Infer(4, "text", None),
    m.Answer(5, _oip_response([1.5, 2, -0.0, 1e300], parameters={"q": None})),
    m.Answer(6, [{"label": "cat", "score": 0.5}]),
    m.Answer(7, None),
    m.Answer(8, InferenceResponse()),
    m.Item(9, "token"),
    m.Item(10, _oip_response(["text"])),
    m.Batch(11, [{"x": [1.0]}, {"x": [2.0]}], [None, None]),
]


@pytest.mark.parametrize("chunk", [None, 1, 5])
def test_plain_infer_and_answer_skip_pickle_and_arrive_unchanged(chunk: int | None) -> None:
    frames = [_frame(s) for s in PLAIN_MESSAGES]
    assert all(f[0] == FAST for f in frames)
    assert all(b"podium" not in f for f in frames)  # no class crossed by name (pickle's way)
    got = _decode(b"".join(frames), chunk)
    assert got == PLAIN_MESSAGES
    for sent, came in zip(PLAIN_MESSAGES, got, strict=True):
        assert _types(astuple(came)) == _types(astuple(sent))


def astuple(message: m.Message) -> tuple[Any, ...]:
    return tuple(getattr(message, f) for f in message.__struct_fields__)


class _Label(str):
    pass


NOT_PLAIN: list[Any] = [
    (1, 2),  # a tuple would arrive as a list
    {"x": (1, 2)},
    {1: "int key"},
    {"x": {1, 2}},
    [_Label("cat")],
    [True, 2**70],  # past 64 bits
    "\ud800",  # not UTF-8
    b"x" * 5000,  # large bytes: out of band, as before
    bytearray(b"x"),
    list(range(PLAIN_BUDGET + 1)),
    [[0] * 100] * (PLAIN_BUDGET // 100 + 1),
    m.Unvalidated((1,)),
    _oip_request((1, 2, 3, 4)),
    _oip_request([1, 2], parameters={"p": (1,)}),
    InferenceRequest(inputs=[RequestInput(name="x", shape=[True], datatype="BOOL", data=[1])]),
    InferenceRequest(inputs=[RequestInput(name=b"x", shape=[1], datatype="FP32", data=[1])]),
    InferenceRequest(inputs=[], outputs=[RequestOutput(name="y", parameters={"p": {2}})]),
    _oip_response([1], parameters={"p": 1.0j}),
    InferenceResponse(outputs=[], model_name="m", model_version=1),  # type: ignore[arg-type]
    InferenceResponse(outputs=({"name": "y"},)),  # type: ignore[arg-type]
]


@pytest.mark.parametrize("value", NOT_PLAIN, ids=range(len(NOT_PLAIN)))
def test_values_that_would_change_on_the_way_take_pickle(value: Any) -> None:
    for message in (m.Infer(1, value, None, "rid"), m.Answer(1, value), m.Item(1, value)):
        data = _frame(message)
        assert data[0] != FAST
        (came,) = _decode(data)
        assert came == message
        assert _types(astuple(came)) == _types(astuple(message))


SMALL_ARRAYS = [
    np.arange(4, dtype=np.float32),
    np.arange(6, dtype=np.int64).reshape(2, 3),
    np.array([True, False]),
    np.array(2.5),  # 0-d
    np.zeros((0, 3), np.uint8),
    np.arange(3, dtype=np.longlong),
    np.array([1 + 2j], np.complex64),
    np.arange(8, dtype=np.float16).reshape(2, 2, 2),
]


@pytest.mark.parametrize("array", SMALL_ARRAYS, ids=range(len(SMALL_ARRAYS)))
def test_small_numpy_arrays_skip_pickle_and_arrive_equal_and_writable(array: Any) -> None:
    for message in (
        m.Infer(1, {"x": array, "n": 1}, None, "rid"),
        m.Answer(1, _oip_response(array)),
    ):
        data = _frame(message)
        assert data[0] == FAST
        (came,) = _decode(data, chunk=3)
        value = came.inputs["x"] if isinstance(came, m.Infer) else came.value.outputs[0].data
        assert type(value) is np.ndarray
        assert value.dtype == array.dtype and value.shape == array.shape
        np.testing.assert_array_equal(value, array)
        assert value.flags.writeable and value.flags.c_contiguous


NUMPY_NOT_PLAIN = [
    [np.float32(1.0)],  # a numpy scalar
    np.arange(8, dtype=np.float32)[::2],  # not contiguous
    np.asfortranarray(np.arange(6.0).reshape(2, 3)),  # Fortran order, kept by pickle
    np.arange(4, dtype=">f4"),  # not native byte order
    np.array(["a", None], dtype=object),
    np.array(["2026-01-01"], dtype="datetime64[D]"),
    np.array([("a", 1)], dtype=[("s", "U1"), ("i", "i4")]),
    np.ma.masked_array([1, 2], mask=[0, 1]),
    np.zeros(1024, np.float64),  # 8 kB: out of band
]


@pytest.mark.parametrize("value", NUMPY_NOT_PLAIN, ids=range(len(NUMPY_NOT_PLAIN)))
def test_numpy_values_that_would_change_take_pickle(value: Any) -> None:
    for message in (m.Answer(1, value), m.Answer(1, _oip_response(value))):
        data = b"".join(bytes(p) for p in encode(message))
        assert data[0] != FAST
        (came,) = _decode(data)
        assert isinstance(came, m.Answer)
        sent, got = message.value, came.value
        if isinstance(sent, InferenceResponse):
            sent, got = sent.outputs[0].data, got.outputs[0].data
        if isinstance(sent, list):
            sent, got = sent[0], got[0]
        assert type(got) is type(sent) and got.dtype == sent.dtype
        assert np.isfortran(got) == np.isfortran(sent)
        np.testing.assert_array_equal(got, sent)


def test_a_request_snapshot_takes_pickle() -> None:
    snapshot = ({"method": "POST"}, b"{}")
    for message in (
        m.Infer(1, {"x": 1}, snapshot, "rid"),
        m.Batch(2, [{"x": 1}, {"x": 2}], [None, snapshot]),
    ):
        data = _frame(message)
        assert data[0] != FAST
        assert _decode(data) == [message]


def test_a_batch_of_inputs_that_are_not_all_plain_takes_pickle() -> None:
    message = m.Batch(1, [{"x": [1]}, {"x": (1,)}], [None, None])
    data = _frame(message)
    assert data[0] != FAST
    (came,) = _decode(data)
    assert came == message and type(came.inputs[1]["x"]) is tuple
