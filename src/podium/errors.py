"""Podium's errors: one hierarchy, one table of wire statuses.

    PodiumError                      every error Podium raises on purpose
    ├── InvalidInput                 the request is malformed (400 / INVALID_ARGUMENT)
    │   ├── InvalidTensor            a tensor's datatype, shape or data is wrong
    │   ├── ValidationFailed         the body failed the model's own schema (pydantic)
    │   └── UnsupportedRepresentation  the value cannot be carried by this protocol
    ├── NotFound                     unknown model, version or route (404 / NOT_FOUND)
    │   └── VersionNotFound          the model is known, this version is not
    ├── Conflict                     it exists already, e.g. a model version (409 / ALREADY_EXISTS)
    ├── Unauthenticated              a missing or wrong API key (401 / UNAUTHENTICATED)
    ├── Forbidden                    not allowed on this listener, e.g. unloading a model (403 / PERMISSION_DENIED)
    ├── MethodNotAllowed             a known route called with the wrong method (405 / UNIMPLEMENTED)
    ├── PayloadTooLarge              the body exceeds the configured limit (413 / RESOURCE_EXHAUSTED)
    ├── Unavailable                  try again later (503 / UNAVAILABLE)
    │   ├── ModelNotReady            the model is loading or failed to load
    │   ├── QueueFull                the model's queue is at max_queue_size
    │   ├── QueueTimeout             the request waited in the queue past its deadline
    │   ├── SequenceLimit            a sequence's queue is full, or too many sequences are open
    │   └── ShuttingDown             the server is stopping: the call was cut, or came too late
    ├── SequenceClosed               the sequence ended, expired or lost its state (410 / FAILED_PRECONDITION)
    ├── Cancelled                    the client went away; nobody is waiting for the answer
    ├── ModelError                   the user's code raised (500 / INTERNAL)
    │   ├── BadModelOutput           the user's code returned something the contract forbids
    │   ├── ModelStatus              the user's code raised an HTTP error of its own: its status
    │   └── DeviceOutOfMemory        the model's device ran out of memory (507 / RESOURCE_EXHAUSTED)
    ├── WorkerDied                   the instance running the request broke (500 / INTERNAL)
    │   └── DeviceLost               its device was lost (a driver error): the worker is restarted
    ├── ResponseTimeout              predict ran past the model's response_timeout (504 / DEADLINE_EXCEEDED)
    ├── DefinitionError              a model class breaks the contract (found at load time)
    └── MissingSecret                a model asked for a secret that is not configured (a KeyError)

``Cancelled`` and ``WorkerDied`` are kept apart on purpose (after Trio's ``ClosedResourceError`` /
``BrokenResourceError``): a request cancelled because its client left is not a failure of the
server, while a dead worker is, and logs and clients must be able to tell which happened.

Every error carries ``message`` (what happened, naming the thing and the rule) and ``code`` (a
stable machine-readable name). A message is at most :data:`MAX_MESSAGE` characters (:func:`bounded`:
longer ones are cut, saying how long they were): messages quote what clients sent, and one bad
request must not echo megabytes back to its client or into the logs, on any protocol. ``STATUS`` is the single table from error class to HTTP status and
gRPC status-code name; front ends look errors up with :func:`http_status` and :func:`grpc_code`.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BadModelOutput",
    "Cancelled",
    "Conflict",
    "DefinitionError",
    "DeviceLost",
    "DeviceOutOfMemory",
    "Forbidden",
    "InvalidInput",
    "InvalidTensor",
    "MAX_DETAILS",
    "MAX_MESSAGE",
    "MissingSecret",
    "ModelError",
    "MethodNotAllowed",
    "ModelNotReady",
    "ModelStatus",
    "NotFound",
    "PayloadTooLarge",
    "PodiumError",
    "QueueFull",
    "QueueTimeout",
    "ResponseTimeout",
    "SequenceClosed",
    "SequenceLimit",
    "STATUS",
    "ShuttingDown",
    "Unauthenticated",
    "Unavailable",
    "UnsupportedRepresentation",
    "ValidationFailed",
    "VersionNotFound",
    "WorkerDied",
    "bounded",
    "grpc_code",
    "http_status",
    "model_label",
    "unknown_model",
    "unloaded_model",
]


#: The longest error message, in characters; longer ones are cut (:func:`bounded`).
MAX_MESSAGE = 1024
#: The most failing locations a :class:`ValidationFailed` lists.
MAX_DETAILS = 20


def bounded(text: str, limit: int = MAX_MESSAGE) -> str:
    """``text`` if it has at most ``limit`` characters, else its first ``limit`` characters and
    a note of its full length (``… (cut at 1024 of 20971520 characters)``)."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… (cut at {limit} of {len(text)} characters)"


