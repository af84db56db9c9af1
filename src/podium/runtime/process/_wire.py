"""Framing of the messages between the server and its worker processes (both sides use it).

One message is one frame on a Unix stream socket:

    header   <I body length> <Q length of the buffers after the body>
    body     the message: one msgspec MessagePack array, its tag first
    buffers  large buffers out of band, each at a 16-byte boundary of the frame

**One encoding, chosen by type, never by walking a value.** What a request carries (an
``Infer``'s inputs, each input of a ``Batch``, an ``Answer``'s or ``Item``'s value,
each value of ``Results``, each input of a ``Step``, each item of ``Stepped``) is MessagePack
where its own type is ``dict``, ``list``, ``str``, ``int``, ``float``, ``bool``, ``None``,
``bytes`` or a numpy array; an OIP ``InferenceRequest`` /
``InferenceResponse`` (tensors a list of exactly its tensor struct) is an extension decoded as that
struct (one whose fields are not of their declared types is rebuilt as it left, unchecked), and
``Unvalidated`` plain data an extension of its value; anything else is
**opaque**: its pickle (protocol 5) in an extension, so it arrives exactly as it left. So are
request snapshots, values msgspec cannot encode (a numpy scalar, a ``str`` subclass, a user's
class) wherever they are, and, whole, ``Init``, ``Ready``, ``StartFailed``, ``Error`` and
``Report`` (classes, functions, exceptions; rare) and a message msgspec refuses (an ``int`` past
64 bits, a ``str`` that is not UTF-8). Numpy arrays of any dtype without objects or fields are an
extension (dtype, byte order, shape, C or Fortran order; rebuilt writable). What changes on the
way is what msgspec encodes natively but decodes as another type, nested inside a plain value:
a tuple, set or frozenset arrives as a ``list``, ``bytearray`` as ``bytes``, a ``list`` or
``dict`` subclass as the plain one, an enum as its value, a dataclass, ``Struct`` or
``NamedTuple`` as a ``dict`` (``list``), a ``date``, ``time``, naive ``datetime``, ``UUID`` or
``Decimal`` as a string (docs/workers.md; every front end encodes them the same either way).

**Large buffers**: arrays and pickle buffers of :data:`OUT_OF_BAND_MIN` bytes or more are not
copied into the body; the sender hands their memory to ``transport.writelines``, the receiver
rebuilds them over slices of the frame it read (writable, no further copy). Those of
:data:`SHARED_MIN` or more go through shared memory where the sender has a :class:`Ring` (one
file in ``/dev/shm`` per direction and worker, made once and mapped by both sides, so its pages
stay resident): the sender copies the buffer in, the body says where, the receiver copies it out
as it decodes (two copies and no system call, where the socket makes three and wakes the reader
once per chunk: several times less CPU per large tensor, bench/RESULTS.md) and then says how far
the sender may reuse the ring (:meth:`Decoder.take_released`, a ``Release`` message). The
receiver unlinks the file when it first maps it; :meth:`Ring.sweep`, which the server runs when a
worker process ends, removes one that no reader mapped.
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

from ...types import (
    InferenceRequest,
    InferenceResponse,
    RequestInput,
    RequestOutput,
    ResponseOutput,
)
from ._messages import (
    Answer,
    Batch,
    Cancel,
    Credit,
    End,
    Infer,
    Item,
    Message,
    Release,
    Results,
    Step,
    Stepped,
    Unvalidated,
)

__all__ = ["OUT_OF_BAND_MIN", "SHARED_MIN", "Decoder", "Encoder", "Ring"]

_HEAD = struct.Struct("<IQ")
_EXT_HEAD = struct.Struct("<H")  # an extension's header length; the header is MessagePack
_ALIGN = 16

#: Buffers smaller than this travel inside the body: a separate buffer costs more than a copy.
OUT_OF_BAND_MIN = 4096
#: Buffers this large or larger go through shared memory (where the sender has a ``Ring``).
SHARED_MIN = 1 << 20
#: The most a ring takes: four times the first buffer it carries, at least 8 MiB, at most this
#: (its memory is reserved when it is made). A buffer larger than half of it takes the socket.
RING_SIZE = 64 << 20
_RING_MIN = 8 << 20
_SHM = Path("/dev/shm")

_EXT_PICKLE = 1  # <H n> [where of each out-of-band buffer] (n bytes, MessagePack), the pickle
#: <B dtype length> <B ndim> <B where: 0 here, 1 after the body, 2 in the ring> <B Fortran order>
#: dtype (``dtype.str``), <Q dimension> * ndim, then the bytes, or where they are: <Q offset>
#: <Q length> after the body, <Q offset> <Q length> <Q ring position after it> <ring name>
_EXT_ARRAY = 2
_EXT_REQUEST = 3  # an InferenceRequest, as msgspec encodes it
_EXT_RESPONSE = 4  # an InferenceResponse, as msgspec encodes it
_EXT_UNVALIDATED = 5  # Unvalidated: its value
_ARRAY_HEAD = struct.Struct("<BBBB")
_AFTER = struct.Struct("<QQ")
_IN_RING = struct.Struct("<QQQ")
_SHAPES = [struct.Struct(f"<{n}Q") for n in range(65)]  # numpy's most dimensions: 64
_DTYPES: dict[bytes, np.dtype[Any]] = {}
_PLAIN = frozenset({dict, list, str, int, float, bool, type(None), bytes, np.ndarray})


class _Opaque:
    """A value that travels as its pickle, whatever msgspec would make of it."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


