"""The data plane: the one entry every front end calls.

A front end turns its wire format into a :class:`podium.types.Call`; the data plane finds the
model version, turns the protocol's payload into what the model's first parameter asks for, runs
it through the version's scheduler, and turns the result into the protocol's neutral form:
an :class:`InferenceResponse` for OIP, the model's own value for Truss and TorchServe (the front
end serialises it). The mapping is documented cell by cell in ``docs/protocols.md``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, cast

import msgspec
import numpy as np

from . import __version__, codecs
from .errors import InvalidInput, UnsupportedRepresentation
from .runtime._scheduler import SequenceScheduling
from .runtime.registry import ModelState, ModelVersion, Registry
from .types import (
    Call,
    InferenceRequest,
    InferenceResponse,
    InputKind,
    Reply,
    SequenceRef,
    WireProtocol,
)

__all__ = ["DataPlane", "ModelVersion"]

EXTENSIONS = ["model_repository", "generate", "infer_stream", "binary_tensor_data"]


class DataPlane:
    """Inference, health and metadata over the registry, for every front end."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    # -- health and metadata -------------------------------------------------------------

    def live(self) -> bool:
        return True

    def ready(self) -> bool:
        return self.registry.all_ready()

    def model_ready(self, name: str, version: str | None = None) -> bool:
        """Whether that version is ready; ``NotFound`` if it does not exist."""
        return self.registry.get(name, version).state is ModelState.READY

    def server_metadata(self) -> dict[str, Any]:
        return {"name": "podium", "version": __version__, "extensions": list(EXTENSIONS)}

    def model_metadata(self, name: str, version: str | None = None) -> dict[str, Any]:
        mv = self.registry.get(name, version)
        meta = dict(mv.config.model_metadata)
        out: dict[str, Any] = {
            "name": mv.name,
            "versions": [v.version for v in self.registry.versions(name) if v.version],
            "platform": meta.pop("platform", "podium"),
            "inputs": meta.pop("inputs", []),
            "outputs": meta.pop("outputs", []),
        }
        if mv.version:
            out["version"] = mv.version
        state = {"state": mv.state.value}
        if mv.reason:
            state["reason"] = mv.reason
        out["parameters"] = {**meta, **state}
        return out

    # -- inference -----------------------------------------------------------------------

    async def infer(self, call: Call, mv: ModelVersion | None = None) -> Any:
        """Run ``call`` to completion. A streaming model's items are gathered into one result.

        For a model with ``sequence_batching`` the call runs in its sequence: ``call.sequence``
        (a new sequence when the front end found none) comes back with the id used and whether
        the sequence ended, for the front end to return."""
        if mv is None:
            mv = self.registry.ready(call.model, call.version)
        inputs, oip = self._inputs(mv, call)
        sequence = self._sequence(mv, call)
        if mv.instance.streaming and not mv.instance.predict_on_infer:
            async with contextlib.aclosing(self._stream(mv, inputs, call, sequence)) as stream:
                items = [item async for item in stream]
            return self._gather(mv, call, items, oip)
        if sequence is None:
            result = await mv.scheduler.infer(inputs, call.request)
        else:
            scheduler = cast(SequenceScheduling, mv.scheduler)
            result = await scheduler.infer_in(sequence, inputs, call.request)
        if call.protocol is WireProtocol.OIP:
            result = self._oip_response(mv, result, oip, sequence)
        if isinstance(result, InferenceResponse) and result.parameters:
            _take_headers(call, result)
        return result

    async def stream(self, call: Call, mv: ModelVersion | None = None) -> AsyncGenerator[Any, None]:
        """The items of ``call``; a non-streaming model yields its one result."""
        if mv is None:
            mv = self.registry.ready(call.model, call.version)
        inputs, oip = self._inputs(mv, call)
        sequence = self._sequence(mv, call)
        items = self._stream(mv, inputs, call, sequence)
        try:
            async for item in items:
                if call.protocol is WireProtocol.OIP:
                    yield self._oip_response(mv, item, oip, sequence)
                else:
                    yield item
        finally:
            await items.aclose()

    @staticmethod
    def _sequence(mv: ModelVersion, call: Call) -> SequenceRef | None:
        if not mv.config.sequence_batching:
            return None
        if call.sequence is None:
            call.sequence = SequenceRef()  # no id sent: a new sequence
        return call.sequence

    @staticmethod
    def _stream(
        mv: ModelVersion, inputs: Any, call: Call, sequence: SequenceRef | None
    ) -> AsyncGenerator[Any, None]:
        if sequence is None:
            return mv.scheduler.stream(inputs, call.request)
        return cast(SequenceScheduling, mv.scheduler).stream_in(sequence, inputs, call.request)

    async def stream_inputs(
        self,
        mv: ModelVersion,
        calls: AsyncIterator[Call],
        protocol: WireProtocol,
        request: Any = None,
    ) -> AsyncGenerator[Any, None]:
        """A stream of calls to one model that reads a stream of requests (its
        ``consumes_stream``): each call's payload converted as for :meth:`infer` as it arrives,
        the model's answers as it produces them (OIP: each an :class:`InferenceResponse`)."""

        async def inputs() -> AsyncGenerator[Any, None]:
            async for call in calls:
                yield self._inputs(mv, call)[0]

        async with contextlib.aclosing(mv.scheduler.stream_inputs(inputs(), request)) as items:
            async for item in items:
                yield self._oip_response(mv, item, None) if protocol is WireProtocol.OIP else item

    def resolve(self, model: str, version: str | None = None) -> ModelVersion:
        """The ready version a call addresses; ``NotFound`` / ``ModelNotReady`` otherwise.

        Front ends call this before reading the body, then look at what the model asks for
        (``instance.needs_inputs``, ``needs_request``, ``streaming``) and pass it on to
        :meth:`infer` / :meth:`stream`, so one call costs one lookup.
        """
        return self.registry.ready(model, version)

    # -- conversions -----------------------------------------------------------------------

    def _inputs(self, mv: ModelVersion, call: Call) -> tuple[Any, InferenceRequest | None]:
        inst = mv.instance
        if not inst.needs_inputs:
            return None, None
        raw = call.payload
        kind = inst.input_kind
        if call.protocol is WireProtocol.OIP:
            request: InferenceRequest = raw
            if kind is InputKind.OIP_REQUEST:
                return request, request
            if kind is InputKind.RAW:
                return _builtins(request), request
            decoded = codecs.decode_request(request)
            if kind is InputKind.SCHEMA:
                return inst.validate(codecs.inputs_as_json(decoded)), request
            return decoded, request
        if kind is InputKind.OIP_REQUEST:
            try:
                if isinstance(raw, bytes | str):
                    return msgspec.json.decode(raw, type=InferenceRequest), None
                return msgspec.convert(raw, InferenceRequest), None
            except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                raise InvalidInput(f"model '{mv.name}' takes an inference request: {exc}") from exc
        if kind is InputKind.SCHEMA:
            return inst.validate(raw), None
        return raw, None

    def _oip_response(
        self,
        mv: ModelVersion,
        result: Any,
        request: InferenceRequest | None,
        sequence: SequenceRef | None = None,
    ) -> InferenceResponse:
        requested = request.outputs if request is not None else None
        try:
            outputs = codecs.encode_outputs(result, requested)
        except UnsupportedRepresentation as exc:
            raise UnsupportedRepresentation(
                f"model '{mv.name}' returned a value the Open Inference Protocol cannot carry: "
                f"{exc.message}"
            ) from exc
        request_id = request.id if request is not None else None
        if isinstance(result, InferenceResponse):
            # The model's own response, completed: name, version and the request's id.
            result.outputs = outputs
            result.model_name = mv.name
            result.model_version = mv.version
            if request_id is not None:
                result.id = request_id
            response = result
        else:
            response = InferenceResponse(
                outputs=outputs, model_name=mv.name, model_version=mv.version, id=request_id
            )
        if sequence is not None and sequence.id is not None:
            # Every response of a sequence names it (Triton's sequence parameters).
            response.parameters = {**(response.parameters or {}), "sequence_id": sequence.id}
            if sequence.ended:
                response.parameters["sequence_end"] = True
        return response

    def _gather(
        self, mv: ModelVersion, call: Call, items: list[Any], request: InferenceRequest | None
    ) -> Any:
        if call.protocol is WireProtocol.OIP:
            parts = [self._oip_response(mv, item, request).outputs for item in items]
            return self._oip_response(mv, codecs.concat_outputs(parts), request, call.sequence)
        first = next((i for i in items if isinstance(i, Reply)), None)
        if first is not None:  # the first reply's status and headers stand for the whole
            bodies = [i.body if isinstance(i, Reply) else i for i in items]
            return Reply(_joined(bodies), first.status, dict(first.headers), first.content_type)
        return _joined(items)


