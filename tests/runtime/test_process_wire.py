"""The messages between the server and its worker processes, and their framing on the socket:
podium.runtime.process._messages and _wire, without a process."""

from __future__ import annotations

import dataclasses
import datetime
import enum
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
from podium.runtime.process._wire import SHARED_MIN, Decoder, Encoder, Ring
from podium.types import (
    Capabilities,
    InferenceRequest,
    InferenceResponse,
    InputKind,
    RequestInput,
    RequestOutput,
    ResponseOutput,
)


def encode(message: m.Message, ring: Ring | None = None) -> list[bytes | memoryview]:
    return Encoder(ring).encode(message)


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
    m.Infer(2, "text", ({"method": "POST"}, b"body"), stream=True),
    m.Batch(3, [1, 2], [None, None]),
    m.Cancel(4),
    m.Credit(5, 8),
    m.Ready(Capabilities(input_kind=InputKind.RAW, streaming=True, has_preprocess=True)),
    m.StartFailed("ImportError: no module named 'nothing'"),
    m.Answer(6, {"y": 1.5}),
    m.Results(6, [{"y": 1.5}, m.Failed.of(ValueError("bad")), "z"]),
    m.Error(7, m.Failed.of(ModelError("model 'm' predict raised KeyError: 'a'"))),
    m.Item(8, "token"),
    m.End(9),
    m.Report(None, [(("tokens", "counter", "", ("kind",), ()), ("a",), 2.0)]),
    m.Release(1 << 22),
    m.Step(11, [1, 2], [{"x": [1, 2]}, "text"], [3], [1, 2, 4]),
    m.Stepped(11, [["a", "b"], [], [{"token": 1}]], [2]),
]


def test_the_samples_cover_every_message() -> None:
    sampled = {type(s) for s in SAMPLES}
    assert sampled == set(typing.get_args(m.Message)) - {m.Init}


@pytest.mark.parametrize("chunk", [None, 1, 7])
def test_messages_round_trip_whole_or_in_any_chunks(chunk: int | None) -> None:
    data = b"".join(_frame(s) for s in SAMPLES)
    got = _decode(data, chunk)
    assert [type(g) for g in got] == [type(s) for s in SAMPLES]
    for sent, came in zip(SAMPLES, got, strict=True):
        if isinstance(sent, m.Error):
            assert isinstance(came, m.Error)
            assert (came.cid, came.failed.type, came.failed.message) == (
                sent.cid,
                sent.failed.type,
                sent.failed.message,
            )
        elif isinstance(sent, m.Results):
            assert isinstance(came, m.Results)
            failed = came.value[1]
            assert type(failed) is m.Failed and failed.type is ValueError
            assert [came.value[0], came.value[2]] == [{"y": 1.5}, "z"]
        else:
            assert came == sent


def test_a_step_carries_arrays_each_way_and_a_failed_preprocess() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    (step,) = _decode(_frame(m.Step(1, [7], [{"x": x}], [], [7])))
    assert isinstance(step, m.Step) and step.joined == [7] and step.batch == [7]
    np.testing.assert_array_equal(step.inputs[0]["x"], x)
    failed = m.Failed.of(ValueError("bad"))
    (stepped,) = _decode(_frame(m.Stepped(1, [[x, "t"], failed], [7])))
    assert isinstance(stepped, m.Stepped) and stepped.done == [7]
    first, second = stepped.items
    np.testing.assert_array_equal(first[0], x)
    assert first[1] == "t" and type(second) is m.Failed and second.type is ValueError


def test_large_arrays_travel_out_of_band_and_arrive_writable() -> None:
    big = np.arange(10_000, dtype=np.float64)  # 80 kB
    small = np.arange(4, dtype=np.int32)
    pieces = encode(m.Answer(1, {"big": big, "small": small}))
    assert len(pieces) == 2  # header and body, the big array's own memory
    assert pieces[1].nbytes == big.nbytes
    assert len(pieces[0]) < 1000  # not copied into the body
    assert b"numpy" not in bytes(pieces[0])  # no pickle
    (got,) = _decode(b"".join(bytes(p) for p in pieces), chunk=4096)
    assert isinstance(got, m.Answer)
    np.testing.assert_array_equal(got.value["big"], big)
    np.testing.assert_array_equal(got.value["small"], small)
    got.value["big"][0] = -1.0  # a writable array over the received frame
    assert got.value["big"].ctypes.data % 16 == 0  # aligned in it