class _Marked:
    """A value that travels as the MessagePack extension ``code`` holding ``fields``."""

    __slots__ = ("code", "fields")

    def __init__(self, code: int, fields: Any) -> None:
        self.code = code
        self.fields = fields


class _Pickled(msgspec.Struct, array_like=True, tag=0):
    """A message whose fields are classes, functions or exceptions: its pickle."""

    message: Any


#: What a frame's body may be (the messages of ``_messages`` are tagged arrays).
_WIRE = (
    (_Pickled | Infer | Batch | Cancel | Credit | Release | Answer | Results | Item | End)
    | Step
    | Stepped
)
#: The messages that travel as they are (no value of a request in them).
_AS_THEY_ARE = frozenset({Cancel, Credit, End, Release})


def _all(tensors: Any, cls: type) -> bool:
    """``tensors`` is a list of exactly ``cls``."""
    if type(tensors) is not list:
        return False
    for t in tensors:
        if type(t) is not cls:
            return False
    return True


def _mark(value: Any) -> Any:
    """A request's value as it travels, chosen by its type (the module's docstring)."""
    kind = type(value)
    if kind in _PLAIN:
        return value
    if kind is InferenceResponse:
        if _all(value.outputs, ResponseOutput):
            return _Marked(_EXT_RESPONSE, value)
    elif kind is InferenceRequest:
        outputs = value.outputs
        if _all(value.inputs, RequestInput) and (outputs is None or _all(outputs, RequestOutput)):
            return _Marked(_EXT_REQUEST, value)
    elif kind is Unvalidated and type(value.value) in _PLAIN:
        return _Marked(_EXT_UNVALIDATED, value.value)
    return _Opaque(value)


def _snapshot(request: Any) -> Any:
    return None if request is None else _Opaque(request)


def _to_wire(message: Message) -> Any:
    m: Any = message
    kind = type(message)
    if kind is Answer or kind is Item:
        value = _mark(m.value)
        return message if value is m.value else kind(m.cid, value)
    if kind is Infer:
        inputs = _mark(m.inputs)
        if inputs is m.inputs and m.request is None:
            return message
        return Infer(m.cid, inputs, _snapshot(m.request), m.request_id, m.stream)
    if kind is Batch:
        return Batch(m.cid, [_mark(v) for v in m.inputs], [_snapshot(r) for r in m.requests])
    if kind is Results:
        return Results(m.cid, [_mark(v) for v in m.value])
    if kind is Step:
        inputs = [_mark(v) for v in m.inputs]
        return Step(m.cid, m.joined, inputs, m.left, m.batch, [_snapshot(r) for r in m.requests])
    if kind is Stepped:
        items = [[_mark(v) for v in e] if type(e) is list else _mark(e) for e in m.items]
        return Stepped(m.cid, items, m.done)
    if kind in _AS_THEY_ARE:
        return message
    return _Pickled(_Opaque(message))


