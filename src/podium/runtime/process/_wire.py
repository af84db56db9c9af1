"""Framing of the messages between the server and its worker processes (both sides use it).

One message is one frame on a Unix stream socket:

    header   <B message tag> <I pickle length> <I buffer count> <Q buffer length> * count
    pickle   the message's fields (a tuple), pickled with protocol 5
    buffers  every out-of-band buffer (numpy arrays, bytes of PickleBuffers), as they are

The tag is the message class's index in :data:`~._messages.MESSAGES`, so the class itself is not
pickled: a frame is no larger than a tuple tagged with a string would be. Large arrays travel as
their own memory: pickling does not copy them into the pickle stream, the sender hands their
memory to the socket (``transport.writelines``), and the receiver rebuilds them over slices of
the frame it read (writable, no further copy).

The messages of every request, ``Infer`` and ``Answer`` (a stream's ``Item``, a ``Batch`` of
inputs without request objects), skip pickle
where their value survives MessagePack exactly: header tag :data:`FAST`, no buffers, the body one
msgspec MessagePack array. That is plain data (``dict`` with ``str`` keys, ``list``, ``str``,
``int``, ``float``, ``bool``, ``None``, ``bytes`` under 4 KiB, and numpy arrays under 4 KiB of a
plain numeric dtype, C-contiguous, as a MessagePack extension: dtype, shape, bytes; rebuilt
writable), each of exactly that type, :data:`PLAIN_BUDGET` items at most; an OIP
``InferenceRequest`` / ``InferenceResponse`` holding only such data (decoded as the typed struct
again); or ``Unvalidated`` plain inputs. Anything else (tuples, sets, subclasses, other classes,
larger arrays, a request snapshot) takes pickle: nothing changes type on the way. Pickle costs
more than twice as much per small message each way, the check included (most of it the msgspec
structs' and arrays' reductions; bench/workers.py's ``hop`` rows).

Buffers of :data:`SHARED_MIN` bytes or more go through shared memory instead, where the sender
has a :class:`Ring`: one file in ``/dev/shm`` per direction and worker, mapped by both sides and
made once, so its pages stay in memory. The sender copies the buffer into the ring's next free
region, the frame carries where (its length field has :data:`_SHARED` set), and the receiver
copies it out into the frame's own memory as it decodes the frame (two copies, no system call,
where the socket made three and woke the reader once per chunk). The receiver's
:meth:`Decoder.take_released` then says how far the sender may reuse the ring (a ``Release``
message). The receiver unlinks the file when it first maps it; :meth:`Ring.sweep`, which the
server runs when a worker process ends, removes one that no reader mapped.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import pickle
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
from msgspec.structs import astuple

from ...types import (
    InferenceRequest,
    InferenceResponse,
    RequestInput,
    RequestOutput,
    ResponseOutput,
)
from ._messages import MESSAGES, Answer, Batch, Infer, Item, Message, Unvalidated

__all__ = ["FAST", "PLAIN_BUDGET", "SHARED_MIN", "Decoder", "Ring", "encode"]

_HEAD = struct.Struct("<BII")
_LEN = struct.Struct("<Q")
_TAGS = {cls: tag for tag, cls in enumerate(MESSAGES)}

#: Buffers smaller than this are pickled in-band: a separate buffer costs more than a copy.
_OUT_OF_BAND_MIN = 4096
#: Buffers this large or larger go through shared memory (where the sender has a ``Ring``).
SHARED_MIN = 1 << 20
#: The most a ring takes: four times the first buffer it carries, at least 8 MiB, at most this
#: (its memory is reserved when it is made). A buffer larger than half of it takes the socket.
RING_SIZE = 64 << 20
_RING_MIN = 8 << 20
#: Set in a buffer's length field: the frame holds where in the sender's ring the buffer is.
_SHARED = 1 << 63
_PLACE = struct.Struct("<QQQ")  # offset, length, the ring's position after it; then its name
_SHM = Path("/dev/shm")

#: The header tag of a frame whose body is MessagePack (one of the ``_Fast*`` arrays below).
FAST = 255
#: The most items (list and dict entries, scalars) a value may hold to be sent as MessagePack:
#: the check that it is plain walks them; pickle carries a larger one as cheaply.
PLAIN_BUDGET = 4096


# -- the MessagePack bodies: the first element says which -----------------------------------


class _FastInfer(msgspec.Struct, array_like=True, tag=0):
    cid: int
    inputs: Any
    request_id: str | None

    def message(self) -> Message:
        return Infer(self.cid, self.inputs, None, self.request_id)


class _FastInferOip(msgspec.Struct, array_like=True, tag=1):
    cid: int
    inputs: InferenceRequest
    request_id: str | None

    def message(self) -> Message:
        return Infer(self.cid, self.inputs, None, self.request_id)


class _FastInferUnvalidated(msgspec.Struct, array_like=True, tag=2):
    cid: int
    inputs: Any
    request_id: str | None

    def message(self) -> Message:
        return Infer(self.cid, Unvalidated(self.inputs), None, self.request_id)


class _FastAnswer(msgspec.Struct, array_like=True, tag=3):
    cid: int
    value: Any

    def message(self) -> Message:
        return Answer(self.cid, self.value)


class _FastAnswerOip(msgspec.Struct, array_like=True, tag=4):
    cid: int
    value: InferenceResponse

    def message(self) -> Message:
        return Answer(self.cid, self.value)


class _FastBatch(msgspec.Struct, array_like=True, tag=7):
    cid: int
    inputs: list[Any]

    def message(self) -> Message:
        return Batch(self.cid, self.inputs, [None] * len(self.inputs))


class _FastItem(msgspec.Struct, array_like=True, tag=5):
    cid: int
    value: Any

    def message(self) -> Message:
        return Item(self.cid, self.value)


class _FastItemOip(msgspec.Struct, array_like=True, tag=6):
    cid: int
    value: InferenceResponse

    def message(self) -> Message:
        return Item(self.cid, self.value)


_EXT_ARRAY = 1  # a numpy array: <dtype char> <ndim> <Q dimension> * ndim, then its bytes
_ARRAY_HEAD = struct.Struct("<cB")
#: The dtypes an array may have to travel as MessagePack (plain numbers, native byte order).
_ARRAY_CHARS = frozenset("?bBhHiIlLqQefdFD")


def _enc_hook(value: Any) -> Any:
    if type(value) is np.ndarray:  # (only arrays _plain let through reach here)
        head = _ARRAY_HEAD.pack(value.dtype.char.encode(), value.ndim)
        shape = struct.pack(f"<{value.ndim}Q", *value.shape)
        return msgspec.msgpack.Ext(_EXT_ARRAY, head + shape + value.tobytes())
    raise NotImplementedError(f"{type(value).__name__} is not plain")


def _ext_hook(code: int, data: memoryview) -> Any:
    if code != _EXT_ARRAY:
        raise ValueError(f"unknown MessagePack extension {code}")
    char, ndim = _ARRAY_HEAD.unpack_from(data)
    start = _ARRAY_HEAD.size + 8 * ndim
    shape = struct.unpack_from(f"<{ndim}Q", data, _ARRAY_HEAD.size)
    # its own writable memory, as pickle gives
    return np.frombuffer(bytearray(data[start:]), dtype=char.decode()).reshape(shape)


_FAST_ENCODE = msgspec.msgpack.Encoder(enc_hook=_enc_hook).encode
_FAST_DECODE = msgspec.msgpack.Decoder(
    _FastInfer
    | _FastInferOip
    | _FastInferUnvalidated
    | _FastAnswer
    | _FastAnswerOip
    | _FastItem
    | _FastItemOip
    | _FastBatch,
    ext_hook=_ext_hook,
).decode
_SCALARS = frozenset({str, int, float, bool, type(None)})
_INTS = frozenset({int})


def _plain(value: Any, budget: int) -> int:
    """The budget left once ``value`` is found plain (see the module's docstring); -1 if it is
    not, or holds more than ``budget`` items."""
    kind = type(value)
    if kind in _SCALARS:
        return budget - 1
    if kind is list:
        budget -= len(value) + 1
        if budget < 0:
            return -1
        if set(map(type, value)) <= _SCALARS:  # the usual tensor data: one pass in C
            return budget
        for item in value:
            if type(item) not in _SCALARS:
                budget = _plain(item, budget)
                if budget < 0:
                    return -1
        return budget
    if kind is dict:
        budget -= len(value) + 1
        if budget < 0:
            return -1
        for key, item in value.items():
            if type(key) is not str:
                return -1
            if type(item) not in _SCALARS:
                budget = _plain(item, budget)
                if budget < 0:
                    return -1
        return budget
    if kind is bytes and len(value) < _OUT_OF_BAND_MIN:
        return budget - 1
    if kind is np.ndarray:  # small: a larger one travels out of band (no copy) with pickle
        dtype = value.dtype
        if (
            value.nbytes < _OUT_OF_BAND_MIN
            and dtype.char in _ARRAY_CHARS
            and dtype.isnative
            and value.flags.c_contiguous
        ):
            return budget - 1
    return -1


def _plain_tensors(tensors: Any, cls: Any, budget: int) -> int:
    """``_plain`` for a list of OIP tensors of exactly ``cls`` (``RequestInput`` /
    ``ResponseOutput``), each field of the type the struct declares."""
    if type(tensors) is not list:
        return -1
    for t in tensors:
        if (
            type(t) is not cls
            or type(t.name) is not str
            or type(t.datatype) is not str
            or type(t.shape) is not list
            or not set(map(type, t.shape)) <= _INTS
            or (t.parameters is not None and type(t.parameters) is not dict)
        ):
            return -1
        budget = _plain(t.data, _plain(t.parameters, budget))
        if budget < 0:
            return -1
    return budget


def _plain_request(r: InferenceRequest, budget: int) -> bool:
    if (r.id is not None and type(r.id) is not str) or (
        r.parameters is not None and type(r.parameters) is not dict
    ):
        return False
    outputs = r.outputs
    if outputs is not None:
        if type(outputs) is not list:
            return False
        for o in outputs:
            if type(o) is not RequestOutput or type(o.name) is not str:
                return False
            if o.parameters is not None and type(o.parameters) is not dict:
                return False
            budget = _plain(o.parameters, budget)
    budget = _plain(r.parameters, budget)
    return budget >= 0 and _plain_tensors(r.inputs, RequestInput, budget) >= 0


def _plain_response(r: InferenceResponse, budget: int) -> bool:
    if (
        type(r.model_name) is not str
        or (r.model_version is not None and type(r.model_version) is not str)
        or (r.id is not None and type(r.id) is not str)
        or (r.parameters is not None and type(r.parameters) is not dict)
    ):
        return False
    budget = _plain(r.parameters, budget)
    return budget >= 0 and _plain_tensors(r.outputs, ResponseOutput, budget) >= 0


def _fast(message: Message) -> bytes | None:
    """The MessagePack body of an ``Infer``, ``Answer``, ``Item`` or ``Batch`` whose value
    survives it exactly."""
    wire: Any
    kind = type(message)
    if kind is Answer or kind is Item:
        value = message.value  # type: ignore[union-attr]
        if type(value) is InferenceResponse:
            if not _plain_response(value, PLAIN_BUDGET):
                return None
            oip = _FastAnswerOip if kind is Answer else _FastItemOip
            wire = oip(message.cid, value)  # type: ignore[union-attr]
        elif _plain(value, PLAIN_BUDGET) >= 0:
            plain = _FastAnswer if kind is Answer else _FastItem
            wire = plain(message.cid, value)  # type: ignore[union-attr]
        else:
            return None
    elif type(message) is Infer:
        if message.request is not None:
            return None  # a request snapshot: the front end's own types
        inputs = message.inputs
        rid = message.request_id
        if type(inputs) is InferenceRequest:
            if not _plain_request(inputs, PLAIN_BUDGET):
                return None
            wire = _FastInferOip(message.cid, inputs, rid)
        elif type(inputs) is Unvalidated:
            if _plain(inputs.value, PLAIN_BUDGET) < 0:
                return None
            wire = _FastInferUnvalidated(message.cid, inputs.value, rid)
        elif _plain(inputs, PLAIN_BUDGET) >= 0:
            wire = _FastInfer(message.cid, inputs, rid)
        else:
            return None
    elif type(message) is Batch:
        if any(r is not None for r in message.requests):
            return None
        inputs = message.inputs
        if type(inputs) is not list or _plain(inputs, PLAIN_BUDGET) < 0:
            return None
        wire = _FastBatch(message.cid, inputs)
    else:
        return None
    try:
        return _FAST_ENCODE(wire)
    except Exception:  # an int beyond 64 bits, a str that is not UTF-8: pickle carries it
        return None


class Ring:
    """The shared memory one side writes its large buffers into (``/dev/shm/<name>``, made on
    first use). Regions are taken in order and given back in order (:meth:`release`)."""

    def __init__(self, name: str, size: int = 0) -> None:
        self.name = name
        self.size = size  # 0: sized by its first buffer
        self._map: mmap.mmap | None = None
        self._head = 0  # bytes ever taken (the next region starts at head % size)
        self._tail = 0  # bytes the reader has released

    @staticmethod
    def available() -> bool:
        return _SHM.is_dir() and os.access(_SHM, os.W_OK)

    def put(self, raw: memoryview) -> bytes | None:
        """Copy ``raw`` into the ring; where it is, for the frame (None: no room, or no ring)."""
        n = raw.nbytes
        if self._map is None:
            if self.size < 0:
                return None  # no shared memory here
            if not self.size:
                self.size = min(RING_SIZE, max(_RING_MIN, 4 * n))
        if n > self.size // 2:
            return None
        at = self._head % self.size
        skip = self.size - at if at + n > self.size else 0  # a region never wraps
        if self._head + skip + n - self._tail > self.size:
            return None  # the reader has not released enough yet
        if self._map is None:
            try:
                self._map = _open_map(self.name, create=self.size)
            except OSError:
                self.size = -1  # no shared memory here (or not enough): the socket carries all
                return None
        if skip:
            at = 0
        self._map[at : at + n] = raw.cast("B")
        self._head += skip + n
        return _PLACE.pack(at, n, self._head) + self.name.encode()

    def release(self, upto: int) -> None:
        """The reader has copied out everything before position ``upto``."""
        if upto > self._tail:
            self._tail = upto

    def close(self) -> None:
        if self._map is not None:
            with contextlib.suppress(BufferError):
                self._map.close()
            self._map = None

    @staticmethod
    def sweep(prefix: str) -> int:
        """Remove every file named ``<prefix>-*`` still there (no reader mapped it); how many."""
        removed = 0
        with contextlib.suppress(OSError):
            for path in _SHM.glob(f"{prefix}-*"):
                with contextlib.suppress(OSError):
                    path.unlink()
                    removed += 1
        return removed


def _open_map(name: str, create: int = 0) -> mmap.mmap:
    """Map ``/dev/shm/<name>``: made with ``create`` bytes, else opened and then unlinked (both
    sides have it mapped: nobody else needs the name)."""
    path = _SHM / name
    if path.parent != _SHM:
        raise ValueError(f"not a shared memory file name: {name[:64]!r}")
    if create:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    else:
        fd = os.open(path, os.O_RDWR)
    try:
        if create:
            try:
                # reserved now: a full /dev/shm is an error here, not a SIGBUS on a later write
                os.posix_fallocate(fd, 0, create)
            except OSError:
                os.unlink(path)
                raise
        else:
            os.unlink(path)
        return mmap.mmap(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def encode(message: Message, ring: Ring | None = None) -> list[bytes | memoryview]:
    """The pieces of one frame, to be written in order (``writelines`` / ``sendmsg``); with a
    ``ring``, buffers of SHARED_MIN bytes or more are copied into it where it has room."""
    kind = type(message)
    if kind is Answer or kind is Infer or kind is Item or kind is Batch:
        fast = _fast(message)
        if fast is not None:
            return [_HEAD.pack(FAST, len(fast), 0) + fast]
    buffers: list[pickle.PickleBuffer] = []

    def keep(buffer: pickle.PickleBuffer) -> bool:
        if buffer.raw().nbytes < _OUT_OF_BAND_MIN:
            return True  # in-band
        buffers.append(buffer)
        return False

    body = pickle.dumps(astuple(message), protocol=5, buffer_callback=keep)
    tag = _TAGS[type(message)]
    if not buffers:
        return [_HEAD.pack(tag, len(body), 0) + body]
    raws: list[bytes | memoryview] = []
    lengths = []
    for b in buffers:
        raw = b.raw()
        place = ring.put(raw) if ring is not None and raw.nbytes >= SHARED_MIN else None
        if place is not None:
            raws.append(place)
            lengths.append(_SHARED | len(place))
        else:
            raws.append(raw)
            lengths.append(raw.nbytes)
    head = _HEAD.pack(tag, len(body), len(raws)) + b"".join(_LEN.pack(n) for n in lengths)
    return [head, body, *raws]


class Decoder:
    """Reassembles frames from the chunks a stream socket delivers; calls ``on_message``."""

    def __init__(self, on_message: Callable[[Message], None]) -> None:
        self._on_message = on_message
        self._pending = bytearray()
        # the frame being filled: its buffer, how much of it is filled, and its layout
        self._frame: bytearray | None = None
        self._filled = 0
        self._layout: tuple[int, int, list[int]] = (0, 0, [])
        self._rings: dict[bytes, mmap.mmap] = {}  # the sender's rings, mapped
        self._released = 0  # how far the sender's ring was read

    def feed(self, data: bytes) -> None:
        view = memoryview(data)
        if self._frame is None and not self._pending:
            view = self._whole_frames(data, view)
        while view:
            if self._frame is not None:
                take = min(len(view), len(self._frame) - self._filled)
                self._frame[self._filled : self._filled + take] = view[:take]
                self._filled += take
                view = view[take:]
                if self._filled == len(self._frame):
                    self._finish()
                continue
            self._pending += view
            view = memoryview(b"")
            self._start_frames()

    def _whole_frames(self, data: bytes, view: memoryview) -> memoryview:
        """The fast path: frames that lie whole in ``data`` are decoded where they lie (a frame
        without buffers is not copied at all); what is left, to be buffered."""
        end = len(data)
        at = 0
        on_message = self._on_message
        while end - at >= _HEAD.size:
            tag, size, count = _HEAD.unpack_from(data, at)
            if count:
                return view[at:]  # buffers: the frame gets memory of its own (slow path)
            start = at + _HEAD.size
            if end - start < size:
                break
            at = start + size
            if tag == FAST:
                on_message(_FAST_DECODE(view[start:at]).message())
            else:
                on_message(MESSAGES[tag](*pickle.loads(view[start:at])))
        return view[at:]

    def _start_frames(self) -> None:
        while True:
            pending = self._pending
            if len(pending) < _HEAD.size:
                return
            tag, size, count = _HEAD.unpack_from(pending)
            head = _HEAD.size + count * _LEN.size
            if len(pending) < head:
                return
            lengths = [
                _LEN.unpack_from(pending, _HEAD.size + i * _LEN.size)[0] for i in range(count)
            ]
            total = size + sum(n & ~_SHARED for n in lengths)
            self._layout = (tag, size, lengths)
            if len(pending) - head >= total:
                frame = bytearray(pending[head : head + total])
                del pending[: head + total]
                self._frame, self._filled = frame, total
                self._finish()
                continue
            # A big frame: allocate it once and fill it as the rest arrives.
            frame = bytearray(total)
            rest = len(pending) - head
            frame[:rest] = pending[head:]
            pending.clear()
            self._frame, self._filled = frame, rest
            return

    def take_released(self) -> int:
        """How far the sender may reuse its ring (0: nothing new read from it since last)."""
        released, self._released = self._released, 0
        return released

    def close(self) -> None:
        for ring in self._rings.values():
            with contextlib.suppress(BufferError):
                ring.close()
        self._rings.clear()

    def _shared(self, place: bytes) -> bytearray:
        at, n, end = _PLACE.unpack_from(place)
        name = place[_PLACE.size :]
        ring = self._rings.get(name)
        if ring is None:
            ring = self._rings[name] = _open_map(name.decode())
        data = bytearray(memoryview(ring)[at : at + n])  # ours: the region is reused
        self._released = max(self._released, end)
        return data

    def _finish(self) -> None:
        frame, self._frame = self._frame, None
        assert frame is not None
        tag, size, lengths = self._layout
        view = memoryview(frame)
        if tag == FAST:
            self._on_message(_FAST_DECODE(view[:size]).message())
            return
        buffers: list[Any] = []
        offset = size
        for length in lengths:
            if length & _SHARED:
                length &= ~_SHARED
                buffers.append(self._shared(bytes(view[offset : offset + length])))
            else:
                buffers.append(view[offset : offset + length])
            offset += length
        fields = pickle.loads(view[:size], buffers=buffers)
        self._on_message(MESSAGES[tag](*fields))