def test_out_of_band_buffers_of_a_pickled_value_and_of_arrays_share_the_frame() -> None:
    arrays = [np.arange(1025, dtype=np.float32), np.arange(5001, dtype=np.int8)]
    value = {"opaque": _Boxed(np.arange(5000, dtype=np.int16)), "arrays": arrays}
    pieces = encode(m.Item(3, value))
    assert sum(len(bytes(p)) for p in pieces[:1]) < 1000  # none of them in the body
    (got,) = _decode(b"".join(bytes(p) for p in pieces), chunk=1000)
    assert isinstance(got, m.Item) and type(got.value["opaque"]) is _Boxed
    np.testing.assert_array_equal(got.value["opaque"].array, value["opaque"].array)
    for sent, came in zip(arrays, got.value["arrays"], strict=True):
        np.testing.assert_array_equal(came, sent)
        assert came.dtype == sent.dtype and came.flags.writeable


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
        assert came.value["big"].ctypes.data % 16 == 0
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
    Ring.sweep(prefix)
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
    error = m.Error(1, m.Failed.of(_Picky(1, 2)))
    (came,) = _decode(_frame(error))
    assert isinstance(came, m.Error)
    exc = came.failed.exception()
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
    m.Infer(4, {1: "an int key", 2: b"x" * 5000}, None, stream=True),
    m.Answer(5, _oip_response([1.5, 2, -0.0, 1e300], parameters={"q": None})),
    m.Answer(6, [{"label": "cat", "score": 0.5}]),
    m.Answer(7, None),
    m.Answer(8, InferenceResponse()),
    m.Item(9, "token"),
    m.Item(10, _oip_response(["text"])),
    m.Batch(11, [{"x": [1.0]}, {"x": [2.0]}], [None, None]),
    m.Results(12, [_oip_response([1.0]), {"y": 2}, None]),
]


@pytest.mark.parametrize("chunk", [None, 1, 5])
def test_plain_values_travel_as_messagepack_and_arrive_unchanged(chunk: int | None) -> None:
    frames = [_frame(s) for s in PLAIN_MESSAGES]
    assert all(b"podium" not in f for f in frames)  # no class crossed by name (pickle's way)
    got = _decode(b"".join(frames), chunk)
    assert got == PLAIN_MESSAGES
    for sent, came in zip(PLAIN_MESSAGES, got, strict=True):
        assert _types(astuple(came)) == _types(astuple(sent))


def astuple(message: m.Message) -> tuple[Any, ...]:
    return tuple(getattr(message, f) for f in message.__struct_fields__)


class _Label(str):
    pass


class _Color(enum.Enum):
    RED = 1


@dataclasses.dataclass
class _Point:
    x: int


class _Boxed:
    def __init__(self, array: Any) -> None:
        self.array = array


#: Values that are not plain data at their top level, or that msgspec refuses: they arrive as
#: they left (their pickle), each of exactly its type all the way down.
OPAQUE: list[Any] = [
    (1, 2),
    {1, 2},
    frozenset({1}),
    bytearray(b"x"),
    _Label("cat"),
    [_Label("cat")],  # a str subclass anywhere: msgspec cannot encode it
    _Color.RED,
    _Point(1),
    [True, 2**70],  # past 64 bits
    {"s": "\ud800"},  # not UTF-8
    m.Unvalidated((1,)),
    m.Failed.of(KeyError("k")),
    _oip_response([1], parameters={"p": 1.0j}),
    InferenceResponse(outputs=({"name": "y"},)),  # type: ignore[arg-type]
    InferenceRequest(inputs=[], outputs=({"name": "y"},)),  # type: ignore[arg-type]
    # an OIP struct of fields that its type does not declare: rebuilt as it left, unvalidated
    InferenceRequest(inputs=[RequestInput(name="x", shape=[True], datatype="BOOL", data=[1])]),
    InferenceRequest(inputs=[RequestInput(name=b"x", shape=[1], datatype="FP32", data=[1])]),
    InferenceResponse(outputs=[], model_name="m", model_version=1),  # type: ignore[arg-type]
]


