"""TorchServe's gRPC inference API over the data plane: ``InferenceAPIsService``.

Wire-compatible with TorchServe's ``inference.proto`` (``protos/torchserve_inference.proto``):
``Ping``, ``Predictions``, ``StreamPredictions`` (one response per item a generator model yields)
and ``StreamPredictions2`` (many requests on one stream, answered in order, errors in-band in the
response's ``status``, the stream kept open). The ``input`` map reaches the model as the
TorchServe HTTP body would, and results are encoded as ``POST /predictions`` encodes them; the
mapping is documented in ``docs/protocols.md`` ("TorchServe gRPC").
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import grpc
import msgspec

from ... import codecs
from ...config import SETTINGS
from ...dataplane import DataPlane, ModelVersion
from ...errors import InvalidInput, ModelError, ModelStatus, UnsupportedRepresentation
from ...types import (
    Call,
    InputKind,
    Reply,
    SequenceOutcome,
    SequenceRef,
    WireProtocol,
    is_response,
)
from .. import _sequences
from .._headers import grpc_metadata
from ._call import GrpcCall
from ._errors import abort_with, guarded, status_of
from ._pool import message_class
from ._server import Service

__all__ = [
    "BODY_NAMES",
    "SEQUENCE_HEADER",
    "SERVICE",
    "TorchServeInference",
    "payload_of",
    "prediction_of",
]

SERVICE = "org.pytorch.serve.grpc.inference.InferenceAPIsService"

#: The header that carries a request's ``sequence_id`` to the model's request object: the name
#: TorchServe's backend gives it (``ts_request_sequence_id``).
SEQUENCE_HEADER = b"ts_request_sequence_id"

#: The ``input`` entry names TorchServe clients give the body of a request.
BODY_NAMES = frozenset({"data", "body"})

Empty: Any = message_class("google.protobuf.Empty")
Status: Any = message_class("google.rpc.Status")
PredictionsRequest: Any = message_class("org.pytorch.serve.grpc.inference.PredictionsRequest")
PredictionResponse: Any = message_class("org.pytorch.serve.grpc.inference.PredictionResponse")
TorchServeHealthResponse: Any = message_class(
    "org.pytorch.serve.grpc.inference.TorchServeHealthResponse"
)

_json = msgspec.json.Encoder(enc_hook=codecs.json_default)
# The JSON of TorchServe's (and Podium's HTTP) /ping, byte for byte.
#: The JSON text of each health TorchServe's ping answers.
_HEALTH = {
    h: _json.encode({"status": h}).decode() for h in ("Healthy", "Partial Healthy", "Unhealthy")
}


def payload_of(inputs: Mapping[str, bytes]) -> Any:
    """What a model receives for a request's ``input`` map: the TorchServe HTTP body it stands for.

    gRPC carries no content type, so entries arrive as an HTTP body with a non-JSON content type
    does: as ``bytes``. One entry named ``data`` or ``body`` is the body; an empty map is an
    empty body; anything else is a ``dict`` of entry name to ``bytes``.
    """
    if len(inputs) == 1:
        ((name, value),) = inputs.items()
        if name in BODY_NAMES:
            return value
    if not inputs:
        return b""
    return dict(inputs)


def prediction_of(mv: ModelVersion, value: Any) -> bytes:
    """A model's value as ``PredictionResponse.prediction``, as ``POST /predictions`` sends it:
    ``bytes`` as they are, ``str`` as UTF-8, anything else as JSON; a :class:`Reply`'s body. A
    :class:`Reply` with an HTTP error status (400 and up) raises
    :class:`~podium.errors.ModelStatus` instead: the call ends with the gRPC code the one table
    in ``errors.py`` gives that status, and the body as its message."""
    if isinstance(value, Reply):
        prediction = prediction_of(mv, value.body)
        if value.status >= 400:
            text = prediction.decode("utf-8", "replace")
            raise ModelStatus(f"{mv.label} answered HTTP {value.status}: {text}", value.status)
        return prediction
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if is_response(value):
        body = getattr(value, "body", None)
        if not isinstance(body, bytes):  # a StreamingResponse: stream with a generator instead
            raise UnsupportedRepresentation(
                f"{mv.label} returned a streaming starlette Response, which TorchServe gRPC "
                "cannot carry; yield the chunks from a generator predict instead"
            )
        return body
    try:
        return _json.encode(value)
    except TypeError as exc:
        raise UnsupportedRepresentation(
            f"{mv.label} returned a value that cannot be encoded as JSON: {exc}"
        ) from exc


# Headers gRPC owns itself, or that describe the HTTP body rather than the model's answer.
_NOT_METADATA = frozenset({"content-length", "content-type", "transfer-encoding", "te"})


def metadata_of(value: Any) -> tuple[tuple[str, str | bytes], ...]:
    """The headers a model set on a starlette ``Response`` it returned (or on a :class:`Reply`),
    as gRPC metadata (what metadata cannot carry is left out, with a warning; repeated names,
    set-cookie, stay repeated)."""
    if isinstance(value, Reply):
        pairs: Any = value.headers.items()
    elif is_response(value):
        pairs = ((k.decode("latin-1"), v.decode("latin-1")) for k, v in value.raw_headers)
    else:
        return ()
    return grpc_metadata((k, v) for k, v in pairs if k.lower() not in _NOT_METADATA)


async def _send_headers(context: grpc.aio.ServicerContext, value: Any) -> bool:
    """Response headers set by the model go back as the call's initial metadata: whether it
    set any (and they were sent: a call sends them once)."""
    metadata = metadata_of(value)
    if metadata:
        await context.send_initial_metadata(metadata)
    return bool(metadata)


class TorchServeInference:
    """``org.pytorch.serve.grpc.inference.InferenceAPIsService`` over one data plane."""

    def __init__(
        self, dataplane: DataPlane, *, sequence_header: str = SETTINGS["sequence_header"].default
    ) -> None:
        self.dataplane = dataplane
        self.sequence_header = sequence_header
        self._flags = _sequences.flag_names(sequence_header)  # (start names, end names)

    def service(self) -> Service:
        """The service's method handlers, for :class:`GrpcServer`."""
        read = PredictionsRequest.FromString
        write = PredictionResponse.SerializeToString
        methods = {
            "Ping": grpc.unary_unary_rpc_method_handler(
                self.ping,
                request_deserializer=Empty.FromString,
                response_serializer=TorchServeHealthResponse.SerializeToString,
            ),
            "Predictions": grpc.unary_unary_rpc_method_handler(
                guarded(self.predictions, _PREDICTIONS),
                request_deserializer=read,
                response_serializer=write,
            ),
            "StreamPredictions": grpc.unary_stream_rpc_method_handler(
                self.stream_predictions, request_deserializer=read, response_serializer=write
            ),
            "StreamPredictions2": grpc.stream_stream_rpc_method_handler(
                self.stream_predictions2, request_deserializer=read, response_serializer=write
            ),
        }
        return Service(
            SERVICE,
            methods,
            healthy=self.dataplane.ready,
            protocol=WireProtocol.TORCHSERVE_GRPC.value,
        )

    # -- the four RPCs ---------------------------------------------------------------------

    async def ping(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        # Always OK, as TorchServe's Ping: the health is in the JSON, as on HTTP /ping.
        return TorchServeHealthResponse(health=_HEALTH[self.dataplane.torchserve_health()])

    async def predictions(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        mv, call = self._start(request, lambda: GrpcCall(context, _PREDICTIONS))
        caps = mv.instance.capabilities
        if caps.streaming and caps.input_kind is InputKind.WIRE:
            return await self._first(mv, call, request, context)
        answer = await self.dataplane.infer(call, mv)
        response = _answer(mv, answer.value, request, answer.sequence)
        await _send_headers(context, answer.value)
        return response

    async def _first(
        self, mv: ModelVersion, call: Call, request: Any, context: grpc.aio.ServicerContext
    ) -> Any:
        """Unary ``Predictions`` of a TorchServe handler that sends intermediate responses (or
        streams by continuous batching): the first item, as TorchServe 0.12's frontend answers
        (it completes the call at the handler's first response and drops the rest). Closing
        the stream stops the handler at its next send."""
        async with contextlib.aclosing(self.dataplane.stream(call, mv)) as items:
            async for item in items:
                response = _answer(mv, item, request, items.sequence)
                await _send_headers(context, item)
                return response
        raise ModelError(f"{mv.label} sent no response")  # a stream that ended with nothing

    async def stream_predictions(
        self, request: Any, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:
        try:
            mv, call = self._start(request, lambda: GrpcCall(context, _STREAM))
            sent = False
            async with contextlib.aclosing(self.dataplane.stream(call, mv)) as items:
                async for item in items:
                    response = _answer(mv, item, request, items.sequence)
                    sent = sent or await _send_headers(context, item)
                    yield response
        except Exception as exc:
            await abort_with(context, exc, _STREAM)

    async def stream_predictions2(
        self, requests: AsyncIterator[Any], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:
        shared = GrpcCall(context, _STREAM2)  # in the call's own task: it sees cancellation
        # One request at a time: answers come back in request order, and a sequence's requests
        # reach the model in the order the client sent them. A generator model's items each
        # come back as a response, as TorchServe sends its intermediate responses.
        messages = aiter(requests)
        while True:
            try:
                request = await anext(messages)
            except StopAsyncIteration:
                return
            except InvalidInput as exc:  # a message that does not parse: in-band, and go on
                yield _failed(exc, None)
                continue
            except Exception as exc:  # reading the stream failed: the call ends
                await abort_with(context, exc, _STREAM2)
            try:
                mv, call = self._start(request, lambda: shared)
                async with contextlib.aclosing(self.dataplane.stream(call, mv)) as items:
                    async for item in items:
                        yield _answer(mv, item, request, items.sequence)
            except Exception as exc:  # in-band: this request failed, the stream goes on
                yield _failed(exc, request)

    # -- pieces ----------------------------------------------------------------------------

    def _start(self, request: Any, grpc_call: Callable[[], GrpcCall]) -> tuple[ModelVersion, Call]:
        """Find the model (NOT_FOUND / UNAVAILABLE before the input is touched); build the call
        (the input mapped only if the model takes it, a request object only if it takes one)."""
        if not request.model_name:
            raise InvalidInput("model_name is required")
        version = request.model_version or None
        mv = self.dataplane.resolve(request.model_name, version)
        caps = mv.instance.capabilities
        payload = raw = None
        entries: Mapping[str, bytes] = request.input
        as_sent = caps.input_kind in (InputKind.RAW, InputKind.WIRE)
        starts, ends = self._flags
        if mv.config.sequence_batching and not as_sent:
            # A sequence's start/end flags are the protocol's, not the model's input.
            flags = (*starts, *ends)
            if any(name in entries for name in flags):
                entries = {k: v for k, v in entries.items() if k not in flags}
        if caps.needs_inputs or caps.needs_request:
            payload = payload_of(entries)
        if caps.needs_request:
            # The body a model reads itself is the body entry; other maps have no one body.
            raw = grpc_call().request(payload if isinstance(payload, bytes) else b"")
            if request.HasField("sequence_id"):
                header = (SEQUENCE_HEADER, request.sequence_id.encode("latin-1", "replace"))
                raw.scope["headers"].append(header)
        if as_sent:
            payload = dict(request.input)  # the entries as sent (TorchServe handlers' rows)
        call = Call(
            request.model_name,
            version,
            WireProtocol.TORCHSERVE_GRPC,
            payload if caps.needs_inputs else None,
            raw,
        )
        if mv.config.sequence_batching:
            # The id in its field; start and end as entries of the input map, as TorchServe
            # reads them (its names, or Podium's). No id: a new sequence, whose id every
            # response then carries.
            found = request.input
            call.sequence = SequenceRef(
                id=request.sequence_id or None if request.HasField("sequence_id") else None,
                start=any(_sequences.flag(found.get(k)) for k in starts),
                end=any(_sequences.flag(found.get(k)) for k in ends),
            )
        return mv, call


_PREDICTIONS = f"/{SERVICE}/Predictions"
_STREAM = f"/{SERVICE}/StreamPredictions"
_STREAM2 = f"/{SERVICE}/StreamPredictions2"


def _failed(exc: BaseException, request: Any) -> Any:
    """The in-band answer of ``StreamPredictions2`` to a request that failed (``None``: one
    that did not even parse)."""
    code, message = status_of(exc, _STREAM2)
    response = PredictionResponse(status=Status(code=code.value[0], message=message))
    if request is not None and request.HasField("sequence_id"):
        response.sequence_id = request.sequence_id
    return response


def _answer(mv: ModelVersion, value: Any, request: Any, sequence: SequenceOutcome | None) -> Any:
    response = PredictionResponse(prediction=prediction_of(mv, value))
    if sequence is not None:
        response.sequence_id = sequence.id  # the sequence's, also one the server made
    elif request.HasField("sequence_id"):
        response.sequence_id = request.sequence_id
    return response
