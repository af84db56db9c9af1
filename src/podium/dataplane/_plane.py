"""The :class:`DataPlane`: inference, health and metadata over the registry."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from concurrent.futures import Executor
from typing import Any, cast

from msgspec.structs import replace

from .. import __version__
from ..errors import InvalidInput, ModelNotReady, NotFound, bounded, unloaded_model
from ..runtime import (
    UNVERSIONED,
    ModelVersion,
    Registry,
    RequestCodec,
    ResponseCache,
    SequenceScheduling,
    answer_size,
    request_key,
)
from ..types import (
    CACHE_NO_READ,
    CACHE_NO_STORE,
    Answer,
    AnswerStream,
    Call,
    HandlerRoute,
    InferenceRequest,
    InferenceResponse,
    ModelMetadata,
    ModelState,
    Reply,
    Returned,
    SequenceRef,
    ServerMetadata,
    WireProtocol,
    current_request,
    request_id,
)
from ._convert import gather, inputs_of, oip_response, take_headers
from ._endpoints import endpoint_items, handler_route, healthy, serve_websocket
from ._flight import Counted, InFlight
from ._memory import Placement, SystemSharedMemory, uses_shared_memory
from ._model_config import ModelConfiguration
from ._repository import ModelRepository
from ._statistics import ModelStatistics, model_statistics

__all__ = ["EXTENSIONS", "DataPlane"]

#: The OIP extensions the server metadata names (and ``system_shared_memory`` when it is on).
EXTENSIONS = (
    "model_repository",
    "model_configuration",
    "generate",
    "infer_stream",
    "binary_tensor_data",
    "statistics",
)

_now = time.perf_counter_ns


class DataPlane:
    """Inference, health, metadata and the model repository, for every front end.

    ``registry`` holds the models served (a new, empty one when None); ``secrets``,
    ``executor`` and ``codec`` are what the :attr:`repository` builds models with (the secrets a
    model may read, the pool its sync code runs in, how request objects reach worker
    processes). ``shared_memory``: the system shared memory regions clients register (off when
    None: see :class:`SystemSharedMemory`).
    """

    def __init__(
        self,
        registry: Registry | None = None,
        *,
        secrets: Mapping[str, str] | None = None,
        executor: Executor | None = None,
        codec: RequestCodec | None = None,
        shared_memory: SystemSharedMemory | None = None,
        server_name: str = "podium",
    ) -> None:
        if registry is None:
            registry = Registry()
        self._registry = registry
        #: The models served and the operations that change them (index, load, unload,
        #: register, unregister, scale, set-default, describe).
        self.repository = ModelRepository(registry, secrets=secrets, executor=executor, codec=codec)
        #: The system shared memory regions (Triton's extension), for every front end; every
        #: OIP call's tensors that name a region are read from and written to it here.
        self.shared_memory = shared_memory if shared_memory is not None else SystemSharedMemory()
        extensions = list(EXTENSIONS)
        if self.shared_memory.enabled:
            extensions.append("system_shared_memory")
        self._extensions = tuple(extensions)
        self._server_name = server_name  # OIP's server metadata (--server-name)
        #: The calls in flight, and the shutdown's view of them (readiness, drain, cut).
        self.flight = InFlight()

    async def close(self) -> None:
        """Stop the repository's background work, then every model version; unmap every
        shared memory region."""
        await self.repository.close()
        await self._registry.close()
        self.shared_memory.close()

    # -- health and metadata -------------------------------------------------------------

    def live(self) -> bool:
        """True while the process answers, draining included: liveness never fails for a
        model's trouble (``docs/operations.md``)."""
        return True

    def ready(self) -> bool:
        """The server's readiness: false from the moment it begins to stop (the flight's
        ``stopping``), else by the repository's rule (:meth:`ModelRepository.ready`): no
        version failed, none is still loading at start-up; unloaded ones do not count."""
        return not self.flight.stopping and self.repository.ready()

    def torchserve_health(self) -> str:
        """TorchServe's ``/ping`` status, on HTTP and gRPC alike: ``Healthy`` when :meth:`ready`,
        ``Unhealthy`` when stopping (nothing will serve), else ``Partial Healthy``."""
        if self.ready():
            return "Healthy"
        return "Unhealthy" if self.flight.stopping else "Partial Healthy"

    def model_ready(self, name: str, version: str | None = None) -> bool:
        """Whether that version is ready: loaded, and not in trouble (every worker stuck, or
        its workers crash-looping: :meth:`ModelVersion.trouble`); ``NotFound`` if it does not
        exist."""
        mv = self._registry.get(name, version)
        return mv.state is ModelState.READY and not mv.trouble()

    async def model_healthy(self, name: str, version: str | None = None) -> bool:
        """Readiness as Truss has it: :meth:`model_ready`, and for a model that checks its own
        health (``capabilities.health_check``), what it says; ``NotFound`` if unknown."""
        if not self.model_ready(name, version):
            return False
        return await healthy(self._registry.get(name, version))

    def sole_model(self) -> str | None:
        """The name of the one model served, when exactly one is (Truss's server serves one
        model and its routes ignore the name they are given); None otherwise."""
        names = self._registry.names()
        return names[0] if len(names) == 1 else None

    def sole_truss(self) -> str | None:
        """The one model served when it is a truss (``capabilities.truss``), else None."""
        name = self.sole_model()
        if name is None:
            return None
        try:
            mv = self._registry.get(name)
        except NotFound:
            return None
        return name if mv.instance is not None and mv.instance.capabilities.truss else None

    def endpoint(self, call: Call, mv: ModelVersion, name: str) -> AnswerStream:
        """Call the model's method ``name`` (one of its ``capabilities.endpoints``: Truss's
        ``chat_completions`` and the like) with the call's payload as it came, on the version's
        instance, outside ``predict_concurrency``: one :class:`~podium.types.Returned`, or the
        items of the generator the method returned. ``NotFound`` if the model has no such
        method."""
        return AnswerStream(endpoint_items(self.flight, mv, call, name), None)

    def handler_route(
        self, method: str, path: str
    ) -> tuple[ModelVersion, HandlerRoute, dict[str, str]] | None:
        """The model's own HTTP route (an MLServer runtime's custom handler) that serves
        ``method`` ``path``: its version, the route and the path's parameters, for
        :meth:`endpoint` with the route's ``name``; None if no ready model has one there
        (``MethodNotAllowed`` if one has, for other methods). Default versions first."""
        registry = self._registry
        versions = []
        for model in registry.names():
            default = registry.get(model, None)
            versions.append(default)
            versions.extend(v for v in registry.versions(model) if v is not default)
        return handler_route(versions, method, path)

    async def websocket(self, call: Call, mv: ModelVersion, websocket: Any) -> None:
        """Hand a WebSocket (a ``starlette`` one, accepted) to a model that serves them
        (``capabilities.websocket``) for as long as it keeps it; ``NotFound`` otherwise."""
        await serve_websocket(self.flight, mv, call, websocket)

    def server_metadata(self) -> ServerMetadata:
        return ServerMetadata(
            name=self._server_name, version=__version__, extensions=list(self._extensions)
        )

    def model_metadata(self, name: str, version: str | None = None) -> ModelMetadata:
        """The metadata of that version (the default one when None); ``NotFound`` if unknown.
        ``versions`` lists every version of the model, or, when one was asked for, that one
        (as Triton answers ``/v2/models/{m}/versions/{v}``); a model whose metadata lists its
        own ``versions`` (an MLServer ``model-settings.json``'s) answers that list, as MLServer
        does."""
        mv = self._registry.get(name, version)
        meta = dict(mv.config.model_metadata)
        platform = meta.pop("platform", "podium")
        inputs = meta.pop("inputs", None) or []
        outputs = meta.pop("outputs", None) or []
        meta.pop("max_batch_size", None)  # the configuration's (model_config), not a parameter
        declared = meta.pop("versions", None)  # the versions the model's own file lists
        state = {"state": mv.state.value}
        if mv.reason:
            state["reason"] = mv.reason
        trouble = mv.trouble()
        if trouble:  # ready, yet not serving well: its readiness says false, and why
            state["trouble"] = trouble
        return ModelMetadata(
            name=mv.name,
            versions=[str(v) for v in declared]
            if isinstance(declared, list)
            else [
                v.version or UNVERSIONED
                for v in ([mv] if version else self._registry.versions(name))
            ],
            platform=platform,
            inputs=inputs,
            outputs=outputs,
            version=mv.version or None,
            parameters={**meta, **state},
        )

    def model_config(self, name: str, version: str | None = None) -> ModelConfiguration:
        """That version's configuration as Triton's ``ModelConfig`` (OIP's model configuration
        extension; the default version when None); ``NotFound`` if unknown."""
        return self.repository.configuration(self._registry.get(name, version))

    def statistics(
        self, name: str | None = None, version: str | None = None
    ) -> list[ModelStatistics]:
        """The statistics extension: every version of every model (``name`` None), of one
        model (``version`` None), or one version; ``NotFound`` for an unknown model or
        version."""
        if not name:
            versions = self.versions()
        elif not version:
            versions = self._registry.versions(name)
        else:
            versions = [self._registry.get(name, version)]
        return [model_statistics(mv) for mv in versions]

    def versions(self) -> list[ModelVersion]:
        """Every model version registered (for the metrics)."""
        return [mv for model in self._registry.names() for mv in self._registry.versions(model)]

    # -- inference -----------------------------------------------------------------------

    def resolve(
        self, model: str, version: str | None = None, protocol: WireProtocol | None = None
    ) -> ModelVersion:
        """The ready version a call addresses; ``NotFound`` / ``ModelNotReady`` otherwise.

        By ``protocol``: on OIP's routes (REST and gRPC) a version unloaded through the
        repository API is ``NotFound`` (404 / ``NOT_FOUND``, Triton's "has no available
        versions"), as Triton and MLServer answer; on the others it is ``ModelNotReady`` (503),
        as TorchServe answers a model without workers and Truss a model that is not ready. A
        version still loading, or whose load failed, is ``ModelNotReady`` everywhere.

        Front ends call this before reading the body, then look at what the model asks for
        (``instance.capabilities``: ``needs_inputs``, ``needs_request``, ``streaming``) and pass
        it on to :meth:`infer` / :meth:`stream`, so one call costs one lookup. The request
        being served (:data:`~podium.types.current_request`) names the version from then on
        (its access line, its span).
        """
        try:
            mv = self._registry.ready(model, version)
        except ModelNotReady:
            if protocol is not None and protocol.oip:
                found = self._registry.get(model, version)
                if found.state is ModelState.UNLOADED:
                    raise NotFound(unloaded_model(model, version)) from None
            raise
        info = current_request.get()
        if info is not None:
            config = mv.config  # (``mv.name`` and ``mv.version`` are calls: properties)
            info.model = config.name
            info.version = config.version
        return mv

    async def infer(
        self, call: Call, mv: ModelVersion | None = None, task: asyncio.Task[Any] | None = None
    ) -> Answer:
        """Run ``call`` to completion. A streaming model's items are gathered into one value.

        For a model with ``sequence_batching`` the call runs in the sequence it names (a new one
        when it names none); the answer says which, and whether the sequence ended. While the
        server stops, the call is counted in :attr:`flight`; one still running when the grace
        is over fails with ``ShuttingDown`` (as does one that comes after).

        The call is counted in the version's :attr:`~ModelVersion.stats`, by outcome and code
        (of its protocol), with its duration. ``task``: the task running the call, where the
        front end knows it (the one it cancels when the client leaves), else looked up.
        """
        # One coroutine for the whole call (no inner one: each level of await costs a frame
        # on every request). ``task`` is None when this task runs a call already: that one
        # counts in the flight.
        flight = self.flight
        task = flight.enter(call, task)
        try:
            if mv is None:
                mv = self._registry.ready(call.model, call.version)
            stats = mv.stats.protocols[call.protocol.index]
            start = _now()
            placement: Placement | None = None
            try:
                _queue_asks(mv, call)
                cache = mv.cache
                key = hit = None
                if cache is not None:  # a hit answers here; a miss keeps the answer below
                    key, generation, hit = _look_up(mv, cache, call)
                if hit is None:
                    call, placement = self._placed(call)
                    inputs, oip = inputs_of(mv, call)
                    sequence = _sequence(mv, call)
                    caps = mv.instance.capabilities
                    headers = None
                    if caps.streaming and not caps.predict_on_infer:
                        async with contextlib.aclosing(
                            _stream_from_scheduler(mv, inputs, call, sequence)
                        ) as stream:
                            items = [item async for item in stream]
                        result = gather(mv, call.protocol, items, oip, sequence)
                        if placement is not None:
                            placement.write(result)
                    else:
                        if sequence is None:
                            result = await mv.scheduler.infer(inputs, call.request)
                        else:
                            scheduler = cast(SequenceScheduling, mv.scheduler)
                            result = await scheduler.infer_in(sequence, inputs, call.request)
                        if call.protocol.oip:
                            result = oip_response(mv, result, oip, sequence)
                            if placement is not None:
                                placement.write(result)
                        if isinstance(result, InferenceResponse) and result.parameters:
                            headers = take_headers(result)
                    answer = Answer(
                        result, headers, None if sequence is None else sequence.outcome()
                    )
                    if key is not None and cache is not None:
                        _keep(cache, key, generation, answer, call.payload.id)
                else:
                    answer = hit
            except BaseException as exc:
                stats.failed_with(exc, _now() - start)
                raise
            finally:
                if placement is not None:
                    placement.release()
            mv.stats.last_ns = end = _now()
            value = answer.value
            if type(value) is Reply:  # the status a handler chose
                stats.answered(value.status, end - start)
            else:
                stats.ok.add(end - start)
            return answer
        except asyncio.CancelledError:
            error = None if task is None else flight.cut_error(task)
            if error is None:
                raise
            raise error from None
        finally:
            if task is not None:
                flight.leave(task)

    def _placed(self, call: Call) -> tuple[Call, Placement | None]:
        """``call`` with the inputs it names in shared memory (Triton's system shared memory
        extension) placed as views of their regions, and the placement that holds them (None:
        the call names no region). The front end's call stays as it was sent."""
        payload = call.payload
        if call.protocol.oip and type(payload) is InferenceRequest and uses_shared_memory(payload):
            placement = self.shared_memory.place(payload)
            return replace(call, payload=placement.request), placement
        return call, None

    def refused(self, mv: ModelVersion, protocol: WireProtocol, exc: BaseException) -> None:
        """Count a call to ``mv`` that a front end refused before handing it over (its body
        did not parse): by outcome and code, without a duration."""
        mv.stats.protocols[protocol.index].refused(exc)

    def stream(self, call: Call, mv: ModelVersion | None = None) -> AnswerStream:
        """The items of ``call`` (OIP: each an :class:`InferenceResponse`); a non-streaming
        model yields its one result. The payload is converted when the first item is asked
        for, so a conversion error comes from the stream, as the model's own errors do."""
        if mv is None:
            mv = self._registry.ready(call.model, call.version)
        sequence = _sequence(mv, call)
        return AnswerStream(self._stream(mv, call, sequence), sequence)

    async def _stream(
        self, mv: ModelVersion, call: Call, sequence: SequenceRef | None
    ) -> AsyncGenerator[Any, None]:
        # In flight from its first item to its end, under the task that reads it. Counted as
        # infer() counts, and: open while it runs, its first item's delay, its items.
        stats = mv.stats
        start = _now()
        placement: Placement | None = None
        with Counted(self.flight, call, stats, stream=True):
            try:
                _queue_asks(mv, call)
                call, placement = self._placed(call)
                inputs, oip = inputs_of(mv, call)
                first = True
                convert = call.protocol.oip
                # A value returned where a stream might have been (a truss's predict) is that
                # value to every front end but Truss's, which answers it whole.
                unwrap = (
                    mv.instance.capabilities.returns_streams
                    and call.protocol is not WireProtocol.TRUSS
                )
                async with contextlib.aclosing(
                    _stream_from_scheduler(mv, inputs, call, sequence)
                ) as items:
                    async for item in items:
                        if unwrap and type(item) is Returned:
                            item = item.value
                        if first:
                            first = False
                            stats.first_item.add(_now() - start)
                        stats.items += 1
                        if convert:
                            item = oip_response(mv, item, oip, sequence)
                            if placement is not None:  # written where the request asked
                                placement.write(item)
                        yield item
            finally:
                if placement is not None:
                    placement.release()

    def stream_inputs(
        self,
        mv: ModelVersion,
        calls: AsyncIterator[Call],
        protocol: WireProtocol,
        request: Any = None,
    ) -> AnswerStream:
        """A stream of calls to one model that reads a stream of requests (its
        ``consumes_stream``): each call's payload converted as for :meth:`infer` as it arrives,
        the model's answers as it produces them (OIP: each an :class:`InferenceResponse`)."""
        return AnswerStream(self._stream_inputs(mv, calls, protocol, request))

    async def _stream_inputs(
        self, mv: ModelVersion, calls: AsyncIterator[Call], protocol: WireProtocol, request: Any
    ) -> AsyncGenerator[Any, None]:
        async def convert_each() -> AsyncGenerator[Any, None]:
            async for call in calls:
                payload = call.payload
                if type(payload) is InferenceRequest and uses_shared_memory(payload):
                    raise InvalidInput(
                        f"{mv.label} reads a whole stream of requests, whose tensors cannot "
                        "be in shared memory; send them in the requests"
                    )
                yield inputs_of(mv, call)[0]

        # The whole stream is one call in flight, under the task that reads its answers, and
        # one request counted.
        stats = mv.stats
        with Counted(self.flight, Call(mv.name, mv.version, protocol), stats, stream=True):
            async with contextlib.aclosing(
                mv.scheduler.stream_inputs(convert_each(), request)
            ) as items:
                async for item in items:
                    stats.items += 1
                    yield oip_response(mv, item, None) if protocol.oip else item


