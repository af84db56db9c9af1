"""The TorchServe adapter: handlers in .mar archives or model directories.

A TorchServe model is a ``.mar`` (zip) or ``.tar.gz`` archive, or a directory (TorchServe's
``--archive-format no-archive``), holding ``MAR-INF/MANIFEST.json``, the handler and the model's
files. Its ``model-config.yaml`` (the manifest's ``configFile``) maps onto Podium's settings
(``_config``); the handler is imported as TorchServe's model loader does (``_handler``)
and runs behind :class:`TorchServeModel`, which gives it TorchServe's ``data`` list and
``Context`` (``_context``). What differs from TorchServe is written down in
``docs/torchserve.md``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncGenerator, Callable, Mapping
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

import msgspec

from ... import __version__
from ...codecs import joined
from ...config import load_yaml
from ...devices import device, gpu_index
from ...errors import Cancelled, DefinitionError, ModelError, PodiumError
from ...metrics import current_store
from ...types import (
    END,
    Capabilities,
    Generation,
    InferenceResponse,
    InputKind,
    ModelInstance,
    Reply,
    WireProtocol,
)
from ...types import Context as SequenceContext
from .._adapter import Adapter
from .._calls import check_results, defining, model_error, run_sync
from .._owned import Owned
from .._source import Contract, ModelSource, TorchServeParts
from ._archive import ARCHIVE_SUFFIXES, MANIFEST, ArchiveLimits, extract_owned, read_manifest
from ._archive import set_limits as set_archive_limits
from ._config import model_config
from ._context import Context, RequestProcessor
from ._handler import HandlerSpec, load_handler, on_path
from ._metrics import TorchServeMetrics
from ._metrics_yaml import read_metrics_yaml
from ._rows import (
    Refused,
    contexts_for,
    end_sequences,
    request_id_of,
    row_of,
    unwrap,
)

__all__ = [
    "ArchiveLimits",
    "TorchServeModel",
    "build",
    "is_source",
    "prepare",
    "set_archive_limits",
    "sources",
]

logger = logging.getLogger("podium.model")

_TS_ID = "ts_request_id"  # a continuous request's id across steps, in Generation.state
_TS_HEADERS = "ts_request_headers"  # and its request headers, computed on its first step


def is_source(path: Path) -> bool:
    """Whether ``path`` holds a model written for TorchServe (cheap: looks at names only)."""
    if path.is_file():
        return path.name.endswith(ARCHIVE_SUFFIXES)
    return (path / MANIFEST).is_file()


def sources(path: Path) -> list[ModelSource]:
    """The model version at ``path``; ``DefinitionError`` listing every problem. An archive's
    source owns its extraction (``ModelSource.owned``)."""
    if not path.is_file():
        return [_source(path, path.resolve(), ())]
    model_dir, hold = extract_owned(path)
    try:
        return [_source(path, model_dir, (hold,))]
    except BaseException:
        hold.release()  # no source holds it
        raise


def _source(path: Path, model_dir: Path, owned: tuple[Owned, ...]) -> ModelSource:
    manifest = read_manifest(model_dir)
    model = manifest["model"]
    where = str(path)
    default_name = path.name
    for suffix in ARCHIVE_SUFFIXES:
        default_name = default_name.removesuffix(suffix)
    name = model.get("modelName") or default_name
    version = model.get("modelVersion")
    yaml_config: dict[str, Any] = {}
    config_file = model.get("configFile")
    if config_file:
        config_path = model_dir / str(config_file)
        if not config_path.is_file():
            raise DefinitionError(f"{where}: the manifest's configFile '{config_file}' is missing")
        yaml_config = load_yaml(config_path)
        where = f"{path} ({config_file})" if path.is_file() else str(config_path)
    config = model_config(
        yaml_config,
        name=str(name),
        version=None if version is None else str(version),
        where=where,
    )
    handler = str(model.get("handler", "")).partition(":")[0]
    handler_file = model_dir / (handler if handler.endswith(".py") else f"{handler}.py")
    file = path.resolve() if path.is_file() else handler_file.resolve()
    parts = TorchServeParts(manifest)
    return ModelSource(config, file, model_dir, Contract.TORCHSERVE, torchserve=parts, owned=owned)


def prepare(source: ModelSource) -> HandlerSpec:
    """Import and check the handler without instantiating it (``podium check`` stops here)."""
    return load_handler(source.torchserve_parts().manifest, source.model_dir, source.label)


def build(
    source: ModelSource, prepared: Any, *, secrets: Mapping[str, str], executor: Executor
) -> ModelInstance:
    """Instantiate the prepared handler as a :class:`podium.types.ModelInstance`."""
    return TorchServeModel(source, prepared, executor=executor)


class TorchServeModel(Adapter):
    """A TorchServe handler behind the :class:`podium.types.ModelInstance` interface.

    One ``handle(data, context)`` call per request, or per batch when ``batch_size`` > 1, in
    the executor (never on the event loop). A handler whose code calls
    ``send_intermediate_predict_response`` is ``streaming``: each call is one streamed item
    and the return value the last; other handlers cost one plain call.
    """

    def __init__(self, source: ModelSource, handler: HandlerSpec, *, executor: Executor) -> None:
        config = source.config
        self.name = config.name
        self._label = handler.label
        self._executor = executor
        self._batched = config.batch_size > 1
        self._buffer = config.stream_buffer
        # continuousBatching: one handle call per step with the active requests (``step``),
        # each request going on while context.stopping_criteria says so. With sequenceBatching
        # too, the sequence scheduler steps each worker's requests the same way (TorchServe's
        # sequence continuous batching), unless the handler streams itself with
        # send_intermediate_predict_response: then each request is one handle call in its own
        # thread (predict_stream), so that a sequence's next request runs while one streams.
        self._sequences = config.sequence_batching
        continuous = config.continuous_batching and not (self._sequences and handler.streams)
        parts = source.torchserve_parts()
        # the GPU the worker pool gave this worker (deviceType / deviceIds chose them:
        # docs/devices.md), as TorchServe numbers it for the handler: cuda:<gpu_id>
        gpu_id = gpu_index(device())
        self.capabilities = Capabilities(
            needs_request=True,
            input_kind=InputKind.WIRE,  # each protocol gets its own answer (a Reply, OIP's)
            # with batching the scheduler wants one list back: intermediate items are gathered
            streaming=continuous or (handler.streams and not self._batched),
            predict_in_thread=True,  # handlers are sync code
            continuous=continuous,
            device="cpu" if gpu_id is None else "gpu",
        )
        self.context = Context(
            config.name,
            str(source.model_dir),
            parts.manifest,
            config.batch_size,
            gpu_id,
            __version__,
            # what the handler records goes to this version's metrics (built under its store)
            metrics=TorchServeMetrics(
                current_store(),
                config.name,
                read_metrics_yaml(config.metrics_config).model_metrics,
                mode=config.ts_metrics,
            ),
            model_yaml_config=config.raw,  # model-config.yaml, as read
        )
        self._model_dir = source.model_dir
        # handle() runs on threads of the adapter's own, as a native sync predict does
        # (model/_threads.py): cheaper than the shared pool, and at predict_concurrency 1 always
        # the same thread, as in TorchServe's one-threaded backend worker
        self._own_threads(True)
        with defining(f"{source.label}: creating the handler '{handler.label}'"):
            self._entry, self._init = handler.instantiate()

    # -- lifecycle -------------------------------------------------------------------------

    async def load(self) -> None:
        """Run the handler's ``initialize(context)`` (module style: ``handle(None, context)``)."""
        if self._init is not None:
            # in this task's context: metrics initialize creates are the version's
            await run_sync(self._executor, self._initialize)

    def _initialize(self) -> None:
        try:
            with on_path(self._model_dir):
                assert self._init is not None
                self._init(self.context)
        except Exception as exc:
            logger.error(
                "model '%s' handler '%s' initialize raised", self.name, self._label, exc_info=exc
            )
            raise ModelError(
                f"model '{self.name}' handler '{self._label}' initialize raised "
                f"{type(exc).__name__}: {exc}"
            ) from exc

    # -- calls -------------------------------------------------------------------------------

    async def predict(self, inputs: Any, request: Any) -> Any:
        batch, requests = (inputs, request) if self._batched else ([inputs], [request])
        contexts = contexts_for(len(batch))
        results = await self._threads.run(self._handle, batch, requests, None, contexts)
        return results if self._batched else results[0]

    def predict_stream(self, inputs: Any, request: Any) -> AsyncGenerator[Any, None]:
        return self._stream(inputs, request, contexts_for(1))

    async def step(self, batch: list[Generation]) -> None:
        """One step of continuous batching: one ``handle(data, context)`` call with the active
        requests, as TorchServe's continuous batching makes it (on the handler's threads).

        A request keeps its request id across steps (``context.request_ids[idx]``, kept in its
        ``Generation.state``); its data row is sent on its first step only, later steps send an
        empty row (TorchServe sends a request cached in the backend without its parameters),
        with its headers every time, so the handler recognises it through ``context.cache``.
        Items sent with ``send_intermediate_predict_response`` and the value the handler returns
        for the request are each one item of its stream. ``context.stopping_criteria[idx]``
        (a list, or a dict keyed by idx or request id; a callable given the returned value, or
        a bool) decides whether the request goes on: true ends it, false keeps it, anything else
        (no criterion) ends it after this step, as TorchServe does.

        On a sequence model each request's headers carry its sequence as for any call of a
        sequence (:meth:`_call_handler`), and a handler that sets ``ts_request_sequence_end`` on a
        request's response ends that request's sequence.
        """
        if not self.capabilities.continuous:
            raise RuntimeError(
                "a TorchServe handler is served by continuous batching only with "
                "continuousBatching: true"
            )
        if not batch:
            return
        contexts = contexts_for(len(batch)) if self._sequences else None
        await self._threads.run(self._step, batch, contexts)

    async def _stream(
        self, inputs: Any, request: Any, contexts: list[SequenceContext | None] | None
    ) -> AsyncGenerator[Any, None]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        room = threading.Semaphore(self._buffer)  # back-pressure on the handler's thread
        gone = threading.Event()
        protocol = unwrap(inputs)[0]

        def emit(idx: int, value: Any) -> None:  # in the handler's thread
            if not gone.is_set():
                room.acquire()
            if gone.is_set():
                raise Cancelled(f"model '{self.name}': the client of this stream has gone")
            processors = self.context.request_processor or []
            item = self._finish(processors[idx], value, protocol, final=False)
            loop.call_soon_threadsafe(queue.put_nowait, item)

        # on the handler's own threads, as handle() without a stream: at predict_concurrency 1
        # the one thread TorchServe's backend worker runs every call on
        done = asyncio.ensure_future(
            self._threads.run(self._handle, [inputs], [request], emit, contexts)
        )
        done.add_done_callback(lambda _: queue.put_nowait(END))
        try:
            while (item := await queue.get()) is not END:
                room.release()
                yield item
            while not queue.empty():  # what was sent just before the handler returned
                item = queue.get_nowait()
                if item is not END:
                    yield item
            yield done.result()[0]
        finally:
            gone.set()
            room.release()  # a handler blocked on a full buffer wakes up and stops
            if not done.done():
                # a handler not started never runs; a running one is waited for (it stops at
                # its next send): the slot stays taken while it runs
                done.cancel()
                await asyncio.wait([done])
            if not done.cancelled():
                done.exception()  # retrieved: an abandoned stream's error is not news

    def _handle(
        self,
        inputs: list[Any],
        requests: list[Any],
        emit: Callable[[int, Any], None] | None,
        contexts: list[SequenceContext | None] | None = None,
    ) -> list[Any]:
        """One ``handle(data, context)`` call for a batch, in a worker thread (see
        :meth:`_call_handler` for a sequence model's headers)."""
        data: list[dict[str, Any]] = []
        processors: list[RequestProcessor] = []
        protocols: list[WireProtocol] = []
        for i, (value, request) in enumerate(zip(inputs, requests, strict=True)):
            sequence = contexts[i] if contexts is not None else None
            protocol, row, headers = row_of(value, request, sequence)
            protocols.append(protocol)
            data.append(row)
            processors.append(RequestProcessor(headers))
        # Each request's own id (the access log's, podium.request_id()), as TorchServe's
        # frontend gives each request one; a bare call's (in tests) a fresh uuid.
        ids = {i: request_id_of(value) for i, value in enumerate(inputs)}
        try:
            ret, kept = self._call_handler(data, ids, processors, emit, contexts, "batch")
        except Refused as refused:
            return [self._refusal(refused.exc, protocol) for protocol in protocols]
        return [
            self._finish(
                processors[i],
                joined([*kept[i], ret[i]]) if i in kept else ret[i],
                protocols[i],
                final=True,
            )
            for i in range(len(ret))
        ]

    def _step(
        self, gens: list[Generation], contexts: list[SequenceContext | None] | None = None
    ) -> None:
        """One continuous step, in a worker thread (see :meth:`step`)."""
        data: list[dict[str, Any]] = []
        processors: list[RequestProcessor] = []
        ids: dict[int, str] = {}
        protocols: list[WireProtocol] = []
        for i, gen in enumerate(gens):
            state = gen.state
            if _TS_ID not in state:
                sequence = contexts[i] if contexts is not None else None
                protocol, row, state[_TS_HEADERS] = row_of(gen.inputs, gen.request, sequence)
                state[_TS_ID] = request_id_of(gen.inputs)
            else:
                protocol = unwrap(gen.inputs)[0]
                row = {}  # cached in the backend: TorchServe sends no parameters again
            protocols.append(protocol)
            data.append(row)
            processors.append(RequestProcessor(dict(state[_TS_HEADERS])))
            ids[i] = state[_TS_ID]

        def emit(idx: int, value: Any) -> None:  # in this thread
            gens[idx].emit(self._finish(processors[idx], value, protocols[idx], final=False))

        try:
            ret, _ = self._call_handler(data, ids, processors, emit, contexts, "step")
        except Refused as refused:
            for gen, protocol in zip(gens, protocols, strict=True):
                gen.emit(self._refusal(refused.exc, protocol))
                gen.finish()
            return
        criteria = self.context.stopping_criteria
        for i, gen in enumerate(gens):
            gen.emit(self._finish(processors[i], ret[i], protocols[i], final=True))
            if self._stops(criteria, i, ids[i], ret[i]):
                gen.finish()

    def _call_handler(
        self,
        data: list[dict[str, Any]],
        ids: dict[int, str],
        processors: list[RequestProcessor],
        emit: Callable[[int, Any], None] | None,
        contexts: list[SequenceContext | None] | None,
        what: str,
    ) -> tuple[list[Any], dict[int, list[Any]]]:
        """``handle(data, context)`` over one ``batch`` or ``step`` (``what``), its context set
        for it: its results (one per request, checked) and the intermediate responses kept of
        each request that could not stream them. A ``PredictionException`` comes out as
        :class:`Refused`; any other error as ``ModelError`` naming the handler.

        For a sequence model (``contexts`` given) each request's headers carry its sequence
        (:func:`row_of`), and a handler that sets the ``ts_request_sequence_end`` response header
        ends that sequence.
        """
        batch = self.context._batch
        batch.request_ids = ids
        batch.request_processor = processors
        batch.emit = emit
        batch.kept = None
        start = time.perf_counter()
        try:
            returned = self._entry(data, self.context)
            # as TorchServe's backend (ts/service.py) after each handle call
            elapsed = round((time.perf_counter() - start) * 1000, 2)
            self.context.metrics.add_time("PredictionTime", elapsed, None, "ms")
            check_results(returned, len(data), f"model '{self.name}' handler '{self._label}'", what)
            return returned, batch.kept or {}
        except PodiumError:
            raise
        except Exception as exc:
            if type(exc).__name__ == "PredictionException" and hasattr(exc, "error_code"):
                raise Refused(exc) from exc
            method = f"handler '{self._label}'" + (" (in step)" if what == "step" else "")
            raise model_error(self.name, method, exc) from exc
        finally:
            batch.emit = None
            batch.kept = None
            if contexts is not None:
                end_sequences(processors, contexts)

    def _stops(self, criteria: Any, idx: int, req_id: str, value: Any) -> bool:
        """Whether the request at ``idx`` is complete after this step, by TorchServe's rule:
        ``stopping_criteria[idx](value)`` true stops it, false keeps it going, and anything else
        (no criteria, no entry, None) ends it (TorchServe sends it without ``ts_stream_next``)."""
        if not criteria:
            return True
        found: Any = None
        if isinstance(criteria, Mapping):
            found = criteria.get(idx, criteria.get(req_id))
        elif isinstance(criteria, list | tuple):
            found = criteria[idx] if idx < len(criteria) else None
        if callable(found):
            try:
                found = found(value)
            except Exception as exc:
                raise ModelError(
                    f"model '{self.name}' handler '{self._label}': stopping_criteria[{idx}] "
                    f"raised {type(exc).__name__}: {exc}"
                ) from exc
        if isinstance(found, bool):
            return found
        return True

    def _finish(
        self, processor: RequestProcessor, value: Any, protocol: WireProtocol, *, final: bool
    ) -> Any:
        """A handler's value for one request as the front end wants it: a :class:`Reply` when
        the handler set a status or headers and the protocol can carry them (every one but
        OIP's, which gets a KServe v2 response as an ``InferenceResponse``)."""
        if protocol.oip:
            if final and isinstance(value, dict) and isinstance(value.get("outputs"), list):
                try:  # a KServe v2 response, as TorchServe's OIP handlers return
                    return msgspec.convert(value, InferenceResponse)
                except msgspec.ValidationError:
                    return value
            return value
        if isinstance(value, bytearray):
            value = bytes(value)  # sent as it is, like bytes
        if not processor.touched:
            return value
        headers: dict[str, str] = {}
        content_type = None
        for key, header in processor.get_response_headers().items():
            if key.lower() == "content-type":
                content_type = str(header) if content_type is None else content_type
            elif key.lower() != "ts_stream_next":
                headers[key] = str(header)
        status = processor.get_response_status_code()
        if status == 200 and not headers and content_type is None:
            return value  # only TorchServe's own ts_stream_next was set
        return Reply(value, status, headers, content_type)

    def _refusal(self, exc: Any, protocol: WireProtocol) -> Any:
        """``PredictionException(message, error_code)``: TorchServe answers with that status (OIP,
        which has no such answer: a ``ModelError``)."""
        message = str(getattr(exc, "message", exc))
        code = int(exc.error_code)
        if protocol.oip:
            raise ModelError(f"model '{self.name}' handler '{self._label}': {message}")
        logger.warning(
            "model '%s' handler '%s' answered %s: %s", self.name, self._label, code, message
        )
        return Reply(  # TorchServe names every failure of a handler InternalServerException
            {"code": code, "type": "InternalServerException", "message": message},
            code,
            {},
            "application/json",
        )