def _rebuild(fields: dict[str, Any], response: bool) -> Any:
    """An OIP struct whose fields are not all of the types it declares, as it left (msgspec's
    typed decoding refused it; the struct's own constructor does not check)."""
    if response:
        fields["outputs"] = [ResponseOutput(**t) for t in fields.get("outputs", [])]
        return InferenceResponse(**fields)
    fields["inputs"] = [RequestInput(**t) for t in fields["inputs"]]
    if fields.get("outputs") is not None:
        fields["outputs"] = [RequestOutput(**t) for t in fields["outputs"]]
    return InferenceRequest(**fields)


def _pickle_ext(where: list[Any], data: bytes) -> msgspec.msgpack.Ext:
    header = msgspec.msgpack.encode(where)
    return msgspec.msgpack.Ext(_EXT_PICKLE, b"".join((_EXT_HEAD.pack(len(header)), header, data)))


def _plain_dtype(dtype: np.dtype[Any]) -> bool:
    return not dtype.hasobject and dtype.names is None and dtype.subdtype is None


# -- sending ---------------------------------------------------------------------------------


class Encoder:
    """Makes the frames one side sends; with a ``ring``, buffers of SHARED_MIN bytes or more are
    copied into it where it has room. Not for several threads at once."""

    def __init__(self, ring: Ring | None = None) -> None:
        self.ring = ring
        self._buffers: list[bytes | memoryview] = []  # the frame's, after its body
        self._size = 0
        self._encode = msgspec.msgpack.Encoder(enc_hook=self._hook).encode
        self._inner = msgspec.msgpack.Encoder(enc_hook=self._hook).encode  # an extension's

    def encode(self, message: Message) -> list[bytes | memoryview]:
        """The pieces of one frame, to be written in order (``writelines``)."""
        ring = self.ring
        head = ring.head if ring is not None else 0
        try:
            body = self._encode(_to_wire(message))
        except Exception:  # an int past 64 bits, a str that is not UTF-8: the whole as a pickle
            self._reset(head)
            try:
                body = self._encode(_Pickled(_Opaque(message)))
            except BaseException:
                self._reset(head)
                raise
        size, buffers = self._size, self._buffers
        if not buffers:
            return [_HEAD.pack(len(body), 0) + body]
        self._buffers, self._size = [], 0
        pad = bytes(-len(body) % _ALIGN)
        return [_HEAD.pack(len(body), size) + body + pad, *buffers]

    def _reset(self, head: int) -> None:
        self._buffers, self._size = [], 0
        if self.ring is not None:
            self.ring.head = head  # what this message took of the ring is free again

    def _hook(self, value: Any) -> Any:
        kind = type(value)
        if kind is _Marked:
            return msgspec.msgpack.Ext(value.code, self._inner(value.fields))
        if kind is np.ndarray and _plain_dtype(value.dtype):
            return self._array(value)
        if kind is _Opaque:
            value = value.value
        where: list[Any] = []

        def out_of_band(buffer: pickle.PickleBuffer) -> bool:
            raw = buffer.raw()
            if raw.nbytes < OUT_OF_BAND_MIN:
                return True  # in the pickle
            where.append(self._place(raw))
            return False

        data = pickle.dumps(value, protocol=5, buffer_callback=out_of_band)
        return _pickle_ext(where, data)

    def _array(self, array: np.ndarray[Any, Any]) -> msgspec.msgpack.Ext:
        flags = array.flags
        fortran = flags.f_contiguous and not flags.c_contiguous
        dtype = array.dtype.str.encode()
        ndim = array.ndim
        shape = dtype + _SHAPES[ndim].pack(*array.shape)
        if array.nbytes < OUT_OF_BAND_MIN:  # (a strided view's bytes in C order)
            head = _ARRAY_HEAD.pack(len(dtype), ndim, 0, fortran)
            return msgspec.msgpack.Ext(_EXT_ARRAY, head + shape + array.tobytes("A"))
        if not (fortran or flags.c_contiguous):
            array = np.ascontiguousarray(array)
        where = self._place(memoryview(array.ravel(order="K").view(np.uint8)))  # type: ignore[arg-type]
        if len(where) == 2:
            head, place = _ARRAY_HEAD.pack(len(dtype), ndim, 1, fortran), _AFTER.pack(*where)
        else:
            at, n, end, name = where
            head = _ARRAY_HEAD.pack(len(dtype), ndim, 2, fortran)
            place = _IN_RING.pack(at, n, end) + name.encode()
        return msgspec.msgpack.Ext(_EXT_ARRAY, head + shape + place)

    def _place(self, raw: memoryview) -> Any:
        """Where an out-of-band buffer goes: into the ring (its place there), else after the
        body (its offset there, and its length)."""
        if self.ring is not None and raw.nbytes >= SHARED_MIN:
            place = self.ring.put(raw)
            if place is not None:
                return place
        at = self._size
        self._buffers.append(raw)
        pad = -raw.nbytes % _ALIGN
        if pad:
            self._buffers.append(bytes(pad))
        self._size += raw.nbytes + pad
        return (at, raw.nbytes)