class PodiumError(Exception):
    """Base of every error Podium raises on purpose; ``message`` is :func:`bounded`."""

    code = "internal"

    def __init__(self, message: str) -> None:
        message = bounded(message)
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class InvalidInput(PodiumError):
    """The request is malformed: bad JSON, wrong fields, too deep, wrong types."""

    code = "invalid_input"


class InvalidTensor(InvalidInput):
    """A tensor's datatype, shape or data does not agree with the protocol."""

    code = "invalid_tensor"


class ValidationFailed(InvalidInput):
    """The inputs failed the model's own schema; ``details`` lists the failing locations (the
    first :data:`MAX_DETAILS`, their text :func:`bounded`: a client can send a million bad
    items)."""

    code = "validation_failed"

    def __init__(self, message: str, details: list[dict[str, object]] | None = None) -> None:
        super().__init__(message)
        self.details = [_bounded_detail(d) for d in (details or [])[:MAX_DETAILS]]


def _bounded_detail(detail: dict[str, object]) -> dict[str, object]:
    """A detail whose every string (and every location's parts) is :func:`bounded`."""
    out: dict[str, object] = {}
    for key, value in detail.items():
        if isinstance(value, str):
            value = bounded(value, 200)
        elif isinstance(value, list | tuple):
            value = [bounded(p, 200) if isinstance(p, str) else p for p in value[:32]]
        out[key] = value
    return out


class UnsupportedRepresentation(InvalidInput):
    """A value cannot be carried on the protocol the client used."""

    code = "unsupported_representation"


class NotFound(PodiumError):
    """An unknown model, version or route."""

    code = "not_found"


def model_label(name: str, version: str | None = None) -> str:
    """How logs and errors name a model version: ``model 'echo'``, ``model 'echo' version '2'``."""
    return f"model '{name}'" + (f" version '{version}'" if version else "")


def unknown_model(name: str, version: str | None = None) -> str:
    """The message of an unknown model (or version), in Triton's words on every protocol:
    Triton's clients and examples match on ``Request for unknown model: 'X' is not found``."""
    if version is None:
        return f"Request for unknown model: '{name}' is not found"
    return f"Request for unknown model: '{name}' version {version} is not found"


def unloaded_model(name: str, version: str | None = None) -> str:
    """The message of a model the OIP routes answer as unknown because it was unloaded
    (Triton's ``has no available versions``; MLServer answers 404 there too)."""
    which = (
        f"'{name}' has no available versions"
        if version is None
        else (f"'{name}' version {version} is not loaded")
    )
    return f"Request for unknown model: {which}: it was unloaded (the repository API's load serves it again)"


class VersionNotFound(NotFound):
    """The model is known but has no such version (TorchServe tells the two apart:
    ``ModelVersionNotFoundException``)."""

    code = "version_not_found"


class Conflict(PodiumError):
    """What the request would create exists already (a model version registered twice)."""

    code = "conflict"


class Unauthenticated(PodiumError):
    """Token authorization is on and the request carries no key, or not the right one."""

    code = "unauthenticated"


class Forbidden(PodiumError):
    """The request is understood and may not be done here: changing what is served through an
    inference listener while model control belongs to the management listeners."""

    code = "forbidden"


