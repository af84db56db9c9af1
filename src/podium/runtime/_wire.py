"""Framing of the messages between the server and its worker processes (both sides use it).

One message is one frame on a Unix stream socket:

    header   <I pickle length> <I buffer count> <Q buffer length> * count
    pickle   the message, pickled with protocol 5
    buffers  every out-of-band buffer (numpy arrays, bytes of PickleBuffers), as they are

Large arrays therefore travel as their own memory: pickling does not copy them into the pickle
stream, the sender hands their memory to the socket (``transport.writelines``), and the receiver
rebuilds them over slices of the frame it read (writable, no further copy).
"""

from __future__ import annotations

import pickle
import struct
from collections.abc import Callable
from typing import Any

__all__ = ["Decoder", "Failed", "Unvalidated", "encode", "pack_error", "unpack_error"]

_HEAD = struct.Struct("<II")
_LEN = struct.Struct("<Q")

#: Buffers smaller than this are pickled in-band: a separate buffer costs more than a copy.
_OUT_OF_BAND_MIN = 4096


def encode(message: Any) -> list[bytes | memoryview]:
    """The pieces of one frame, to be written in order (``writelines`` / ``sendmsg``)."""
    buffers: list[pickle.PickleBuffer] = []

    def keep(buffer: pickle.PickleBuffer) -> bool:
        if buffer.raw().nbytes < _OUT_OF_BAND_MIN:
            return True  # in-band
        buffers.append(buffer)
        return False

    body = pickle.dumps(message, protocol=5, buffer_callback=keep)
    if not buffers:
        return [_HEAD.pack(len(body), 0) + body]
    raws = [b.raw() for b in buffers]
    head = _HEAD.pack(len(body), len(raws)) + b"".join(_LEN.pack(r.nbytes) for r in raws)
    return [head, body, *raws]


class Decoder:
    """Reassembles frames from the chunks a stream socket delivers; calls ``on_message``."""

    def __init__(self, on_message: Callable[[Any], None]) -> None:
        self._on_message = on_message
        self._pending = bytearray()
        # the frame being filled: its buffer, how much of it is filled, and its layout
        self._frame: bytearray | None = None
        self._filled = 0
        self._layout: tuple[int, list[int]] = (0, [])

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
            size, count = _HEAD.unpack_from(pending)
            head = _HEAD.size + count * _LEN.size
            if len(pending) < head:
                return
            lengths = [
                _LEN.unpack_from(pending, _HEAD.size + i * _LEN.size)[0] for i in range(count)
            ]
            total = size + sum(lengths)
            self._layout = (size, lengths)
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
        size, lengths = self._layout
        view = memoryview(frame)
        buffers = []
        offset = size
        for length in lengths:
            buffers.append(view[offset : offset + length])
            offset += length
        message = pickle.loads(view[:size], buffers=buffers)
        self._on_message(message)


def pack_error(exc: BaseException) -> tuple[type, str, dict[str, Any]]:
    """An exception as (class, message, attributes), safe to pickle whatever its ``__init__``."""
    attrs = {k: v for k, v in getattr(exc, "__dict__", {}).items() if _picklable(v)}
    return type(exc), str(exc), attrs


def unpack_error(packed: tuple[type, str, dict[str, Any]]) -> BaseException:
    cls, message, attrs = packed
    exc: Any = BaseException.__new__(cls)
    BaseException.__init__(exc, message)
    exc.__dict__.update(attrs)
    return exc


def _picklable(value: Any) -> bool:
    try:
        pickle.dumps(value, protocol=5)
    except Exception:
        return False
    return True


class Unvalidated:
    """Inputs for a pydantic-annotated model, validated in the worker that runs the model."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


class Failed:
    """One request of a batch that failed in a worker (its preprocess or postprocess raised)."""

    __slots__ = ("error",)

    def __init__(self, error: tuple[type, str, dict[str, Any]]) -> None:
        self.error = error