class Ring:
    """The shared memory one side writes its large buffers into (``/dev/shm/<name>``, made on
    first use). Regions are taken in order and given back in order (:meth:`release`)."""

    def __init__(self, name: str, size: int = 0) -> None:
        self.name = name
        self.size = size  # 0: sized by its first buffer
        self._map: mmap.mmap | None = None
        self.head = 0  # bytes ever taken (the next region starts at head % size)
        self._tail = 0  # bytes the reader has released

    @staticmethod
    def available() -> bool:
        return _SHM.is_dir() and os.access(_SHM, os.W_OK)

    def put(self, raw: memoryview) -> tuple[int, int, int, str] | None:
        """Copy ``raw`` into the ring; where it is, for the frame (None: no room, or no ring)."""
        n = raw.nbytes
        if self._map is None:
            if self.size < 0:
                return None  # no shared memory here
            if not self.size:
                self.size = min(RING_SIZE, max(_RING_MIN, 4 * n))
        if n > self.size // 2:
            return None
        at = self.head % self.size
        skip = self.size - at if at + n > self.size else 0  # a region never wraps
        if self.head + skip + n - self._tail > self.size:
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
        self.head += skip + n
        return (at, n, self.head, self.name)

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
    def sweep(prefix: str) -> None:
        """Remove every file named ``<prefix>-*`` still there (no reader mapped it)."""
        with contextlib.suppress(OSError):
            for path in _SHM.glob(f"{prefix}-*"):
                with contextlib.suppress(OSError):
                    path.unlink()


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


# -- receiving -------------------------------------------------------------------------------


