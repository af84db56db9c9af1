"""What a model instance is to the layers above it: the interface every contract adapts user
code to (:class:`ModelInstance`, and :class:`ModelEndpoints` where its capabilities say so), the
:class:`Capabilities` every layer branches on, and the values a model's answer may take besides
its own (:class:`Reply`, :class:`Returned`). Re-exported by :mod:`podium.types`; import them
from there."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

# podium.types imports this module at its end, once these are defined there
from .types import Generation, InputKind


@dataclass(slots=True)
class Reply:
    """A model's value with the HTTP status, headers and content type it asked for.

    Made by contracts whose user code sets them (TorchServe's ``Context.set_response_status`` /
    ``set_response_header`` / ``set_response_content_type``). Front ends that can carry them
    (TorchServe and Truss HTTP routes) send them; every other front end uses ``body`` alone.
    """

    body: Any
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str | None = None


@dataclass(frozen=True, slots=True)
class Returned:
    """The one item of the stream of a model that decides streaming by the value ``predict``
    returns (:attr:`Capabilities.returns_streams`, a truss) when it returned a value rather
    than a generator: the front end answers ``value`` whole, as a non-streaming model's."""

    value: Any


#: The model methods besides ``predict`` that a model may define and a front end reach by
#: name (Truss's OpenAI-style routes: ``/v1/chat/completions`` calls ``chat_completions``).
ENDPOINT_METHODS: Final = ("chat_completions", "completions", "embeddings", "messages", "responses")


@dataclass(frozen=True, slots=True)
class OpenAIFace:
    """What a loaded model offers OpenAI's API (``docs/openai.md``), read from the model after
    its ``load()``: the ``tokenizer`` and ``context_length`` it set, whether it generates (a
    continuous model with a tokenizer: each generation's inputs are a ``podium.openai.Sampling``)
    and whether it embeds (it defines ``embed(self, inputs: list[str])``)."""

    tokenizer: Any = None
    context_length: int | None = None
    generates: bool = False
    embeds: bool = False
    methods: frozenset[str] = frozenset()  # its own chat / complete


@dataclass(frozen=True, slots=True)
class EmbedInputs:
    """The inputs of one ``/v1/embeddings`` call, as the scheduler carries them to a model that
    embeds: its ``predict`` slot runs the model's ``embed`` with ``texts`` (a batch of such
    calls, dynamically batched, runs one ``embed`` over all their texts)."""

    texts: list[str]


@dataclass(frozen=True, slots=True)
class MethodInputs:
    """One OpenAI call for the model's own ``chat`` or ``complete`` (``method``), as the
    scheduler carries it to the predict slot: the model gets ``request`` (the validated request
    struct) and returns the text, or yields it piece by piece."""

    method: str
    request: Any


@dataclass(frozen=True, slots=True)
class HandlerRoute:
    """A model's own HTTP endpoint (an MLServer runtime's ``@custom_handler``): ``method`` and
    ``path`` (``{name}`` segments match one segment, as Starlette's), served by the model's
    method ``name`` (:meth:`ModelEndpoints.endpoint`)."""

    method: str
    path: str
    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Capabilities:
    """What a model instance asks for and how it runs: what every front end, the data plane,
    the schedulers and the workers branch on. One frozen value per instance, made by its
    contract's adapter when the instance is built (a process worker's instance takes the one its
    first worker reports); read it once per request into a local where it is read more than once.

    The defaults are those of an ``async def predict(self, inputs)`` with nothing else.
    """

    #: Some method takes the inputs: the front end reads and parses the body (else it never does).
    needs_inputs: bool = True
    #: Some method takes the raw request: the front end makes it (a ``starlette`` ``Request``).
    needs_request: bool = False
    #: ... and reads only its headers (an MLServer runtime's ``parameters.headers``): a response
    #: cache may keep its answers, keyed by the headers too.
    request_headers_only: bool = False
    #: What the first parameter asks for (the data plane converts the payload into it).
    input_kind: InputKind = InputKind.DEFAULT
    #: The pydantic model of :attr:`InputKind.SCHEMA` (``validate`` makes it), else None.
    input_schema: type | None = None
    #: ``predict_stream`` yields the items (a generator ``predict``, a streaming handler).
    streaming: bool = False
    #: ``preprocess`` / ``postprocess`` do something (schedulers skip the call otherwise).
    has_preprocess: bool = False
    has_postprocess: bool = False
    #: A streaming model whose non-streaming calls go to ``predict`` rather than gathering
    #: ``predict_stream`` (an MLServer runtime defines both).
    predict_on_infer: bool = False
    #: Reads a stream of requests (``predict_input_stream``): gRPC ModelStreamInfer hands it
    #: every request of the stream, and it answers as it decides (an MLServer runtime's
    #: ``predict_stream``).
    consumes_stream: bool = False
    #: ``predict`` (or ``step``) runs user code in a thread, which cannot be interrupted (a sync
    #: ``predict``): a timeout then fails the request without waiting for it. Such an instance
    #: runs it on its :attr:`ModelInstance.calls`.
    predict_in_thread: bool = False
    #: Served by continuous batching (``continuous_batching``): the scheduler calls ``step``
    #: with the active requests instead of ``predict``; ``streaming`` is then true.
    continuous: bool = False
    #: Where the instance computes when its contract decides it ("cpu" or "gpu": the device a
    #: TorchServe handler is given); None when the model's own code decides (management's
    #: describe then says "cpu").
    device: str | None = None
    #: OIP requests are checked against the inputs the model declares (its config's
    #: ``signature``) before it sees them. False for an MLServer runtime: the inputs of its
    #: ``model-settings.json`` are hints (content types), which MLServer never checks requests
    #: against, and often name only some of the inputs.
    checks_declared_inputs: bool = True
    #: A ``BYTES`` input whose shape counts the characters (or bytes) of its one element passes
    #: the OIP checks as that one element (``codecs.check_request``'s ``text_length_shapes``):
    #: MLServer's runtimes, whose clients send ``"shape": [len(text)]`` as MLServer's examples do.
    text_length_shapes: bool = False
    #: ``predict`` may return a generator, which then streams; whether it does is decided by
    #: the value each call returns (Truss's rule). ``predict_stream`` then holds the slot until
    #: the generator ends and yields its items, or one :class:`Returned` (postprocessed) when
    #: predict returned a value; ``predict`` gathers a returned generator into one value.
    returns_streams: bool = False
    #: Which of :data:`ENDPOINT_METHODS` the model defines (:class:`ModelEndpoints.endpoint`).
    endpoints: frozenset[str] = frozenset()
    #: The model's own HTTP endpoints (MLServer's custom handlers), served on the inference
    #: listener where no route of Podium's matches (:meth:`ModelEndpoints.endpoint`).
    handler_routes: tuple[HandlerRoute, ...] = ()
    #: The model serves WebSockets (:meth:`ModelEndpoints.websocket`).
    websocket: bool = False
    #: The model says whether it is healthy (:meth:`ModelEndpoints.is_healthy`): a loaded
    #: model's readiness follows it.
    health_check: bool = False
    #: The model defines ``embed`` (OpenAI's ``/v1/embeddings`` reach it in the predict slot:
    #: :class:`EmbedInputs`), in thread or process workers alike.
    embeds: bool = False
    #: What the model's pydantic annotations say of its input and output, as Truss's ``/schema``
    #: answers it (``input_schema``, ``output_schema``, ``supports_streaming``); None when they
    #: say nothing.
    io_schema: Mapping[str, Any] | None = None
    #: A truss's model: a server of one truss answers Truss's ``/ping`` (SageMaker's probe)
    #: where it differs from TorchServe's.
    truss: bool = False


