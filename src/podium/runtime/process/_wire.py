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
"""

from __future__ import annotations

import pickle
import struct
from collections.abc import Callable

from msgspec.structs import astuple

from ._messages import MESSAGES, Message

__all__ = ["Decoder", "encode"]

_HEAD = struct.Struct("<BII")
_LEN = struct.Struct("<Q")
_TAGS = {cls: tag for tag, cls in enumerate(MESSAGES)}

#: Buffers smaller than this are pickled in-band: a separate buffer costs more than a copy.
_OUT_OF_BAND_MIN = 4096


def encode(message: Message) -> list[bytes | memoryview]:
    """The pieces of one frame, to be written in order (``writelines`` / ``sendmsg``)."""
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
    raws = [b.raw() for b in buffers]
    head = _HEAD.pack(tag, len(body), len(raws)) + b"".join(_LEN.pack(r.nbytes) for r in raws)
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
            total = size + sum(lengths)
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
            buffers.append(view[offset : offset + length])
            offset += length
        fields = pickle.loads(view[:size], buffers=buffers)
        self._on_message(MESSAGES[tag](*fields))