class MethodNotAllowed(PodiumError):
    """A known route called with a method it does not serve; ``allowed`` lists the right ones."""

    code = "method_not_allowed"

    def __init__(self, message: str, allowed: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.allowed = allowed


class PayloadTooLarge(PodiumError):
    """The request body is larger than the configured maximum."""

    code = "payload_too_large"


class Unavailable(PodiumError):
    """The server cannot take this request now; the client may retry.

    ``retry_after``: seconds after which a retry may succeed, where the refusal knows (a full
    or slow queue); front ends send it as ``Retry-After`` (HTTP, whole seconds) and as the
    trailing metadata ``retry-after`` (gRPC). None: no advice.
    """

    code = "unavailable"
    retry_after: float | None = None


class ModelNotReady(Unavailable):
    """The model exists but is loading, or failed to load."""

    code = "model_not_ready"


class QueueFull(Unavailable):
    """The model's queue holds ``max_queue_size`` requests already."""

    code = "queue_full"

    @classmethod
    def of(cls, model: str, waiting: int, limit: int) -> QueueFull:
        """The error for ``model``'s full queue, in the words every scheduler uses."""
        error = cls(
            f"model '{model}' queue is full: {waiting} requests waiting (max_queue_size {limit})"
        )
        error.retry_after = 1.0
        return error


class QueueTimeout(Unavailable):
    """The request waited in the model's queue past its deadline (the model's
    ``max_queue_delay`` or the request's own timeout) and left it without reaching the model."""

    code = "queue_timeout"

    @classmethod
    def of(cls, model: str, waited: float, retry_after: float) -> QueueTimeout:
        """The error of a request of ``model`` that left its queue after ``waited`` seconds."""
        error = cls(
            f"model '{model}' is overloaded: the request waited {waited * 1000:.0f} ms in its "
            "queue, past its deadline, and was not run"
        )
        error.retry_after = retry_after
        return error

    @classmethod
    def expected(cls, model: str, wait: float, retry_after: float) -> QueueTimeout:
        """The error of a request of ``model`` refused on arrival: it would wait about
        ``wait`` seconds, past its deadline."""
        error = cls(
            f"model '{model}' is overloaded: the request would wait about {wait * 1000:.0f} ms "
            "in its queue, past its deadline, and was not queued"
        )
        error.retry_after = retry_after
        return error


class SequenceLimit(Unavailable):
    """A sequence's own queue holds ``max_sequence_queue_size`` requests, or the model holds
    ``max_num_sequences`` open sequences; nothing else is disturbed."""

    code = "sequence_limit"


class ShuttingDown(Unavailable):
    """The server is stopping: the call was still running when ``--graceful-timeout`` ran out
    (or a second signal came), or it arrived after that; another replica may take it."""

    code = "shutting_down"


class SequenceClosed(PodiumError):
    """A request names a sequence that is over: ended by a request or by the model, expired
    (idle or absolute timeout), or whose state was lost with its worker. The message says which;
    a closed sequence is never silently started again."""

    code = "sequence_closed"


class Cancelled(PodiumError):
    """The client went away; the work was stopped on purpose. Not a server failure."""

    code = "cancelled"


class ModelError(PodiumError):
    """The user's model code raised; the message includes the exception's text."""

    code = "model_error"


class BadModelOutput(ModelError):
    """The user's model returned something the contract forbids (e.g. a batch of wrong length)."""

    code = "bad_model_output"


class ModelStatus(ModelError):
    """The user's code raised an HTTP error with a status of its own choosing (a
    ``fastapi.HTTPException``, as Truss models do): that status (400-599) and its detail reach
    the client as they are, on every protocol (gRPC: the code HTTP's status maps to)."""

    code = "model_status"

    def __init__(self, message: str, status: int = 500, detail: Any = None) -> None:
        super().__init__(message)
        self.status = status if 400 <= status <= 599 else 500
        #: the exception's ``detail`` as the model gave it (a string, or a JSON-like value such
        #: as the dicts Truss's chains send); ``message`` is its text
        self.detail = message if detail is None else detail


class DeviceOutOfMemory(ModelError):
    """The model's device ran out of memory during the call (a CUDA out-of-memory error): this
    request fails, the framework's cache is emptied, and the worker goes on serving (a smaller
    request may fit). 507, as TorchServe answers a CUDA out-of-memory error."""

    code = "device_out_of_memory"


class WorkerDied(PodiumError):
    """The instance that held the request broke (crashed process); distinct from ``Cancelled``."""

    code = "worker_died"


class DeviceLost(WorkerDied):
    """The worker's device failed for good (a driver error; its CUDA context is broken): the
    request failed and the worker is restarted on the same device (docs/devices.md)."""

    code = "device_lost"


class ResponseTimeout(PodiumError):
    """A predict ran past the model's ``response_timeout``; the worker that ran it is recycled."""

    code = "response_timeout"


class DefinitionError(PodiumError):
    """A model class or configuration breaks the contract; found when the model is loaded."""

    code = "definition_error"

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems = problems or [message]

    @classmethod
    def of(cls, problems: list[str]) -> DefinitionError:
        """One error for every problem found, each kept in :attr:`problems`."""
        return cls("; ".join(problems), problems)

    @classmethod
    def check(cls, problems: list[str]) -> None:
        """Raise :meth:`of` ``problems`` if there are any."""
        if problems:
            raise cls.of(problems)


class MissingSecret(PodiumError, KeyError):
    """A secret the model asked for is set neither in the environment nor in the secrets directory."""

    code = "missing_secret"


# The one table. Most specific classes first is not needed: lookup walks the MRO.
STATUS: dict[type[PodiumError], tuple[int, str]] = {
    PodiumError: (500, "INTERNAL"),
    InvalidInput: (400, "INVALID_ARGUMENT"),
    NotFound: (404, "NOT_FOUND"),
    Conflict: (409, "ALREADY_EXISTS"),
    Unauthenticated: (401, "UNAUTHENTICATED"),
    Forbidden: (403, "PERMISSION_DENIED"),
    MethodNotAllowed: (405, "UNIMPLEMENTED"),
    PayloadTooLarge: (413, "RESOURCE_EXHAUSTED"),
    Unavailable: (503, "UNAVAILABLE"),
    SequenceLimit: (503, "RESOURCE_EXHAUSTED"),
    SequenceClosed: (410, "FAILED_PRECONDITION"),
    Cancelled: (499, "CANCELLED"),
    ModelError: (500, "INTERNAL"),
    DeviceOutOfMemory: (507, "RESOURCE_EXHAUSTED"),
    WorkerDied: (500, "INTERNAL"),
    ResponseTimeout: (504, "DEADLINE_EXCEEDED"),
    DefinitionError: (500, "INTERNAL"),
}


#: The gRPC code of a status a model chose (:class:`ModelStatus`, a TorchServe handler's reply):
#: the code of the table's first class with that status (reversed: the first one written wins;
#: 503 is Unavailable's), and two statuses no error of Podium's has.
_CODE_OF_STATUS = {
    **{status: code for status, code in reversed(STATUS.values())},
    429: "RESOURCE_EXHAUSTED",
    501: "UNIMPLEMENTED",
}


def _lookup(exc: PodiumError) -> tuple[int, str]:
    if type(exc) is ModelStatus:
        status = exc.status
        return status, _CODE_OF_STATUS.get(status, "INTERNAL" if status >= 500 else "UNKNOWN")
    for cls in type(exc).__mro__:
        found = STATUS.get(cls)
        if found is not None:
            return found
    return STATUS[PodiumError]


def http_status(exc: PodiumError) -> int:
    """The HTTP status for ``exc`` from the single table."""
    return _lookup(exc)[0]


def grpc_code(exc: PodiumError) -> str:
    """The gRPC status-code name (``grpc.StatusCode`` member name) for ``exc``."""
    return _lookup(exc)[1]
