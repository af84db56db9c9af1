"""The messages between the server and a worker process, one Struct each (``_wire`` frames them).

    server → worker   Init                          once, first: what to build and how
                      Infer / Batch                 a request (``cid`` names it from then on)
                      Cancel(cid)                   the client left: cancel it; is_disconnected()
                      Credit(cid, n)                a stream's reader took ``n`` more items
                      Step(cid, ...)                one step of a continuous batch (``_steps``)
    both ways         Release(upto)                 the reader copied the sender's shared memory
                                                    ring out up to ``upto``: it may reuse it
    worker → server   Ready / StartFailed           once, after building the model
                      Answer(cid, value) / Error    the answer to Infer (or Batch)
                      Results(cid, values)          the answer to Batch: one value per request
                      Item(cid, value) ... End(cid) a stream (or Error)
                      End(cid)                      also: a cancelled request has stopped
                      Stepped(cid, items, done)     what one Step emitted, and who finished
                      Report(compute, metrics)      what its counters and the model's own
                                                    metrics added since the last Report

Every request ends with exactly one of Answer, Results, Error or End; the server frees its slot
then. A Step ends with Stepped or Error and frees no slot (its lane holds one for its batch). Both sides dispatch on the class (``match``).

What the worker process needs from the layers above the execution layer travels in :class:`Init`
by reference (pickled by module and name): the host factory that builds and schedules the model,
and the function that rebuilds a front end's request. This package never names them.
"""

from __future__ import annotations

import pickle
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from concurrent.futures import Executor
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import msgspec

from ...metrics import Delta
from ...types import Capabilities, ModelInstance
from .._stats import ComputeDelta, VersionStats

if TYPE_CHECKING:
    from ...model import ModelSource

__all__ = [
    "Answer",
    "Batch",
    "Cancel",
    "Credit",
    "End",
    "EnvSecrets",
    "Error",
    "Failed",
    "HostFactory",
    "Infer",
    "Init",
    "Item",
    "Message",
    "Ready",
    "Release",
    "Report",
    "Results",
    "Runner",
    "StartFailed",
    "Step",
    "Stepped",
    "Unvalidated",
    "queues_ahead",
]


class Runner(Protocol):
    """Runs one request through the worker's model: preprocess, predict under
    ``predict_concurrency``, postprocess (a scheduler over the worker's one instance);
    ``stats`` are the counters it records to, which the worker reports."""

    @property
    def stats(self) -> VersionStats: ...

    async def infer(self, inputs: Any, request: Any) -> Any: ...

    def stream(self, inputs: Any, request: Any) -> AsyncGenerator[Any, None]: ...


#: Builds the model in the worker process: ``await host(source, secrets, executor)`` returns the
#: loaded instance and the :class:`Runner` over it. Runs in the worker; chosen by the server.
HostFactory = Callable[
    ["ModelSource", Mapping[str, str], Executor], Awaitable[tuple[ModelInstance, Runner]]
]


class EnvSecrets(msgspec.Struct, frozen=True):
    """Secrets the worker reads itself: a ``config.Secrets`` over the environment (which it
    inherits) and ``directory``; only the directory travels."""

    directory: Path | None


# -- server → worker ---------------------------------------------------------------------------


class Init(msgspec.Struct):
    """What the worker process builds, and how it runs (the first message it gets)."""

    source: ModelSource
    secrets: Mapping[str, str] | EnvSecrets
    host: HostFactory
    #: ``rebuild(snapshot, gone)``: the request a model gets (``RequestCodec.rebuild``), or None
    rebuild: Callable[[Any, Callable[[], Awaitable[Any]]], Any] | None
    worker: str
    threads: int
    log_level: int
    log_format: str = "text"  # the server's --log-format
    #: the names of this worker's shared memory files start with it ("": the socket carries all)
    shm: str = ""
    #: its GPU as the server names it ("cuda:1"; "": the CPU): its JSON log lines say it
    device: str = ""


# (the tags: ``_wire`` decodes the messages that carry no classes or functions as they are)


class Infer(msgspec.Struct, array_like=True, tag=1):
    """One request: answered by an ``Answer``, or (``stream``) by its ``Item``s and ``End``."""

    cid: int
    inputs: Any
    request: Any  # the request snapshot, or None
    request_id: str | None = None  # the request's id: its model's log lines name it
    stream: bool = False

    @property
    def op(self) -> str:
        return "stream" if self.stream else "infer"


class Batch(msgspec.Struct, array_like=True, tag=3):
    op: ClassVar[str] = "batch"
    cid: int
    inputs: list[Any]
    requests: list[Any]


class Cancel(msgspec.Struct, array_like=True, tag=4):
    cid: int


class Credit(msgspec.Struct, array_like=True, tag=5):
    cid: int
    n: int


