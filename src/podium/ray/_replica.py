"""One model version on Podium's own runtime, in a Ray Serve replica.

Each replica holds a :class:`~podium.dataplane.DataPlane` with just its version, built from the
path of its model as ``podium serve`` builds it (the version's code alone is imported), with one
worker: thread or process as the model's ``workers`` says. Serve's replicas are the model's
``min_workers`` / ``max_workers``; inside each, the version runs through its own scheduler as on a
single server (dynamic and continuous batching, sequences, ``predict_concurrency``, the response
timeout). The ingress sends it whole calls (:meth:`ModelReplica.infer`,
:meth:`ModelReplica.stream`), which run through the replica's data plane: the payload's conversion
into what the model takes and every check against what it declares happen here, next to the
model's code, as they do on a single server.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from pathlib import Path
from typing import Any

from msgspec.structs import replace

from ..dataplane import ModelVersion
from ..errors import PodiumError
from ..server import model_plane, rebuild
from ..types import Answer, Call, Capabilities, ModelState, SequenceOutcome
from ._messages import Failure, Item, Outcome
from ._options import ReplicaSettings

__all__ = ["ModelReplica"]

logger = logging.getLogger("podium.ray")

#: What each replica's version runs with in place of its config's values: one worker (Serve's
#: replicas are the model's workers).
ONE_WORKER = {"min_workers": 1, "max_workers": 1}


class ModelReplica:
    """A Ray Serve deployment's replica serving one model version: ``path`` (where that model
    is: what ``podium.model.model_paths`` gives), ``name`` and ``version`` (which of its
    versions), ``settings`` (threads, secrets, log level)."""

    async def __init__(  # type: ignore[misc]  # Serve awaits an async constructor
        self, path: str, name: str, version: str | None, settings: ReplicaSettings
    ) -> None:
        logging.getLogger("podium").setLevel(settings.log_level.upper())
        self._plane, self._executor = model_plane(settings.threads, settings.secrets_dir)
        add = functools.partial(
            self._plane.repository.add_paths,
            [Path(path)],
            only=(name, version),
            overrides=ONE_WORKER,
        )
        await asyncio.get_running_loop().run_in_executor(self._executor, add)
        await self._plane.repository.load_all()
        # A version that failed to load fails the replica's start (Serve reports the reason
        # and tries again), rather than serving 503s.
        self._mv: ModelVersion = self._plane.resolve(name, version)
        logger.info("%s is ready in this replica", self._mv.label)

    def describe(self) -> Capabilities:
        """What the model asks for, as the ingress's front end needs it (without the pydantic
        schema of a model that takes one: the payload is converted here, never there)."""
        return dataclasses.replace(self._mv.instance.capabilities, input_schema=None)

    def check_health(self) -> None:
        """Serve's health check: a version whose workers cannot be restarted fails it (Serve
        then replaces the replica); one in passing trouble does not."""
        if self._mv.state is ModelState.FAILED:
            raise RuntimeError(f"{self._mv.label} failed: {self._mv.reason}")

    async def infer(self, call: Call) -> Answer | Failure:
        """Run ``call`` through this replica's data plane; a Podium error comes back as a
        :class:`Failure`."""
        try:
            return await self._plane.infer(self._arrived(call), self._ready())
        except PodiumError as exc:
            return Failure(exc)

    async def stream(self, call: Call) -> AsyncGenerator[Item | Outcome | Failure, None]:
        """The items of ``call`` as :class:`Item`s (the sequence's outcome with an item when it
        changed, and as an :class:`Outcome` after the last one when it changed then); a Podium
        error as a :class:`Failure`, last. When the ingress cancels the call (its client left),
        Serve cancels this generator, which closes the model's."""
        try:
            items = self._plane.stream(self._arrived(call), self._ready())
        except PodiumError as exc:
            yield Failure(exc)
            return
        seen: SequenceOutcome | None = None
        try:
            async for value in items:
                outcome = items.sequence
                if outcome == seen:
                    yield Item(value)
                else:
                    seen = outcome
                    yield Item(value, outcome)
            outcome = items.sequence
            if outcome is not None and outcome != seen:
                yield Outcome(outcome)
        except PodiumError as exc:
            yield Failure(exc)
        finally:
            await items.aclose()

    async def __del__(self) -> None:
        """Serve stops the replica: its version's workers stop (worker processes exit)."""
        await self._plane.close()
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _ready(self) -> ModelVersion:
        self._mv.check_ready()  # ModelNotReady while it is not
        return self._mv

    def _arrived(self, call: Call) -> Call:
        """``call`` with its raw request rebuilt from the snapshot the ingress sent: a starlette
        ``Request`` whose ``is_disconnected()`` turns true once the call is cancelled here (the
        client left the ingress)."""
        snapshot = call.request
        if snapshot is None:
            return call
        return replace(call, request=rebuild(snapshot, _gone(asyncio.current_task())))


def _gone(task: asyncio.Task[Any] | None) -> Callable[[], Awaitable[None]]:
    """What the rebuilt request's ``receive`` awaits: nothing once ``task`` (the one serving
    the call) is being cancelled, else forever (starlette's ``is_disconnected`` asks without
    waiting)."""

    async def gone() -> None:
        if task is not None and task.cancelling():
            return
        await asyncio.Event().wait()

    return gone