def _same(came: Any, sent: Any) -> None:
    assert _types(came) == _types(sent)
    if isinstance(sent, m.Failed):
        assert (came.type, came.message) == (sent.type, sent.message)
    elif isinstance(sent, m.Unvalidated):
        assert came.value == sent.value
    else:
        assert came == sent


@pytest.mark.parametrize("value", OPAQUE, ids=range(len(OPAQUE)))
def test_values_that_are_not_plain_arrive_as_they_left(value: Any) -> None:
    for message in (m.Infer(1, value, None, "rid"), m.Answer(1, value), m.Item(1, value)):
        (came,) = _decode(_frame(message))
        assert type(came) is type(message) and came.cid == message.cid
        _same(came.value if isinstance(came, m.Answer | m.Item) else came.inputs, value)


#: What changes on the way, as the module's docstring says: what msgspec encodes natively but
#: decodes as another type, nested inside a plain value (or an OIP tensor).
CHANGED: list[tuple[Any, Any]] = [
    ({"x": (1, 2)}, {"x": [1, 2]}),
    ([{1, 2}], [[1, 2]]),
    ({"b": bytearray(b"x")}, {"b": b"x"}),
    ({"e": _Color.RED}, {"e": 1}),
    ({"p": _Point(2)}, {"p": {"x": 2}}),
    (_oip_request((1, 2, 3, 4)), _oip_request([1, 2, 3, 4])),
    ({"d": datetime.date(2026, 11, 29)}, {"d": "2026-11-29"}),
    ({"t": datetime.datetime(2026, 11, 29, 12)}, {"t": "2026-11-29T12:00:00"}),  # no time zone
    (
        {"t": datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)},
        {"t": datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)},
    ),
    ({"u": uuid.UUID(int=1)}, {"u": "00000000-0000-0000-0000-000000000001"}),
]


@pytest.mark.parametrize(("value", "arrives"), CHANGED, ids=range(len(CHANGED)))
def test_what_msgspec_changes_inside_a_plain_value_is_what_the_docs_say(
    value: Any, arrives: Any
) -> None:
    (came,) = _decode(_frame(m.Answer(1, value)))
    assert isinstance(came, m.Answer)
    assert came.value == arrives and _types(came.value) == _types(arrives)


SMALL_ARRAYS = [
    np.arange(4, dtype=np.float32),
    np.arange(6, dtype=np.int64).reshape(2, 3),
    np.array([True, False]),
    np.array(2.5),  # 0-d
    np.zeros((0, 3), np.uint8),
    np.arange(3, dtype=np.longlong),
    np.array([1 + 2j], np.complex64),
    np.arange(8, dtype=np.float16).reshape(2, 2, 2),
    np.arange(4, dtype=">f4"),  # not native byte order
    np.array(["2026-01-01"], dtype="datetime64[D]"),
    np.array(["ab", "c"]),
    np.asfortranarray(np.arange(6.0).reshape(2, 3)),  # Fortran order
    np.zeros(1024, np.float64),  # 8 kB: out of band
]


@pytest.mark.parametrize("array", SMALL_ARRAYS, ids=range(len(SMALL_ARRAYS)))
def test_numpy_arrays_travel_as_an_extension_and_arrive_equal_and_writable(array: Any) -> None:
    for message in (
        m.Infer(1, {"x": array, "n": 1}, None, "rid"),
        m.Answer(1, _oip_response(array)),
    ):
        data = b"".join(bytes(p) for p in encode(message))
        assert b"numpy" not in data  # not pickled
        (came,) = _decode(data, chunk=3)
        value = came.inputs["x"] if isinstance(came, m.Infer) else came.value.outputs[0].data
        assert type(value) is np.ndarray
        assert value.dtype == array.dtype and value.shape == array.shape
        assert np.isfortran(value) == np.isfortran(array)
        np.testing.assert_array_equal(value, array)
        assert value.flags.writeable