def _look_up(
    mv: ModelVersion, cache: ResponseCache, call: Call
) -> tuple[bytes | None, int, Answer | None]:
    """A call to a version with a response cache: ``(key, generation, answer)``, where
    ``answer`` is the stored one (a hit: a copy with the request's id) or None, and ``key``
    (with the cache's ``generation`` then) is where to keep the answer the model gives (None:
    not kept). Only OIP calls are cached, and not those with tensors in shared memory (their
    data is the region's, read later) nor those whose ``Cache-Control`` says not to. The
    lookup's time counts as Triton's ``cache_hit`` / ``cache_miss`` do."""
    payload = call.payload
    if (
        not call.protocol.oip
        or type(payload) is not InferenceRequest
        or uses_shared_memory(payload)
    ):
        return None, 0, None
    info = current_request.get()
    asked = 0 if info is None else info.cache
    if asked == CACHE_NO_READ | CACHE_NO_STORE:
        return None, 0, None
    start = _now()
    headers = None
    if mv.instance.capabilities.request_headers_only:  # what else the model reads
        found = getattr(call.request, "headers", None)
        headers = [] if found is None else sorted(found.items())
    key = request_key(mv.name, mv.version, payload, headers)
    if key is None:
        return None, 0, None
    stats = cache.stats
    if not asked & CACHE_NO_READ:
        found = cache.get(key)
        if found is not None:
            response, headers = found
            answer_id = payload.id
            if answer_id is None and response.id is _OWN_ID:  # as the model names a request
                answer_id = request_id() or str(uuid.uuid4())
            answer = Answer(
                replace(response, id=answer_id), None if headers is None else dict(headers)
            )
            stats.hits += 1
            stats.hit_ns += _now() - start
            return None, 0, answer
    stats.misses += 1
    stats.miss_ns += _now() - start
    return (None if asked & CACHE_NO_STORE else key), cache.generation, None


