"""The Open Inference Protocol's gRPC service, ``inference.GRPCInferenceService``.

A thin adapter over the data plane: each RPC turns its message into a :class:`podium.types.Call`
(or a call on the data plane's model repository), and the answer back into a message (tensor
conversions in :mod:`._tensors`). Every failure ends in :func:`._errors.abort_with`.

``ModelStatistics`` is the statistics extension (Triton's), from the data plane's counters.

The shared memory RPCs (``SystemSharedMemory*``, ``CudaSharedMemory*``) are in :mod:`._memory`.

The repository RPCs: ``RepositoryIndex`` is open; ``RepositoryModelLoad`` / ``Unload`` change what
is served, so the data plane's model repository refuses them here (``PERMISSION_DENIED``, naming
the management API) unless the server runs with ``--model-control inference``; their parameters
are read as on REST (``server/_repository.py``). ``ModelConfig`` answers Triton's ``ModelConfig``
message (``protos/model_config.proto``), filled from the data plane's struct.

``ModelStreamInfer`` answers every request on the stream, in the order the requests came, with
one response per item (one for a non-streaming model). A model that reads a stream of requests
(``consumes_stream``: an MLServer runtime's ``predict_stream``) instead gets the whole stream, if
its first request names it: one ``predict_stream`` reads every request (each must name the same
model and version) and each of its answers is one response. Up to :data:`STREAM_WINDOW` requests of a
stream run at once, so that a client streaming many requests keeps the model busy (and a batching
model batches them); each buffers at most :data:`STREAM_BUFFER` responses until the responses
before it are sent. Two framings (``--grpc-stream-format``):

- ``triton`` (default; what ``tritonclient`` and perf_analyzer read), as Triton's
  ``grpc_service.proto``: each message is a ``ModelStreamInferResponse``; an error for one
  request is sent in-band (``error_message``) and the stream stays open. Every response carries
  Triton's parameter ``triton_final_response``: true on a plain model's one response (and on an
  in-band error), false on each item of a generator model, whose end is known only once it has
  ended; a request with the parameter ``triton_enable_empty_final_response`` then gets, after
  the last item, an empty response whose ``triton_final_response`` is true, as from Triton's
  decoupled models.
- ``mlserver``, as MLServer's ``dataplane.proto``: each message is a bare ``ModelInferResponse``
  (what MLServer's and KServe's stubs read); an error ends the stream with its status.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any

import grpc
import msgspec
from google.protobuf import json_format

from ...config import SETTINGS
from ...dataplane import DataPlane, ModelVersion, StatisticsResponse
from ...errors import InvalidInput, NotFound, PodiumError
from ...types import Call, InferenceResponse, WireProtocol
from .. import _repository, _sequences
from .._access import adopt, with_request_id
from .._headers import grpc_metadata
from . import _memory
from ._call import GrpcCall
from ._errors import abort_with, guarded, status_of
from ._pool import message_class
from ._server import Service
from ._tensors import (
    ModelInferRequest,
    ModelInferResponse,
    fill_parameters,
    parameters_of,
    to_message,
    to_request,
    uses_shared_memory,
)

__all__ = ["SERVICE", "OipService"]

SERVICE = "inference.GRPCInferenceService"

#: Requests of one ModelStreamInfer stream that run at once.
STREAM_WINDOW = 16
#: Responses one request of a stream buffers while earlier requests are still being answered.
STREAM_BUFFER = 16

_FINAL_ASKED = "triton_enable_empty_final_response"
_SEQUENCE_ID = "sequence_id"  # Triton's sequence parameter: the request may have to wait
_FINAL = "triton_final_response"

# Where the model's request object says it came from.
_INFER_PATH = f"/{SERVICE}/ModelInfer"
_STREAM_PATH = f"/{SERVICE}/ModelStreamInfer"

_m = message_class
ModelStreamInferResponse: Any = _m("inference.ModelStreamInferResponse")


#: The last entry of a request's lane: all its responses were queued.
_END = object()


class _Failure:
    """A request of a stream failed (``fatal``: the stream itself cannot go on)."""

    __slots__ = ("exc", "message", "fatal")

    def __init__(self, exc: BaseException, message: Any = None, *, fatal: bool = False) -> None:
        self.exc = exc
        self.message = message
        self.fatal = fatal


def _unary(handler: Callable[[Any, Any], Awaitable[Any]], rpc: str) -> grpc.RpcMethodHandler:
    """The unary method handler of ``rpc`` (its messages ``inference.<rpc>Request`` and
    ``...Response``), whose every failure goes through :func:`abort_with`."""
    return grpc.unary_unary_rpc_method_handler(
        guarded(handler, f"/{SERVICE}/{rpc}"),
        request_deserializer=_m(f"inference.{rpc}Request").FromString,
        response_serializer=_m(f"inference.{rpc}Response").SerializeToString,
    )


class OipService:
    """``inference.GRPCInferenceService`` over one :class:`DataPlane`.

    ``stream_format``: the framing of ``ModelStreamInfer``, ``"triton"`` or ``"mlserver"`` (see
    the module docstring). ``output_contents``: ``"request"`` answers with
    ``raw_output_contents`` when the request used ``raw_input_contents`` and with typed contents
    otherwise (MLServer's and KServe's rule, what the KServe SDK's ``.data`` reads); ``"raw"``
    always answers raw, as Triton does (what clients that send typed contents but read
    ``raw_output_contents`` need, such as Triton's explicit-content examples). The server
    settings' table checks both (``--grpc-stream-format``, ``--grpc-output-contents``).
    """

    def __init__(
        self,
        dataplane: DataPlane,
        *,
        stream_format: str = SETTINGS["grpc_stream_format"].default,
        output_contents: str = SETTINGS["grpc_output_contents"].default,
    ) -> None:
        self.dataplane = dataplane
        self.triton = stream_format == "triton"
        self.raw = output_contents == "raw"

    def service(self) -> Service:
        """The service's method handlers, for :class:`GrpcServer`."""
        stream_response = ModelStreamInferResponse if self.triton else ModelInferResponse
        unary = {
            "ServerLive": self.server_live,
            "ServerReady": self.server_ready,
            "ModelReady": self.model_ready,
            "ServerMetadata": self.server_metadata,
            "ModelMetadata": self.model_metadata,
            "ModelConfig": self.model_config,
            "ModelInfer": self.model_infer,
            "RepositoryIndex": self.repository_index,
            "RepositoryModelLoad": self.repository_model_load,
            "RepositoryModelUnload": self.repository_model_unload,
            "ModelStatistics": self.model_statistics,
        }
        methods = {rpc: _unary(handler, rpc) for rpc, handler in unary.items()}
        methods["ModelStreamInfer"] = grpc.stream_stream_rpc_method_handler(
            self.model_stream_infer,
            request_deserializer=ModelInferRequest.FromString,
            response_serializer=stream_response.SerializeToString,
        )
        methods.update(_memory.methods(self.dataplane, _unary))
        served = {} if self.triton else {"ModelStreamInfer": "inference.ModelInferResponse"}
        return Service(
            SERVICE,
            methods,
            healthy=self.dataplane.ready,
            served_outputs=served,
            protocol=WireProtocol.OIP_GRPC.value,
        )

    # -- health and metadata ---------------------------------------------------------------

    async def server_live(self, message: Any, context: Any) -> Any:
        return _m("inference.ServerLiveResponse")(live=self.dataplane.live())

    async def server_ready(self, message: Any, context: Any) -> Any:
        return _m("inference.ServerReadyResponse")(ready=self.dataplane.ready())

    async def model_ready(self, message: Any, context: Any) -> Any:
        try:
            ready = self.dataplane.model_ready(message.name, message.version or None)
        except NotFound:
            # As Triton: an unknown model or version is not ready (tritonclient's
            # is_model_ready then returns False instead of raising).
            ready = False
        return _m("inference.ModelReadyResponse")(ready=ready)

    async def server_metadata(self, message: Any, context: Any) -> Any:
        meta = self.dataplane.server_metadata()
        return _m("inference.ServerMetadataResponse")(
            name=meta.name, version=meta.version, extensions=meta.extensions
        )

    async def model_metadata(self, message: Any, context: Any) -> Any:
        meta = self.dataplane.model_metadata(message.name, message.version or None)
        response = _m("inference.ModelMetadataResponse")(
            name=meta.name,
            versions=meta.versions,
            platform=str(meta.platform),
        )
        _tensors_metadata(response.inputs, meta.inputs)
        _tensors_metadata(response.outputs, meta.outputs)
        fill_parameters(response.parameters, meta.parameters or {})
        return response

    async def model_config(self, message: Any, context: Any) -> Any:
        config = self.dataplane.model_config(message.name, message.version or None)
        response = _m("inference.ModelConfigResponse")()
        # The struct's JSON form is protobuf's JSON of Triton's ModelConfig: one source for both.
        json_format.ParseDict(msgspec.to_builtins(config), response.config)
        return response

    async def model_statistics(self, message: Any, context: Any) -> Any:
        """The statistics extension: every model (no name), one model (no version), one
        version, as Triton answers it."""
        found = self.dataplane.statistics(message.name or None, message.version or None)
        response = _m("inference.ModelStatisticsResponse")()
        # The structs' JSON form is protobuf's JSON of Triton's message: one source for both.
        json_format.ParseDict(msgspec.to_builtins(StatisticsResponse(found)), response)
        return response

    # -- inference -------------------------------------------------------------------------

    def _call(self, message: Any, grpc_call: Callable[[], GrpcCall]) -> tuple[Call, ModelVersion]:
        """The version a request addresses and the call for it (inputs decoded only if the
        model takes them, a request object only if it takes one)."""
        version = message.model_version or None
        mv = self.dataplane.resolve(message.model_name, version, WireProtocol.OIP_GRPC)
        caps = mv.instance.capabilities
        try:
            payload = to_request(message) if caps.needs_inputs else None
        except PodiumError as exc:
            self.dataplane.refused(mv, WireProtocol.OIP_GRPC, exc)
            raise
        request = grpc_call().request() if caps.needs_request else None
        call = Call(message.model_name, version, WireProtocol.OIP_GRPC, payload, request)
        if mv.config.sequence_batching:  # Triton's sequence parameters
            call.sequence = _sequences.from_parameters(parameters_of(message.parameters))
        return call, mv

    async def model_infer(self, message: Any, context: Any) -> Any:
        adopt(message.id, context)  # the request's id, if the metadata named none
        call, mv = self._call(message, lambda: GrpcCall(context, _INFER_PATH))
        answer = await self.dataplane.infer(call, mv)
        sequence = answer.sequence
        if answer.headers or (sequence is not None and sequence.headers):
            # Response headers the model set, as trailing metadata (as MLServer sends them),
            # and the request's id (set before, and replaced here).
            by_model = sequence.headers if sequence is not None else None
            context.set_trailing_metadata(with_request_id(grpc_metadata(answer.headers, by_model)))
        return _response(answer.value, message, self.raw)

    async def model_stream_infer(self, requests: AsyncIterator[Any], context: Any) -> None:
        """Answer every request of the stream in order, or hand the whole stream to a model that
        reads one; see the module's docstring."""
        shared = GrpcCall(context, _STREAM_PATH)  # in the call's own task: it sees cancellation
        messages = aiter(requests)
        try:
            first = await anext(messages)
        except StopAsyncIteration:
            return
        except Exception as exc:
            await abort_with(context, exc, _STREAM_PATH)
        consumer = self._consumer(first)
        if consumer is not None:
            await self._consume(consumer, first, messages, context, shared)
            return
        requests = _chain(first, messages)
        lanes: asyncio.Queue[asyncio.Queue[Any] | None] = asyncio.Queue(STREAM_WINDOW)
        running: set[asyncio.Task[None]] = set()
        loop = asyncio.get_running_loop()
        reader = loop.create_task(self._read(requests, lanes, running, lambda: shared))
        try:
            while (lane := await lanes.get()) is not None:
                while (item := await lane.get()) is not _END:
                    if isinstance(item, _Failure):
                        if item.fatal or not self.triton:
                            await abort_with(context, item.exc, _STREAM_PATH)
                        _, text = status_of(item.exc, _STREAM_PATH)
                        await context.write(_stream_error(text, item.message))
                        break
                    await context.write(item)
        except (asyncio.CancelledError, grpc.aio.AbortError):
            raise
        except Exception as exc:
            await abort_with(context, exc, _STREAM_PATH)
        finally:
            # The client left, the stream failed, or it ended: nothing may outlive the call.
            tasks = [reader, *running]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def _consumer(self, first: Any) -> ModelVersion | None:
        """The version the stream's first request addresses, if it reads a stream of requests."""
        try:
            mv = self.dataplane.resolve(
                first.model_name, first.model_version or None, WireProtocol.OIP_GRPC
            )
        except Exception:
            return None  # answered (with its error) as any request of the stream
        return mv if mv.instance.capabilities.consumes_stream else None

    async def _consume(
        self, mv: ModelVersion, first: Any, rest: AsyncIterator[Any], context: Any, call: GrpcCall
    ) -> None:
        """Every request of the stream to one model that reads them as a stream; each of its
        answers is one response. Every request must address that model and version."""
        version = first.model_version or None

        async def calls() -> AsyncIterator[Call]:
            async for message in _chain(first, rest):
                if message.model_name != first.model_name or (message.model_version or None) != (
                    version
                ):
                    raise InvalidInput(
                        f"{mv.label} reads the whole stream: every request of it must name that "
                        f"model and version, got model '{message.model_name}'"
                    )
                yield Call(message.model_name, version, WireProtocol.OIP_GRPC, to_request(message))

        raw = self.raw or bool(first.raw_input_contents)
        request = call.request() if mv.instance.capabilities.needs_request else None
        items = self.dataplane.stream_inputs(mv, calls(), WireProtocol.OIP_GRPC, request)
        try:
            async with contextlib.aclosing(items):
                async for response in items:
                    await context.write(self._framed(partial(to_message, response, raw), False))
            if self.triton and _asks_final(first):
                await context.write(_empty_final(first))
        except (asyncio.CancelledError, grpc.aio.AbortError):
            raise
        except Exception as exc:
            if not self.triton:
                await abort_with(context, exc, _STREAM_PATH)
            _, text = status_of(exc, _STREAM_PATH)  # in-band, as Triton; the stream is over
            await context.write(_stream_error(text, first))

    async def _read(
        self,
        requests: AsyncIterator[Any],
        lanes: asyncio.Queue[asyncio.Queue[Any] | None],
        running: set[asyncio.Task[None]],
        grpc_call: Callable[[], GrpcCall],
    ) -> None:
        """Start a task per request, in order, each with its own lane of responses.

        Back-pressure for sequences: a request that names one is started, and the next one read,
        only once it has its place in its sequence's queue, so a client writing a sequence's
        requests back to back waits while that queue is full instead of being refused (and the
        requests join the sequence in the stream's order)."""
        loop = asyncio.get_running_loop()
        try:
            async for message in requests:
                lane: asyncio.Queue[Any] = asyncio.Queue(STREAM_BUFFER)
                await lanes.put(lane)  # blocks while STREAM_WINDOW requests are pending
                joined = loop.create_future() if _SEQUENCE_ID in message.parameters else None
                task = loop.create_task(self._answer(message, lane, grpc_call, joined))
                running.add(task)
                task.add_done_callback(running.discard)
                if joined is not None:
                    await joined  # resolved once it has its place, or by _answer as it ends
        except Exception as exc:
            failed: asyncio.Queue[Any] = asyncio.Queue()
            failed.put_nowait(_Failure(exc, fatal=True))
            await lanes.put(failed)
        else:
            await lanes.put(None)

    async def _answer(
        self,
        message: Any,
        lane: asyncio.Queue[Any],
        grpc_call: Callable[[], GrpcCall],
        joined: asyncio.Future[None] | None = None,
    ) -> None:
        """Queue the responses to one request of a stream, then ``_END`` (or a failure).
        ``joined``: the request names a sequence; it waits for room in the sequence's queue and
        resolves ``joined`` once it has its place (here too when it ends before)."""
        try:
            call, mv = self._call(message, grpc_call)
            if joined is not None:
                if call.sequence is not None:
                    call.sequence.joined = joined
                else:  # not a sequence model: nothing to wait for
                    joined.set_result(None)
            # A generator model is Triton's decoupled model: its last item is known only after
            # it, so no item is final; a plain model's one response is.
            decoupled = mv.instance.capabilities.streaming
            async with contextlib.aclosing(self.dataplane.stream(call, mv)) as items:
                async for response in items:
                    fill = partial(_response, response, message, self.raw)
                    await lane.put(self._framed(fill, not decoupled))
            if self.triton and decoupled and _asks_final(message):
                await lane.put(_empty_final(message))
            await lane.put(_END)
        except Exception as exc:
            await lane.put(_Failure(exc, message))
        finally:
            if joined is not None and not joined.done():
                joined.set_result(None)

    def _framed(self, fill: Callable[[Any], Any], final: bool) -> Any:
        """One response of a stream in the stream's framing: ``fill(into)`` writes the
        ``ModelInferResponse`` (into a new one when ``into`` is None); Triton's framing wraps it
        with its ``triton_final_response``."""
        if not self.triton:
            return fill(None)
        out = ModelStreamInferResponse()
        fill(out.infer_response)
        out.infer_response.parameters[_FINAL].bool_param = final
        return out

    # -- repository ------------------------------------------------------------------------

    async def repository_index(self, message: Any, context: Any) -> Any:
        response = _m("inference.RepositoryIndexResponse")()
        for model in self.dataplane.repository.index(ready_only=message.ready):
            response.models.add(
                name=model.name,
                version=model.version,
                state=_repository.STATE_NAMES[model.state],
                reason=model.reason,
            )
        return response

    async def repository_model_load(self, message: Any, context: Any) -> Any:
        name = _model_name(message, "RepositoryModelLoad")
        repository = self.dataplane.repository
        # Refused first: a client that may not load learns nothing else about its request.
        repository.check_control(f"loading model '{name}'", WireProtocol.OIP_GRPC)
        config = _repository.load_config(parameters_of(message.parameters) or {}, name)
        await repository.load(name, via=WireProtocol.OIP_GRPC, config=config)
        return _m("inference.RepositoryModelLoadResponse")(model_name=name, isLoaded=True)

    async def repository_model_unload(self, message: Any, context: Any) -> Any:
        name = _model_name(message, "RepositoryModelUnload")
        repository = self.dataplane.repository
        repository.check_control(f"unloading model '{name}'", WireProtocol.OIP_GRPC)
        _repository.unload_dependents(parameters_of(message.parameters) or {}, name)
        await repository.unload(name, via=WireProtocol.OIP_GRPC)
        return _m("inference.RepositoryModelUnloadResponse")(model_name=name, isUnloaded=True)


# -- helpers -----------------------------------------------------------------------------------


def _response(response: InferenceResponse, request: Any, raw: bool, into: Any = None) -> Any:
    """The data plane's answer as a message: raw contents when ``raw`` or the request used
    them."""
    if not isinstance(response, InferenceResponse):  # the data plane's OIP contract
        raise PodiumError(f"the data plane returned {type(response).__name__} for an OIP call")
    if response.id is None and request.id:
        response.id = request.id  # the request was not decoded (the model takes no inputs)
    # A request with tensors in shared memory comes from a Triton client: raw, as Triton.
    raw = raw or bool(request.raw_input_contents) or uses_shared_memory(request)
    return to_message(response, raw, into)


async def _chain(first: Any, rest: AsyncIterator[Any]) -> AsyncIterator[Any]:
    yield first
    async for message in rest:
        yield message


def _final(request: Any) -> Any:
    """The last, empty response to ``request``: it names the request."""
    out = ModelInferResponse(
        model_name=request.model_name, model_version=request.model_version, id=request.id
    )
    out.parameters[_FINAL].bool_param = True
    return out


def _stream_error(text: str, request: Any) -> Any:
    """Triton's in-band error; the response names the request it answers, and is its last."""
    if request is None:
        return ModelStreamInferResponse(error_message=text)
    return ModelStreamInferResponse(error_message=text, infer_response=_final(request))


def _empty_final(request: Any) -> Any:
    """Triton's empty final response to a request of a decoupled model that asked for it."""
    return ModelStreamInferResponse(infer_response=_final(request))


def _asks_final(message: Any) -> bool:
    return (parameters_of(message.parameters) or {}).get(_FINAL_ASKED) is True


def _model_name(message: Any, rpc: str) -> str:
    # KServe's load/unload requests carry the model name in field 1, Triton's repository_name.
    name = message.model_name or message.repository_name
    if not name:
        raise InvalidInput(f"{rpc} needs a model_name")
    return str(name)


def _tensors_metadata(target: Any, tensors: list[dict[str, Any]]) -> None:
    """The inputs or outputs of a model's metadata, added to ``target`` (each entry as
    ``ModelConfig`` checked it: a name, a datatype, a shape, parameters or none)."""
    for tensor in tensors:
        entry = target.add(name=tensor["name"], datatype=tensor["datatype"], shape=tensor["shape"])
        parameters = tensor.get("parameters")
        if parameters:
            fill_parameters(entry.parameters, parameters)
