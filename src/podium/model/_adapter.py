"""What every contract's instance (native, TorchServe, MLServer, truss) does alike: its own
threads for sync calls, and the parts of :class:`~podium.types.ModelInstance` its user code may
have nothing to say about. Each adapter subclasses :class:`Adapter` and overrides what its
contract defines."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from ..types import Generation
from ._threads import CallThreads

__all__ = ["Adapter"]


class Adapter:
    """The base of every contract's adapter. ``name`` is the model's name; :meth:`_own_threads`
    gives the instance its threads (``calls`` where its sync ``predict`` or ``step`` runs)."""

    name: str
    _threads: CallThreads
    calls: CallThreads | None

    def _own_threads(self, in_thread: bool) -> None:
        """Threads of the instance's own for its sync calls (model/_threads.py), as many as its
        slots let run at once; ``calls`` is them where ``predict`` (or ``step``) is sync (a
        thread worker times its calls there), else None."""
        self._threads = CallThreads(name=f"podium-{self.name}")
        self.calls = self._threads if in_thread else None

    def validate(self, value: Any) -> Any:
        return value

    async def preprocess(self, inputs: Any, request: Any) -> Any:
        return inputs

    async def postprocess(self, outputs: Any, request: Any) -> Any:
        return outputs

    def predict_input_stream(
        self, inputs: AsyncIterator[Any], request: Any
    ) -> AsyncGenerator[Any, None]:
        raise RuntimeError(
            f"model '{self.name}' does not read a stream of requests (consumes_stream is False)"
        )

    async def step(self, batch: list[Generation]) -> None:
        raise RuntimeError(f"model '{self.name}' is not served by continuous batching")

    async def close(self) -> None:
        """Stop the instance's threads (each once the calls it holds have returned; this does
        not wait for them)."""
        await self._threads.close()