class Release(msgspec.Struct, array_like=True, tag=6):
    """The receiver has copied the sender's shared memory ring out up to position ``upto``."""

    upto: int


class Step(msgspec.Struct, array_like=True, tag=12):
    """One step of a worker process's continuous batch. Generations are named by ``gid``: those
    in ``joined`` enter with their ``inputs`` and requests (once, before their first step), those
    in ``left``
    are gone (finished, cancelled: their state goes), ``batch`` is who steps now, in order (a
    generation whose reader is behind sits out: alive, not stepped)."""

    cid: int
    joined: list[int]
    inputs: list[Any]
    left: list[int]
    batch: list[int]
    #: the joining ones' request snapshots (as ``Infer.request``), or [] when none has one
    requests: list[Any] = []


# -- worker → server ---------------------------------------------------------------------------


class Ready(msgspec.Struct):
    """The model is built and loaded: its capabilities, as the worker's instance has them (less
    ``input_schema``: a user class the server may not import; the worker validates). ``face``:
    where the model generates on OpenAI's API, the pickle of its ``OpenAIFace`` (the front end
    tokenizes with its tokenizer; unpickled by the server's :class:`RemoteInstance`)."""

    capabilities: Capabilities
    face: bytes | None = None


class StartFailed(msgspec.Struct):
    reason: str


class Answer(msgspec.Struct, array_like=True, tag=7):
    cid: int
    value: Any


class Results(msgspec.Struct, array_like=True, tag=8):
    """The answer to a ``Batch``: a value (or a ``Failed``) per request, in order. (Not an
    ``Answer``: each value is encoded by its own type, ``_wire``.)"""

    cid: int
    value: list[Any]


class Error(msgspec.Struct):
    """The request (or step) ``cid`` failed with ``failed``."""

    cid: int
    failed: Failed


class Item(msgspec.Struct, array_like=True, tag=9):
    cid: int
    value: Any


class End(msgspec.Struct, array_like=True, tag=10):
    """The request ended without (more of) an answer: a stream's end, or a cancelled request's
    (it stopped, or never started)."""

    cid: int


class Stepped(msgspec.Struct, array_like=True, tag=13):
    """The answer to a ``Step``: per generation of its batch, in order, the items it emitted (a
    list) or a ``Failed`` (its preprocess raised); ``done``: the gids that finished."""

    cid: int
    items: list[Any]
    done: list[int]


class Report(msgspec.Struct):
    """What the worker's counters (``compute``: preprocess, predict, postprocess) and the
    model's own metrics (``metrics``) added since its last report; the server adds them to the
    version's, so they outlive the worker process."""

    compute: ComputeDelta | None
    metrics: list[Delta]


Message = (
    Init
    | Infer
    | Batch
    | Cancel
    | Credit
    | Ready
    | StartFailed
    | Answer
    | Results
    | Error
    | Item
    | End
    | Report
    | Release
    | Step
    | Stepped
)


def queues_ahead(caps: Capabilities) -> bool:
    """Whether a worker process of an instance with these capabilities takes requests queued
    ahead of its ``predict_concurrency`` slots (both sides decide it from the same capabilities).

    Only where a request is all predict: the worker then starts them in the order they were
    sent, at most ``predict_concurrency`` at once, and starts the next only once the answer of the
    one before has left (so the server knows which ones have not started: a crash re-routes them
    and a deadline starts when the predict does). Not with ``preprocess`` / ``postprocess`` (they
    run outside the slots, so the order is the model's) nor streams (a stream holds its slot
    until its end, which the worker cannot answer before)."""
    return not (caps.has_preprocess or caps.has_postprocess or caps.streaming or caps.continuous)


# -- values inside messages --------------------------------------------------------------------


class Unvalidated(msgspec.Struct):
    """Inputs for a pydantic-annotated model, validated in the worker that runs the model."""

    value: Any


class Failed(msgspec.Struct):
    """An exception as it crosses the socket: its class, message and (picklable) attributes (a
    request's in an :class:`Error`; one request of a batch that failed in a worker: its
    preprocess or postprocess raised)."""

    type: type[BaseException]
    message: str
    attrs: dict[str, Any]

    @classmethod
    def of(cls, exc: BaseException) -> Failed:
        """``exc``, safe to pickle whatever its ``__init__``."""
        attrs = {k: v for k, v in getattr(exc, "__dict__", {}).items() if _picklable(v)}
        return cls(type(exc), str(exc), attrs)

    def exception(self) -> BaseException:
        """The exception it describes (its ``__init__`` is not called)."""
        exc: Any = BaseException.__new__(self.type)
        BaseException.__init__(exc, self.message)
        exc.__dict__.update(self.attrs)
        return exc


def _picklable(value: Any) -> bool:
    try:
        pickle.dumps(value, protocol=5)
    except Exception:
        return False
    return True
