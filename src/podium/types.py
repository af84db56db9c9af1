"""The names every other module speaks: read this first.

Open Inference Protocol (OIP v2) messages are plain ``msgspec`` structs, decoded straight from
JSON on the hot path. The seam between front ends and the data plane is one way each direction:
a front end hands the data plane a :class:`Call` (which the data plane never writes to) and gets
back an :class:`Answer` (or an :class:`AnswerStream`); health, metadata and the model repository
answer with the structs :class:`ServerMetadata`, :class:`ModelMetadata` and
:class:`RepositoryModel`. ``ModelInstance`` is what every model contract (native, MLServer,
TorchServe) adapts user code to. Nothing here knows about HTTP or gRPC.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import AsyncGenerator, Awaitable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import msgspec

__all__ = [
    "CACHE_NO_READ",
    "CACHE_NO_STORE",
    "DATATYPES",
    "END",
    "ENDPOINT_METHODS",
    "EmbedInputs",
    "Answer",
    "AnswerStream",
    "Call",
    "Capabilities",
    "Context",
    "Generation",
    "HandlerRoute",
    "InferenceRequest",
    "InferenceResponse",
    "InputKind",
    "MethodInputs",
    "ModelEndpoints",
    "MetadataTensor",
    "ModelInstance",
    "ModelMetadata",
    "ModelState",
    "OpenAIFace",
    "Parameters",
    "Protocol",
    "Reply",
    "RepositoryModel",
    "RequestInfo",
    "RequestInput",
    "RequestOutput",
    "ResponseOutput",
    "Returned",
    "SequenceOutcome",
    "SequenceRef",
    "ServerMetadata",
    "Signature",
    "SyncCalls",
    "TensorSpec",
    "WireInput",
    "WireProtocol",
    "current_request",
    "is_response",
    "request_id",
]

Parameters = dict[str, Any]

#: Every OIP tensor datatype.
DATATYPES = frozenset(
    {
        "BOOL",
        "UINT8",
        "UINT16",
        "UINT32",
        "UINT64",
        "INT8",
        "INT16",
        "INT32",
        "INT64",
        "FP16",
        "FP32",
        "FP64",
        "BF16",
        "BYTES",
    }
)


class RequestInput(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One input tensor. ``data`` is flat or nested, in row-major order."""

    name: str
    shape: list[int]
    datatype: str
    parameters: Parameters | None = None
    data: Any = None


class RequestOutput(msgspec.Struct, kw_only=True, omit_defaults=True):
    """An output the client asks for by name."""

    name: str
    parameters: Parameters | None = None


class InferenceRequest(msgspec.Struct, kw_only=True, omit_defaults=True):
    """An OIP inference request. Explicit ``null`` is accepted for every optional field."""

    inputs: list[RequestInput]
    id: str | None = None
    parameters: Parameters | None = None
    outputs: list[RequestOutput] | None = None


