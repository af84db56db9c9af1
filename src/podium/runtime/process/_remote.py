"""What the server holds of its worker processes besides the workers themselves: the version's
:class:`RemoteInstance` (the model's capabilities, as a worker reports them), a request in
flight (:class:`PendingCall`), the socket's protocol (:class:`Connection`), and how a process
ended (:func:`describe_exit`). ``_parent`` builds on it.
"""

from __future__ import annotations

import asyncio
import pickle
import signal
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import replace
from typing import Any

from ...turn import TurnBuffer
from ...types import END, Capabilities, Generation
from ..workers import Failure
from ._messages import Message, Ready, Release, Unvalidated
from ._wire import Decoder, Encoder, Ring

__all__ = ["Connection", "PendingCall", "RemoteInstance", "describe_exit"]


class RemoteInstance:
    """What the server knows of a model that runs in worker processes (the version's
    ``instance``): its capabilities, as the first worker that starts reports them.
    ``preprocess`` and ``postprocess`` run in the worker, so they are off here (a continuous
    model's preprocess too: when its request joins); validation of pydantic inputs is deferred
    to the worker too."""

    #: the worker process runs (and times) the model's sync code
    calls = None

    def __init__(self) -> None:
        self.capabilities = Capabilities()
        self.pipelined = False  # the real instance has preprocess or postprocess
        #: a generating model's face to OpenAI's API (its tokenizer: the front end's), or None
        self.openai: Any = None

    def describe(self, ready: Ready) -> None:
        """Learn the model from a worker's ``Ready``; ``ValueError`` when its OpenAI face (a
        tokenizer) cannot be rebuilt here (a class the server cannot import)."""
        if ready.face is not None and self.openai is None:
            try:
                self.openai = pickle.loads(ready.face)
            except Exception as exc:
                raise ValueError(
                    "its tokenizer cannot be rebuilt in the server (the front end tokenizes): "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
        caps = ready.capabilities
        self.pipelined = caps.has_preprocess or caps.has_postprocess
        self.capabilities = replace(
            caps,
            has_preprocess=False,
            has_postprocess=False,
            predict_in_thread=False,  # the worker process times its own predicts
        )

    async def load(self) -> None:
        return None

    def validate(self, value: Any) -> Any:
        return Unvalidated(value)

    async def preprocess(self, inputs: Any, request: Any) -> Any:
        return inputs

    async def postprocess(self, outputs: Any, request: Any) -> Any:
        return outputs

    async def predict(self, inputs: Any, request: Any) -> Any:
        raise RuntimeError("a process worker's model runs in its worker processes")

    async def step(self, batch: list[Generation]) -> None:
        raise RuntimeError("a process worker steps its batch in its worker process (its step)")

    def predict_stream(self, inputs: Any, request: Any) -> AsyncGenerator[Any, None]:
        raise RuntimeError("a process worker's model runs in its worker processes")

    def predict_input_stream(
        self, inputs: AsyncIterator[Any], request: Any
    ) -> AsyncGenerator[Any, None]:
        raise RuntimeError("a process worker's model runs in its worker processes")


def describe_exit(code: int | None) -> str:
    """How a worker process ended, for the logs and the errors (``code``: its return code)."""
    if code is None:
        return "is gone"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by signal {-code} ({name})"
    return f"exited with code {code}"


class PendingCall:
    """A request sent to the worker process: a call's future, or (``future`` None) a stream's
    items: its values, then ``END`` or a ``Failure``."""

    __slots__ = ("future", "items", "deadline", "started")

    def __init__(self, future: asyncio.Future[Any] | None) -> None:
        self.future = future
        self.items: asyncio.Queue[Any] | None = asyncio.Queue() if future is None else None
        #: loop time past which it fails with ResponseTimeout (0: none; a stream's next item)
        self.deadline = 0.0
        #: counted as running in the worker (one of its first ``predict_concurrency`` calls);
        #: False while it is queued ahead there
        self.started = False

    def push(self, item: Any) -> None:
        """One more of a stream's items."""
        assert self.items is not None, "a call's answer is its future's"
        self.items.put_nowait(item)

    def answer(self, value: Any) -> None:
        future = self.future
        if future is None:
            self.push(END)
        elif not future.done():
            future.set_result(value)

    def fail(self, exc: BaseException) -> None:
        future = self.future
        if future is None:
            self.push(Failure(exc))
        elif not future.done():
            future.set_exception(exc)

    def stop(self) -> None:
        """It ended without an answer: a stream's end, or a cancelled request's."""
        future = self.future
        if future is None:
            self.push(END)
        elif not future.done():
            future.cancel()


class Connection(asyncio.Protocol):
    """A worker process's socket, read on the event loop; both ends build on it (the server's
    ``ProcessWorker`` holds one, the worker's ``_child.Child`` is one). Frames queued in one turn
    of the loop leave in one write (``out``); each side's shared memory ring (``ring``: large
    buffers it sends) is released here as the other side reports what it copied out."""

    def __init__(
        self,
        on_message: Callable[[Message], None],
        on_lost: Callable[[], None],
        ring: Ring | None = None,
    ) -> None:
        self.decoder = Decoder(self._received)
        self.encoder = Encoder(ring)
        self.out: TurnBuffer[list[bytes | memoryview]] = TurnBuffer(self._write)
        self.transport: Any = None
        self._dispatch = on_message
        self._on_lost = on_lost

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def send(self, message: Message) -> bool:
        """Queue a frame (False: the socket is closed, nothing is sent); every frame of this
        turn of the loop leaves in one write."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return False
        self.out.add(self.encoder.encode(message))
        return True

    def _write(self, messages: list[list[bytes | memoryview]]) -> None:
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.writelines([frame for frames in messages for frame in frames])

    def data_received(self, data: bytes) -> None:
        decoder = self.decoder
        decoder.feed(data)
        released = decoder.take_released()
        if released:
            self.send(Release(released))

    def _received(self, message: Message) -> None:
        if type(message) is Release:  # the other side copied our ring out up to there
            ring = self.encoder.ring
            if ring is not None:
                ring.release(message.upto)
        else:
            self._dispatch(message)

    def connection_lost(self, exc: Exception | None) -> None:
        self._on_lost()