def _builtins(request: InferenceRequest) -> Any:
    """An OIP request as JSON-like data (``InputKind.RAW``): numpy data as lists; ``bytes`` stay
    ``bytes`` (BYTES tensors that came raw over gRPC or the binary extension), as MLServer's
    runtimes see them; from a JSON body they are already text."""
    return msgspec.to_builtins(request, builtin_types=(bytes, bytearray), enc_hook=_plain)


def _plain(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, memoryview):
        return obj.tobytes()
    raise TypeError(f"{type(obj).__name__} is not JSON-like")


def _joined(items: list[Any]) -> Any:
    """Gathered items as one value: text joined, bytes joined, anything else the list."""
    if items and all(isinstance(i, str) for i in items):
        return "".join(items)
    if items and all(isinstance(i, bytes) for i in items):
        return b"".join(items)
    return items


def _take_headers(call: Call, response: InferenceResponse) -> None:
    """Move the ``headers`` parameter of a model's response (MLServer's convention for response
    headers) out of the body and onto ``call``, for the front end to send as headers."""
    parameters = response.parameters
    assert parameters is not None
    headers = parameters.get("headers")
    if not isinstance(headers, dict):
        return
    del parameters["headers"]
    if not parameters:
        response.parameters = None
    call.headers = {str(key): str(value) for key, value in headers.items() if value is not None}