NUMPY_PICKLED = [
    [np.float32(1.0)],  # a numpy scalar
    np.array(["a", None], dtype=object),
    np.array([("a", 1)], dtype=[("s", "U1"), ("i", "i4")]),
    np.ma.masked_array([1, 2], mask=[0, 1]),
]


@pytest.mark.parametrize("value", NUMPY_PICKLED, ids=range(len(NUMPY_PICKLED)))
def test_numpy_values_the_extension_does_not_carry_are_pickled(value: Any) -> None:
    for message in (m.Answer(1, value), m.Answer(1, _oip_response(value))):
        (came,) = _decode(b"".join(bytes(p) for p in encode(message)))
        assert isinstance(came, m.Answer)
        sent, got = message.value, came.value
        if isinstance(sent, InferenceResponse):
            sent, got = sent.outputs[0].data, got.outputs[0].data
        if isinstance(sent, list):
            sent, got = sent[0], got[0]
        assert type(got) is type(sent) and got.dtype == sent.dtype
        np.testing.assert_array_equal(got, sent)


def test_a_strided_view_arrives_as_a_contiguous_array() -> None:
    view = np.arange(8, dtype=np.float32)[::2]
    (came,) = _decode(_frame(m.Answer(1, view)))
    assert isinstance(came, m.Answer)
    np.testing.assert_array_equal(came.value, view)
    assert came.value.flags.c_contiguous


def test_a_request_snapshot_arrives_as_it_left() -> None:
    snapshot = ({"method": "POST"}, b"{}")
    for message in (
        m.Infer(1, {"x": 1}, snapshot, "rid"),
        m.Batch(2, [{"x": 1}, {"x": 2}], [None, snapshot]),
    ):
        (came,) = _decode(_frame(message))
        assert came == message
        requests = came.requests if isinstance(came, m.Batch) else [came.request]
        assert type(requests[-1]) is tuple


def test_each_input_of_a_batch_and_each_value_of_its_results_go_by_their_own_type() -> None:
    inputs = [{"x": [1]}, (1,), _oip_request([1.0])]
    results = [_oip_response([2.0]), m.Failed.of(ValueError("v")), (3,)]
    (batch,) = _decode(_frame(m.Batch(1, inputs, [None] * 3)))
    assert isinstance(batch, m.Batch) and batch.inputs == inputs
    assert [type(v) for v in batch.inputs] == [dict, tuple, InferenceRequest]
    (answer,) = _decode(_frame(m.Results(1, results)))
    assert isinstance(answer, m.Results)
    assert [type(v) for v in answer.value] == [InferenceResponse, m.Failed, tuple]
    assert answer.value[0] == results[0] and answer.value[2] == (3,)


class _Unpicklable:
    def __reduce__(self) -> Any:
        raise TypeError("cannot pickle _Unpicklable")


@pytest.mark.skipif(not Ring.available(), reason="no /dev/shm")
def test_a_message_that_cannot_be_encoded_raises_and_gives_back_what_it_took_of_the_ring() -> None:
    name = f"podium-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    ring = Ring(name, size=16 << 20)
    encoder = Encoder(ring)
    big = np.arange(1 << 20, dtype=np.float32)
    try:
        encoder.encode(m.Answer(1, big))
        head = ring.head
        with pytest.raises(TypeError, match="cannot pickle"):
            encoder.encode(m.Answer(2, [big, _Unpicklable()]))
        assert ring.head == head
        pieces = encoder.encode(m.Answer(3, "next"))  # nothing of the failed one is left over
        assert _decode(b"".join(bytes(p) for p in pieces)) == [m.Answer(3, "next")]
    finally:
        ring.close()
        Ring.sweep(name)
