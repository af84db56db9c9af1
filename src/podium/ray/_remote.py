"""The ingress's data plane: every version it holds runs in a deployment of its own.

The seam between Podium's HTTP front end and the models is the data plane's: a
:class:`~podium.types.Call` in, an :class:`~podium.types.Answer` (or an
:class:`~podium.types.AnswerStream`) out. On Ray Serve that seam crosses the cluster.
:class:`RemotePlane` is a :class:`~podium.dataplane.DataPlane` whose registry holds, for each
version, what the front end needs to know of it (its config, the model's capabilities: read once
from a replica at start-up; ``ModelRepository.add_remote``), so that the unchanged
:class:`~podium.server.http.HttpApp` resolves models (404 for an unknown one, before the body is
read), reads and parses bodies, answers health and metadata, and renders answers, streams and
errors exactly as ``podium serve`` does. Only :meth:`RemotePlane.infer` and
:meth:`RemotePlane.stream` differ: they hand the call, whole, to the version's deployment through
its ``DeploymentHandle`` (:class:`Remote`), where a replica's own data plane runs it
(``_replica.py``).

What crosses: the call as the front end made it, its raw request (when the model takes one) as a
snapshot (``podium.server.RequestSnapshots``: the scope's request keys and the body), and for a
model with ``sequence_batching`` always a sequence id (one made here, with the start flag, when
the client sent none), which the request router pins to a replica (``_router.py``). What comes
back: the replica's ``Answer``, a Podium error as a ``Failure`` (raised here again, so statuses
and bodies are a single server's), or a stream's items.

A client that leaves cancels the task serving it (the front end's disconnect watcher, as on a
single server); the cancellation of the handle's response reaches the replica through Serve,
where it cancels the call in the model. A replica that dies under a call fails that call with
``WorkerDied``, as a lost worker process does.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from msgspec.structs import replace
from ray.exceptions import RayActorError, RayTaskError

from ..config import ModelConfig
from ..dataplane import DataPlane, ModelVersion
from ..errors import PodiumError, WorkerDied
from ..server import RequestSnapshots
from ..types import (
    Answer,
    AnswerStream,
    Call,
    Capabilities,
    SequenceOutcome,
    SequenceRef,
    WireProtocol,
)
from ._messages import Failure, Item, Outcome

__all__ = ["Remote", "RemotePlane"]


class RemotePlane(DataPlane):
    """A data plane whose versions run in Ray Serve deployments (see the module)."""

    def __init__(self) -> None:
        super().__init__()
        self._remotes: dict[int, Remote] = {}

    def add(self, config: ModelConfig, capabilities: Capabilities, handle: Any) -> None:
        """Serve the version ``config`` describes, which runs behind ``handle`` (its
        deployment's ``DeploymentHandle``, already used once: see :class:`Remote`)."""
        mv = self.repository.add_remote(config, capabilities)
        self._remotes[id(mv)] = Remote(mv, handle)

    async def infer(
        self, call: Call, mv: ModelVersion | None = None, task: asyncio.Task[Any] | None = None
    ) -> Answer:
        # (``task``, the front end's, is for the flight of a local call: a remote one has none)
        if mv is None:
            mv = self.resolve(call.model, call.version)
        return await self._remotes[id(mv)].infer(call)

    def stream(self, call: Call, mv: ModelVersion | None = None) -> AnswerStream:
        if mv is None:
            mv = self.resolve(call.model, call.version)
        return self._remotes[id(mv)].stream(call)

    def stream_inputs(
        self,
        mv: ModelVersion,
        calls: AsyncIterator[Call],
        protocol: WireProtocol,
        request: Any = None,
    ) -> AnswerStream:
        raise PodiumError(
            f"{mv.label} reads a whole stream of requests (gRPC ModelStreamInfer), which Podium "
            "does not serve through Ray Serve"
        )


class Remote:
    """One version's deployment, as the ingress calls it. ``handle`` must have made a call
    already (the ingress's ``describe``): Serve gives the handles made from it with
    ``options()`` the same router then, so unary calls and streams share their pins."""

    def __init__(self, mv: ModelVersion, handle: Any) -> None:
        self._label = mv.label
        self._sequences = mv.config.sequence_batching
        self._handle = handle
        self._streams = handle.options(stream=True)
        self._snapshots = RequestSnapshots()

    async def infer(self, call: Call) -> Answer:
        """The answer of the replica that ran ``call``; its Podium error raised here."""
        call, made = self._named(call)
        if call.request is not None:
            call = replace(call, request=await self._snapshots.snapshot(call.request))
        response = self._handle.infer.remote(call)
        try:
            result = await response
        except asyncio.CancelledError:
            response.cancel()  # the client left: the replica cancels the call in the model
            raise
        except RayActorError as exc:
            raise self._died(exc) from None
        except RayTaskError as exc:
            raise self._broke(exc) from None
        if type(result) is Failure:
            raise result.error
        if made and result.sequence is not None:
            result.sequence = replace(result.sequence, created=True)
        return result

    def stream(self, call: Call) -> AnswerStream:
        """The items of ``call``, and where it stands in its sequence as the replica says."""
        call, made = self._named(call)
        if call.sequence is None:
            return AnswerStream(self._items(call, None))
        ref = SequenceRef(call.sequence.id, created=made)
        return AnswerStream(self._items(call, ref), ref)

    async def _items(self, call: Call, ref: SequenceRef | None) -> AsyncGenerator[Any, None]:
        if call.request is not None:
            call = replace(call, request=await self._snapshots.snapshot(call.request))
        responses = self._streams.stream.remote(call)
        finished = False
        try:
            async for message in responses:
                kind = type(message)
                if kind is Item:
                    if message.sequence is not None and ref is not None:
                        _mirror(ref, message.sequence)
                    yield message.value
                elif kind is Failure:
                    raise message.error
                elif kind is Outcome and ref is not None:
                    _mirror(ref, message.sequence)
            finished = True
        except RayActorError as exc:
            raise self._died(exc) from None
        except RayTaskError as exc:
            raise self._broke(exc) from None
        finally:
            if not finished:
                # The client left, or the front end stopped reading: the replica's generator
                # is cancelled, which closes the model's.
                responses.cancel()

    def _named(self, call: Call) -> tuple[Call, bool]:
        """``call`` with a sequence id for the router to pin (a model with
        ``sequence_batching``): a new one, with the start flag, when the client named none
        (what the replica's scheduler would do), and whether it was made here."""
        if not self._sequences:
            return call, False
        asked = call.sequence
        if asked is not None and asked.id is not None:
            return call, False
        end = asked is not None and asked.end
        return replace(call, sequence=SequenceRef(uuid.uuid4().hex, start=True, end=end)), True

    def _died(self, exc: RayActorError) -> WorkerDied:
        return WorkerDied(
            f"{self._label}: the Ray Serve replica running this request died ({type(exc).__name__})"
        )

    def _broke(self, exc: RayTaskError) -> PodiumError:
        cause = exc.cause if isinstance(exc.cause, BaseException) else exc
        return PodiumError(
            f"{self._label}: the replica failed: {type(cause).__name__}: {str(cause)[:200]}"
        )


def _mirror(ref: SequenceRef, outcome: SequenceOutcome) -> None:
    """``ref`` (what the ingress's answer stream reports) as the replica's ``outcome`` says."""
    ref.id = outcome.id
    ref.ended = outcome.ended
    ref.headers = dict(outcome.headers)