class Decoder:
    """Reassembles frames from the chunks a stream socket delivers; calls ``on_message``."""

    def __init__(self, on_message: Callable[[Message], None]) -> None:
        self._on_message = on_message
        self._decode = msgspec.msgpack.Decoder(_WIRE, ext_hook=self._ext).decode
        self._inner = msgspec.msgpack.Decoder(ext_hook=self._ext).decode  # an extension's
        self._response = msgspec.msgpack.Decoder(InferenceResponse, ext_hook=self._ext).decode
        self._request = msgspec.msgpack.Decoder(InferenceRequest, ext_hook=self._ext).decode
        self._pending = bytearray()
        # the frame being filled: its buffer, how much of it is filled, its body's length
        self._frame: bytearray | None = None
        self._filled = 0
        self._body = 0
        self._buffers = memoryview(b"")  # the frame being decoded's, after its body
        self._rings: dict[str, mmap.mmap] = {}  # the sender's rings, mapped
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
        """The fast path: frames without buffers that lie whole in ``data`` are decoded where
        they lie; what is left, to be buffered."""
        end = len(data)
        at = 0
        while end - at >= _HEAD.size:
            size, extra = _HEAD.unpack_from(data, at)
            if extra:
                return view[at:]  # buffers: the frame gets memory of its own
            start = at + _HEAD.size
            if end - start < size:
                break
            at = start + size
            wire: Any = self._decode(view[start:at])
            self._on_message(wire.message if type(wire) is _Pickled else wire)
        return view[at:]

    def _start_frames(self) -> None:
        while True:
            pending = self._pending
            if len(pending) < _HEAD.size:
                return
            size, extra = _HEAD.unpack_from(pending)
            total = size + (-size % _ALIGN + extra if extra else 0)
            self._body = size
            head = _HEAD.size
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

    def _finish(self) -> None:
        frame, self._frame = self._frame, None
        assert frame is not None
        view = memoryview(frame)
        size = self._body
        self._buffers = view[size + -size % _ALIGN :]
        try:
            wire: Any = self._decode(view[:size])
        finally:
            self._buffers = memoryview(b"")
        self._on_message(wire.message if type(wire) is _Pickled else wire)

    def _ext(self, code: int, data: memoryview) -> Any:
        if code == _EXT_ARRAY:
            size, ndim, where, fortran = _ARRAY_HEAD.unpack_from(data)
            at = _ARRAY_HEAD.size + size
            name = data[_ARRAY_HEAD.size : at].tobytes()
            dtype = _DTYPES.get(name)
            if dtype is None:
                dtype = _DTYPES[name] = np.dtype(name.decode())
            shape = _SHAPES[ndim].unpack_from(data, at)
            at += 8 * ndim
            if where == 0:
                buffer: Any = bytearray(data[at:])  # its own, writable
            elif where == 1:
                buffer = self._buffer(_AFTER.unpack_from(data, at))
            else:
                place = _IN_RING.unpack_from(data, at)
                buffer = self._buffer((*place, str(data[at + _IN_RING.size :], "ascii")))
            array = np.frombuffer(buffer, dtype=dtype)
            return array.reshape(shape, order="F") if fortran else array.reshape(shape)
        if code == _EXT_RESPONSE or code == _EXT_REQUEST:
            response = code == _EXT_RESPONSE
            try:
                return self._response(data) if response else self._request(data)
            except msgspec.ValidationError:
                return _rebuild(self._inner(data), response)
        if code == _EXT_UNVALIDATED:
            return Unvalidated(self._inner(data))
        if code == _EXT_PICKLE:
            (n,) = _EXT_HEAD.unpack_from(data)
            head = msgspec.msgpack.decode(data[_EXT_HEAD.size : _EXT_HEAD.size + n])
            rest = data[_EXT_HEAD.size + n :]
            return pickle.loads(rest, buffers=[self._buffer(w) for w in head])
        raise ValueError(f"unknown MessagePack extension {code}")

    def _buffer(self, where: Any) -> Any:
        if len(where) == 2:  # after the body
            at, n = where
            return self._buffers[at : at + n]
        at, n, end, name = where  # in the sender's ring: ours, since the region is reused
        ring = self._rings.get(name)
        if ring is None:
            ring = self._rings[name] = _open_map(name)
        self._released = max(self._released, end)
        return bytearray(memoryview(ring)[at : at + n])

    def take_released(self) -> int:
        """How far the sender may reuse its ring (0: nothing new read from it since last)."""
        released, self._released = self._released, 0
        return released

    def close(self) -> None:
        for ring in self._rings.values():
            with contextlib.suppress(BufferError):
                ring.close()
        self._rings.clear()