#: The id a kept answer holds when the model named a request that came without one (an MLServer
#: runtime names every request, as MLServer does: ``podium.request_id()``): a hit to a request
#: without an id is named the same way, never with the id of the request that was kept.
_OWN_ID = "(the request's own id)"


def _keep(
    cache: ResponseCache, key: bytes, generation: int, answer: Answer, asked_id: str | None
) -> None:
    """Keep a miss's answer (an OIP response; its id is the request's, left out, or
    :data:`_OWN_ID` where the model named a request without one), its time counted in
    ``cache_miss``."""
    start = _now()
    response = answer.value
    if type(response) is InferenceResponse:
        own = asked_id is None and response.id is not None
        # (a list of its own: the answer's may be the model's, ``oip_response``)
        kept = replace(response, id=_OWN_ID if own else None, outputs=list(response.outputs))
        cache.put(key, kept, answer.headers, answer_size(kept), generation)
    cache.stats.miss_ns += _now() - start


def _queue_asks(mv: ModelVersion, call: Call) -> None:
    """What the call asks of the model's queue (docs/scaling.md, "Overload"): an OIP request's
    ``timeout`` (microseconds, as Triton's) and ``priority`` parameters, which win over the
    headers and metadata the front end read into the current request; the priority checked
    against the model's levels (``InvalidInput`` otherwise)."""
    info = current_request.get()
    if info is None:
        return
    payload = call.payload
    if type(payload) is InferenceRequest and payload.parameters:
        parameters = payload.parameters
        timeout = parameters.get("timeout")
        if timeout is not None:
            if isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 0:
                raise InvalidInput(
                    "parameter 'timeout' must be an integer number of microseconds >= 0, "
                    f"got {bounded(repr(timeout), 40)}"
                )
            if timeout:  # 0: none, as Triton has it
                info.deadline = time.monotonic() + timeout / 1e6
        priority = parameters.get("priority")
        if priority is not None:
            if isinstance(priority, bool) or not isinstance(priority, int):
                priority = -1
            info.priority = priority
    priority = info.priority
    if priority:
        levels = mv.config.priority_levels
        if not 1 <= priority <= levels:
            raise InvalidInput(
                f"{mv.label} has priority levels 1-{levels} (1 the highest; 0: its default "
                f"{mv.config.default_priority}); the request's priority is not one of them"
            )


def _sequence(mv: ModelVersion, call: Call) -> SequenceRef | None:
    """The data plane's own copy of the sequence a call names, for the scheduler to fill in
    (the call stays as the front end made it); a new sequence when it names none. OIP calls
    follow Triton's rule (``needs_start``: an id with no open sequence needs the start flag);
    the others TorchServe's (docs/sequences.md)."""
    if not mv.config.sequence_batching:
        return None
    asked = call.sequence
    if asked is None:
        return SequenceRef()  # no id sent: a new sequence
    return SequenceRef(
        asked.id, asked.start, asked.end, needs_start=call.protocol.oip, joined=asked.joined
    )


def _stream_from_scheduler(
    mv: ModelVersion, inputs: Any, call: Call, sequence: SequenceRef | None
) -> AsyncGenerator[Any, None]:
    if sequence is None:
        return mv.scheduler.stream(inputs, call.request)
    return cast(SequenceScheduling, mv.scheduler).stream_in(sequence, inputs, call.request)