class ResponseOutput(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One output tensor."""

    name: str
    shape: list[int]
    datatype: str
    parameters: Parameters | None = None
    data: Any = None


class InferenceResponse(msgspec.Struct, kw_only=True, omit_defaults=True):
    """An OIP inference response. A model may return one; Podium fills in name and version."""

    outputs: list[ResponseOutput] = msgspec.field(default_factory=list)
    model_name: str = ""
    model_version: str | None = None
    id: str | None = None
    parameters: Parameters | None = None


class MetadataTensor(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A tensor description in model metadata."""

    name: str
    datatype: str
    shape: list[int]
    parameters: Parameters | None = None


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """A tensor a model declares (``model_metadata`` ``inputs`` / ``outputs``): its name, its OIP
    datatype and its shape, where ``-1`` is a dimension of any size."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    #: The dimensions of a fixed size, as (index, size) pairs: what a request's shape is held to.
    fixed: tuple[tuple[int, int], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        fixed = tuple((i, size) for i, size in enumerate(self.shape) if size != -1)
        object.__setattr__(self, "fixed", fixed)

    def describe(self) -> str:
        """``INPUT0 (FP32 [-1, 16])``: how error messages name it."""
        return f"{self.name} ({self.datatype} [{', '.join(map(str, self.shape))}])"


@dataclass(frozen=True, slots=True)
class Signature:
    """What a model declares of its tensors (``model_metadata`` in its config).

    ``inputs`` / ``outputs``: the declared tensors (empty: none declared; requests are then not
    checked against declarations). ``max_batch_size``: 0, or the largest first dimension a
    request may have, every declared shape then starting with that batch dimension (``-1``), as
    Triton's ``max_batch_size``. ``by_name``: the inputs by name.
    """

    inputs: tuple[TensorSpec, ...] = ()
    outputs: tuple[TensorSpec, ...] = ()
    max_batch_size: int = 0
    by_name: Mapping[str, TensorSpec] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_name", {spec.name: spec for spec in self.inputs})


class ModelState(enum.Enum):
    """Where a model version is in its life."""

    LOADING = "loading"
    READY = "ready"
    FAILED = "failed"
    UNLOADED = "unloaded"  # taken out of service on request (the repository's unload); loads again


class ServerMetadata(msgspec.Struct, kw_only=True):
    """The server's metadata (OIP ``GET /v2``, ``ServerMetadata``)."""

    name: str
    version: str
    extensions: list[str]


class ModelMetadata(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A model version's metadata (OIP ``GET /v2/models/{m}[/versions/{v}]``, ``ModelMetadata``).

    ``inputs`` / ``outputs`` are the tensor descriptions of the model's ``model_metadata`` as
    configured (each a mapping of ``name``, ``datatype``, ``shape`` and optional ``parameters``);
    ``parameters`` holds its other keys, the version's ``state`` and, when it has one, the
    ``reason`` it is not ready (MLServer's extension field). Encoded in this field order.
    """

    name: str
    versions: list[str]
    platform: Any
    inputs: list[Any]
    outputs: list[Any]
    version: str | None = None
    parameters: Parameters


class RepositoryModel(msgspec.Struct, frozen=True):
    """One model version in the repository index (OIP's repository extension): ``version``
    is ``"1"`` for an unversioned model, as its metadata lists it and Triton's index does."""

    name: str
    version: str
    state: ModelState
    reason: str = ""


_PROTOCOL_ORDER: list[str] = []


class WireProtocol(enum.Enum):
    """The front end a call came through: it decides the input and output forms, and it is the
    ``protocol`` label of logs and metrics (the member's value).

    ``oip``: the Open Inference Protocol's tensors (an ``InferenceRequest`` in, an
    ``InferenceResponse`` out), over REST or gRPC. ``grpc``: the call came over gRPC.
    """

    OIP_REST = "oip_rest"  # tensors: InferenceRequest in, InferenceResponse out
    OIP_GRPC = "oip_grpc"  # the same over gRPC (GRPCInferenceService)
    TRUSS = "truss"  # JSON in, JSON out (/v1/models/{m}:predict)
    TORCHSERVE_REST = "torchserve_rest"  # JSON or bytes in; JSON, str or bytes out
    TORCHSERVE_GRPC = "torchserve_grpc"  # the input map in, the prediction bytes out
    OPENAI = "openai"  # OpenAI's API: a podium.openai.Sampling in, its tokens out

    def __init__(self, value: str) -> None:
        # Plain attributes, read on every call: cheaper than a property or a set lookup.
        self.oip = value.startswith("oip_")
        self.grpc = value.endswith("_grpc")
        #: 0, 1, ... in definition order: where per-protocol counters keep this one (a list
        #: index, where an Enum as a dict key would cost a call to its __hash__)
        self.index = len(_PROTOCOL_ORDER)
        _PROTOCOL_ORDER.append(value)


class InputKind(enum.Enum):
    """What the model's first parameter asks for, read from its annotation (or what a contract's
    adapter asks for)."""

    DEFAULT = "default"  # the protocol's natural form (decoded tensors, parsed JSON, bytes)
    OIP_REQUEST = "oip_request"  # annotated with InferenceRequest: the request itself
    SCHEMA = "schema"  # annotated with a pydantic BaseModel: validated into it
    RAW = "raw"  # the payload as it came: OIP as a JSON-like dict, else parsed JSON or bytes
    WIRE = "wire"  # RAW's value with the call's protocol: a WireInput (TorchServe handlers)


class WireInput(msgspec.Struct, frozen=True):
    """A call's payload as :attr:`InputKind.RAW` gives it, with the protocol the call came on:
    what an adapter that answers each protocol its own way receives (``InputKind.WIRE``).
    ``request_id``: the call's request id (:func:`request_id`), for adapters that hand each
    request of a batch its own (TorchServe's ``context.request_ids``)."""

    protocol: WireProtocol
    payload: Any
    request_id: str | None = None


class Call(msgspec.Struct):
    """One inference call, as a front end hands it to the data plane (which never writes to it).

    ``protocol`` is the front end it came through. ``payload`` is the decoded body: an
    :class:`InferenceRequest` for OIP, parsed JSON or ``bytes`` otherwise. A front end decodes it
    only when the model takes the inputs (:attr:`Capabilities.needs_inputs`), so a model that
    takes only the raw request never pays for parsing. ``request`` is the raw request object
    passed to methods that ask for it (a ``starlette.requests.Request`` over HTTP), set when the
    model's :attr:`Capabilities.needs_request`. ``sequence`` is the place in a stateful sequence
    the client asked for (None: none, or a new one).
    """

    model: str
    version: str | None
    protocol: WireProtocol
    payload: Any = None
    request: Any = None
    sequence: SequenceRef | None = None


class SequenceOutcome(msgspec.Struct, frozen=True):
    """Where a call left its stateful sequence, for the front end to return: ``id`` (the one the
    server made, ``created``, when the client sent none), whether the sequence ``ended`` with this
    call, and the response ``headers`` the model set (``Context.headers``)."""

    id: str
    ended: bool = False
    created: bool = False
    headers: Mapping[str, str] = msgspec.field(default_factory=dict)


class Answer(msgspec.Struct):
    """What :meth:`DataPlane.infer` answers a call with (one small object per call).

    ``value``: an :class:`InferenceResponse` for OIP; for the other protocols the model's own
    value (a :class:`Reply`, a starlette ``Response``, ``bytes``, ``str`` or JSON-like data), for
    the front end to serialise. ``headers``: response headers the model asked for (the
    ``headers`` parameter of its :class:`InferenceResponse`, MLServer's convention), or None.
    ``sequence``: for a model with ``sequence_batching``, where the call left its sequence.
    """

    value: Any
    headers: dict[str, str] | None = None
    sequence: SequenceOutcome | None = None


class AnswerStream:
    """What :meth:`DataPlane.stream` answers a call with: its items, and what it says besides.

    Iterate it once (``async for``; it hands out its generator itself, so an item costs no more
    than the generator's own step) and close it (``aclose()``, ``contextlib.aclosing``).
    ``sequence`` says where the call stands in its stateful sequence when read: the id once the
    call has joined it (before the first item), ``ended`` and the model's headers once the last
    item is out.
    """

    __slots__ = ("_items", "_sequence")

    def __init__(
        self, items: AsyncGenerator[Any, None], sequence: SequenceRef | None = None
    ) -> None:
        self._items = items
        self._sequence = sequence

    def __aiter__(self) -> AsyncGenerator[Any, None]:
        return self._items

    def __anext__(self) -> Awaitable[Any]:
        return self._items.__anext__()

    async def aclose(self) -> None:
        await self._items.aclose()

    @property
    def sequence(self) -> SequenceOutcome | None:
        return None if self._sequence is None else self._sequence.outcome()


@dataclass(slots=True)
class SequenceRef:
    """A call's place in a stateful sequence (a model with ``sequence_batching``).

    A front end fills ``id`` / ``start`` / ``end`` from what the client sent (the
    ``ts_request_sequence_id`` headers, the OIP parameters ``sequence_id`` / ``sequence_start`` /
    ``sequence_end``, TorchServe gRPC's ``sequence_id``) into :attr:`Call.sequence`. ``id`` None
    starts a new sequence; ``start`` always begins a new sequence under ``id`` (one still open
    under it ends once its requests already queued have run). ``needs_start`` is Triton's rule
    (the data plane sets it on OIP calls): an id with no open sequence must come with ``start``;
    without it an unknown id starts a sequence and a closed one is refused. ``joined``, when
    given, makes the request wait for room in a full sequence queue instead of being refused,
    and is resolved once the request holds its sequence's turn or has its place in the queue
    (how a request stream stops reading while the queue is full).

    The data plane hands the sequence scheduler a copy of its own, on which the scheduler sets
    ``id`` (the one it made, with ``created``), ``ended`` (the sequence is over after this
    request) and ``headers``; the front end reads them as a :class:`SequenceOutcome`.
    """

    id: str | None = None
    start: bool = False
    end: bool = False
    created: bool = False
    ended: bool = False
    headers: dict[str, str] = field(default_factory=dict)  # set by the model (Context.headers)
    needs_start: bool = False
    joined: asyncio.Future[None] | None = None

    def outcome(self) -> SequenceOutcome | None:
        """Where the call stands in its sequence now; None before it has joined one."""
        if self.id is None:
            return None
        return SequenceOutcome(self.id, self.ended, self.created, dict(self.headers))


class Context:
    """What a model of a stateful sequence sees of it: ask for it with a parameter annotated
    ``podium.Context`` (as the raw request is asked for).

    ``state`` is a mapping that lives as long as the sequence (empty on its first request);
    ``sequence_id`` and ``first`` say where the request is, ``last`` that the client said this
    request ends the sequence; ``end()`` ends the sequence after this request; ``headers`` are
    response headers the model sets (sent where the protocol has them).
    """

    __slots__ = ("sequence_id", "first", "last", "state", "headers", "ended")

    def __init__(
        self, sequence_id: str, *, first: bool, state: dict[str, Any], last: bool = False
    ) -> None:
        self.sequence_id = sequence_id
        self.first = first
        self.last = last
        self.state = state
        self.headers: dict[str, str] = {}
        self.ended = False

    def end(self) -> None:
        """End the sequence once this request is answered; its state is dropped."""
        self.ended = True

    def __repr__(self) -> str:
        return f"Context(sequence_id={self.sequence_id!r}, first={self.first})"


class Generation:
    """One request in a continuous batch, as a model's ``step(batch)`` sees it.

    ``inputs`` is what ``predict`` would receive (and ``request`` the raw request, when the model
    takes it); ``state`` is a dict that lives as long as the request; ``first`` is true on its
    first step. ``emit(item)`` streams one item to this request's client; ``finish()`` ends the
    request after this step. ``cancelled`` turns true when its client has left: the request
    leaves the batch before the next step, whatever the model does.
    """

    __slots__ = ("inputs", "request", "state", "first", "cancelled", "finished", "_items")

    def __init__(self, inputs: Any, request: Any = None) -> None:
        self.inputs = inputs
        self.request = request
        self.state: dict[str, Any] = {}
        self.first = True
        self.cancelled = False
        self.finished = False
        self._items: list[Any] = []

    def emit(self, item: Any) -> None:
        """Send ``item`` to this request's client (it leaves once the step returns)."""
        self._items.append(item)

    def finish(self) -> None:
        """This request is complete after the current step."""
        self.finished = True

    def take(self) -> list[Any]:
        """The items emitted since the last call (the scheduler's side)."""
        items, self._items = self._items, []
        return items


class _End:
    __slots__ = ()

    def __repr__(self) -> str:
        return "END"


#: The end of a stream of items where it crosses a buffer or a thread (after the last item):
#: a worker's stream buffer, a sync generator driven from the pool, a handler's streamed items.
END: Final = _End()


#: The context of the request being run (a list for a batch), set by the sequence scheduler
#: around ``predict``; model contracts read it for methods that ask for a ``Context``.
current_context: ContextVar[Context | list[Context] | None] = ContextVar(
    "podium_current_context", default=None
)


#: ``RequestInfo.cache`` bits (HTTP's request directives, RFC 9111): ``no-cache`` (or
#: ``max-age=0``): not answered from a cache, though its answer may be kept; ``no-store``: its
#: answer is not kept.
CACHE_NO_READ: Final = 1
CACHE_NO_STORE: Final = 2


class RequestInfo:
    """The request being served, as every layer may see it (:data:`current_request`): its id
    (the client's ``X-Request-ID`` / ``x-request-id`` / OIP ``id``, or one the server made), and
    the model and version it addresses once the data plane has found them. Front ends keep
    more in a subclass (the access log's fields).

    ``deadline`` and ``priority`` are what the client asked of the model's queue (front ends
    set them from the OIP ``timeout`` / ``priority`` parameters, headers, gRPC deadlines and
    metadata: docs/scaling.md): the latest ``time.monotonic()`` at which the request may still
    leave the queue for the model (None: the model's own ``max_queue_delay`` alone), and its
    priority level (1 the highest; 0: the model's default). ``cache``: what its
    ``Cache-Control`` header (or metadata) asks of a model's response cache, the bits
    :data:`CACHE_NO_READ` and :data:`CACHE_NO_STORE` (0: nothing).
    """

    __slots__ = ("id", "model", "version", "deadline", "priority", "cache")

    def __init__(self, id: str) -> None:
        self.id = id
        self.model: str | None = None
        self.version: str | None = None
        self.deadline: float | None = None
        self.priority = 0
        self.cache = 0


#: The request the current task (or the model thread it runs) serves; None outside a request
#: and in a batch (which serves several). Set by the front end for each request, copied into
#: the threads that run sync model code, and read by the log lines (``podium.logs``).
current_request: ContextVar[RequestInfo | None] = ContextVar("podium_current_request", default=None)


def request_id() -> str | None:
    """The id of the request being served (``X-Request-ID`` / gRPC ``x-request-id`` / the OIP
    request ``id`` when the client sent one, else one the server made; the same id is in the
    response and in every log line about the request); None outside a request and inside a
    batched ``predict``, which serves several."""
    info = current_request.get()
    return None if info is None else info.id


def is_response(value: Any) -> bool:
    """A starlette ``Response`` a model returned, sent as it is (recognised without importing
    starlette)."""
    return callable(value) and hasattr(value, "status_code") and hasattr(value, "init_headers")


from ._instances import (  # noqa: E402  (after the types they use)
    ENDPOINT_METHODS,
    Capabilities,
    EmbedInputs,
    HandlerRoute,
    MethodInputs,
    ModelEndpoints,
    ModelInstance,
    OpenAIFace,
    Reply,
    Returned,
    SyncCalls,
)