class SyncCalls(Protocol):
    """The threads an instance runs its sync ``predict`` (or ``step``) on, as a thread worker
    uses them (``model/_threads.CallThreads``): each call is found by the task that waits for
    it, so a deadline needs no task or timer of its own per call."""

    #: The most threads the calls run on at once (None: as many as calls in flight); a worker
    #: sets it to its predict slots, and further calls wait in line for a thread.
    limit: int | None

    def started(self, task: asyncio.Task[Any]) -> float | None:
        """Since when (``time.monotonic()``) the call ``task`` waits for runs; None if it has
        not started, has returned, or ``task`` waits for no call."""
        ...

    def withdraw(self, task: asyncio.Task[Any]) -> bool:
        """Make sure the call of ``task`` never runs: False if it runs already."""
        ...

    def detach(self, task: asyncio.Task[Any], on_end: Callable[[], None]) -> bool:
        """The call of ``task``, running past its deadline: ``task`` goes at once when
        cancelled, and ``on_end`` is called on the loop when the call really returns. False if
        it is not running."""
        ...


class ModelInstance(Protocol):
    """One loaded instance of a model, whatever contract its code was written to.

    The scheduler calls ``preprocess`` → ``predict`` (or ``predict_stream``) → ``postprocess``
    and never looks inside. ``request`` is passed through untouched, the same object each time.
    ``capabilities`` says which of these apply and what the model asks for; ``calls`` is where
    its sync ``predict`` or ``step`` runs (set exactly when ``capabilities.predict_in_thread``).
    """

    capabilities: Capabilities

    @property
    def calls(self) -> SyncCalls | None: ...

    async def load(self) -> None: ...

    async def preprocess(self, inputs: Any, request: Any) -> Any: ...

    async def predict(self, inputs: Any, request: Any) -> Any: ...

    def predict_stream(self, inputs: Any, request: Any) -> AsyncGenerator[Any, None]: ...

    def validate(self, value: Any) -> Any: ...

    def predict_input_stream(
        self, inputs: AsyncIterator[Any], request: Any
    ) -> AsyncGenerator[Any, None]: ...

    async def postprocess(self, outputs: Any, request: Any) -> Any: ...

    async def step(self, batch: list[Generation]) -> None:
        """Advance every request of ``batch`` by one step (a ``continuous`` instance only)."""
        ...


class ModelEndpoints(Protocol):
    """What an instance offers beyond :class:`ModelInstance` where its :class:`Capabilities`
    say so (a truss's): run on the instance itself, outside ``predict_concurrency``, as Truss
    runs them. A process worker's instance offers none of them."""

    async def is_healthy(self) -> bool:
        """Whether the loaded model is healthy (``health_check``); an error counts as not."""
        ...

    def endpoint(self, name: str, inputs: Any, request: Any) -> AsyncGenerator[Any, None]:
        """Run the model's method ``name`` (one of ``endpoints``): its items if it returns a
        generator, else one :class:`Returned`."""
        ...

    async def websocket(self, websocket: Any) -> None:
        """Serve one WebSocket (``websocket``): ``websocket`` is a ``starlette`` WebSocket the
        front end has accepted (Truss's models never accept it themselves)."""
        ...
