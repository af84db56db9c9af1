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

Buffers of :data:`SHARED_MIN` bytes or more go through shared memory instead, where the sender
has :class:`Segments`: it writes each into a file of its own in ``/dev/shm`` (one copy), the frame
carries the file's name (its length field has :data:`_SHARED` set), and the receiver maps the
file, unlinks it at once and rebuilds the array over the mapping (no copy; the memory goes with
the array). A segment whose receiver never read it (the worker process died first) is removed by
:meth:`Segments.sweep`, which the server runs for both directions when a worker process ends.
"""

from __future__ import annotations

import contextlib
import itertools
import mmap
import os
import pickle
import struct
from collections.abc import Callable
from pathlib import Path

from msgspec.structs import astuple

from ._messages import MESSAGES, Message

__all__ = ["SHARED_MIN", "Decoder", "Segments", "encode"]

_HEAD = struct.Struct("<BII")
_LEN = struct.Struct("<Q")
_TAGS = {cls: tag for tag, cls in enumerate(MESSAGES)}

#: Buffers smaller than this are pickled in-band: a separate buffer costs more than a copy.
_OUT_OF_BAND_MIN = 4096
#: Buffers this large or larger go through shared memory (where the sender has ``Segments``):
#: below it, the socket's copies cost less than making, mapping and removing a file.
SHARED_MIN = 1 << 20
#: Set in a buffer's length field: the frame holds the name of a shared memory file instead.
_SHARED = 1 << 63
_SHM = Path("/dev/shm")


class Segments:
    """The shared memory files one side writes for the other: ``<prefix>-<n>`` in /dev/shm."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._numbers = itertools.count()

    @staticmethod
    def available() -> bool:
        return _SHM.is_dir() and os.access(_SHM, os.W_OK)

    def put(self, raw: memoryview) -> bytes:
        """A new file holding ``raw``; its name, for the frame."""
        name = f"{self.prefix}-{next(self._numbers)}"
        fd = os.open(_SHM / name, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            view = raw.cast("B")
            written = 0
            while written < len(view):
                written += os.write(fd, view[written:])
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(_SHM / name)
            raise
        finally:
            os.close(fd)
        return name.encode()

    @staticmethod
    def sweep(prefix: str) -> int:
        """Remove every file of ``prefix`` still there (a reader that never came); how many."""
        removed = 0
        with contextlib.suppress(OSError):
            for path in _SHM.glob(f"{prefix}-*"):
                with contextlib.suppress(OSError):
                    path.unlink()
                    removed += 1
        return removed


def _take_shared(name: bytes) -> memoryview:
    """Map the file ``name`` (then gone from /dev/shm: the mapping keeps the memory)."""
    path = _SHM / name.decode()
    if path.parent != _SHM:
        raise ValueError(f"not a shared memory file name: {name[:64]!r}")
    fd = os.open(path, os.O_RDWR)
    try:
        os.unlink(path)
        size = os.fstat(fd).st_size
        flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
        return memoryview(mmap.mmap(fd, size, flags=flags))
    finally:
        os.close(fd)


def encode(message: Message, shared: Segments | None = None) -> list[bytes | memoryview]:
    """The pieces of one frame, to be written in order (``writelines`` / ``sendmsg``); with
    ``shared``, buffers of SHARED_MIN bytes or more are written to shared memory files."""
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
        name = None
        if shared is not None and raw.nbytes >= SHARED_MIN:
            with contextlib.suppress(OSError):  # /dev/shm full: the socket carries it
                name = shared.put(raw)
        if name is not None:
            raws.append(name)
            lengths.append(_SHARED | len(name))
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

    def feed(self, data: bytes) -> None:
        view = memoryview(data)
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

    def _finish(self) -> None:
        frame, self._frame = self._frame, None
        assert frame is not None
        tag, size, lengths = self._layout
        view = memoryview(frame)
        buffers = []
        offset = size
        for length in lengths:
            if length & _SHARED:
                length &= ~_SHARED
                buffers.append(_take_shared(bytes(view[offset : offset + length])))
            else:
                buffers.append(view[offset : offset + length])
            offset += length
        fields = pickle.loads(view[:size], buffers=buffers)
        self._on_message(MESSAGES[tag](*fields))
