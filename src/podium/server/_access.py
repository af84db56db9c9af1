"""Each request's id and its access log line, for every front end (docs/operations.md, "Logs").

Every request gets an id (:class:`RequestIds`): the client's, from the ``X-Request-ID`` header or
the ``x-request-id`` gRPC metadata, or failing those the OIP request's ``id`` (:func:`adopt`),
else one the server makes. A client's id is used only if it is at most :data:`MAX_ID`
characters of :data:`ID_CHARACTERS`; any other is ignored (never echoed: a client must not
put what it likes into responses and logs). The id goes back in every response (the
``X-Request-ID`` header, gRPC trailing metadata ``x-request-id``), is in every log line about
the request (:data:`podium.types.current_request`, read by ``podium.logs``), and reaches the model
(``podium.request_id()``; TorchServe's ``context.request_ids``; MLServer's ``payload.id``).

The front end keeps one :class:`Access` per request: its protocol, route (or RPC), model and
version (set by the data plane when it finds them), status, duration, bytes in and out, id and
peer. When the request ends, :class:`AccessLog` writes it as one line of the ``podium.access``
logger at INFO (``--access-log``, the default; ``--no-access-log`` writes none): streams at
their end. The HTTP side is :mod:`.http._access` (an ASGI middleware), the gRPC side
:mod:`.grpc._access` (a wrapper around each method handler).
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import re
import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import InvalidInput, bounded
from ..logs import MAX_LOG_MESSAGE, configured, flush_at_exit
from ..turn import TurnBuffer
from ..types import CACHE_NO_READ, CACHE_NO_STORE, RequestInfo, current_request
from ._access_thread import MAX_QUEUED_LINES, LineThread

__all__ = [
    "ID_CHARACTERS",
    "ID_HEADER",
    "ID_METADATA",
    "MAX_ID",
    "PRIORITY_HEADER",
    "PRIORITY_METADATA",
    "CACHE_HEADER",
    "CACHE_METADATA",
    "QUEUE_HEADERS",
    "TIMEOUT_HEADER",
    "Access",
    "AccessLog",
    "RequestIds",
    "access_head",
    "adopt",
    "ask_of_queue",
    "cache_control",
    "client_id",
    "printable",
    "with_request_id",
]

#: The header and the gRPC metadata key that carry a request's id, both ways.
ID_HEADER = b"x-request-id"
ID_METADATA = "x-request-id"
#: The longest id taken from a client (characters).
MAX_ID = 128
#: The characters a client's id may hold: enough for UUIDs, ULIDs, base64 and trace ids, and
#: nothing that a log line or a header would have to escape.
ID_CHARACTERS = "0-9 A-Z a-z . _ : ; = / + @ -"
_VALID = re.compile(r"[0-9A-Za-z._:;=/+@-]{1,128}")
_VALID_BYTES = re.compile(rb"[0-9A-Za-z._:;=/+@-]{1,128}")  # 128: MAX_ID

#: The longest path an access line quotes (characters; the rest is cut).
MAX_PATH = 512


#: The header (HTTP) and metadata key (gRPC) by which a client asks for a priority level in
#: the model's queue, and the header by which an HTTP client bounds its wait in it
#: (milliseconds; over gRPC the call's deadline does). docs/scaling.md, "Overload".
PRIORITY_HEADER = b"x-podium-priority"
PRIORITY_METADATA = "x-podium-priority"
TIMEOUT_HEADER = b"x-podium-timeout-ms"
#: The header (HTTP) and metadata key (gRPC) by which a client opts out of a model's response
#: cache (docs/scaling.md, "The response cache").
CACHE_HEADER = b"cache-control"
CACHE_METADATA = "cache-control"
#: The headers read into the request's RequestInfo: what it asks of the model's queue and cache.
QUEUE_HEADERS = frozenset({PRIORITY_HEADER, TIMEOUT_HEADER, CACHE_HEADER})

#: The longest Cache-Control value read (characters; a longer one asks for nothing).
MAX_CACHE_CONTROL = 256


def cache_control(value: bytes | str) -> int:
    """What a ``Cache-Control`` request header asks of a response cache, as RFC 9111 has it:
    ``no-cache`` (and ``max-age=0``: no stored answer is fresh enough) → not answered from the
    cache (:data:`CACHE_NO_READ`), its answer still kept; ``no-store`` → its answer not kept
    (:data:`CACHE_NO_STORE`); both, neither. Other directives, and unknown ones, ask nothing."""
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    if len(text) > MAX_CACHE_CONTROL:
        return 0
    asked = 0
    for directive in text.lower().split(","):
        directive = directive.strip().replace(" ", "")
        if directive == "no-cache" or directive == "max-age=0" or directive == 'max-age="0"':
            asked |= CACHE_NO_READ
        elif directive == "no-store":
            asked |= CACHE_NO_STORE
    return asked


def ask_of_queue(info: RequestInfo, key: bytes | str, value: bytes | str) -> None:
    """Note in ``info`` what a client's priority or timeout header (or metadata) asks of the
    model's queue, or its ``Cache-Control`` of a response cache; ``InvalidInput`` for a value
    that is not a priority (an integer >= 0) or a timeout (a number of milliseconds > 0). The
    message never quotes the value."""
    name = key.decode("latin-1") if isinstance(key, bytes) else key
    if name == CACHE_METADATA:
        info.cache |= cache_control(value)
        return
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    if name == PRIORITY_METADATA:
        if len(text) > 9 or not text.isdigit():
            raise InvalidInput(f"'{name}' must be an integer >= 0 (1 the highest level)")
        info.priority = int(text)
        return
    try:
        milliseconds = float(text) if len(text) <= 32 else math.nan
    except ValueError:
        milliseconds = math.nan
    if not milliseconds > 0 or math.isinf(milliseconds):
        raise InvalidInput(f"'{name}' must be a number of milliseconds > 0")
    info.deadline = time.monotonic() + milliseconds / 1000.0


def client_id(value: bytes | str | None) -> str | None:
    """A client's request id, if it may be used (see the module's docstring); else None."""
    if not value:
        return None
    if isinstance(value, bytes):
        return value.decode("ascii") if _VALID_BYTES.fullmatch(value) else None
    return value if _VALID.fullmatch(value) else None


class RequestIds:
    """Makes request ids: this process's random prefix (12 hex digits, so that ids of processes
    and restarts do not meet) and a counter, ``3f9a2c71b0e4-1a``. A counter costs a tenth of a
    ``uuid4()`` (which reads the OS's random source every time)."""

    def __init__(self) -> None:
        self.prefix = os.urandom(6).hex()
        self._next = itertools.count(1).__next__

    def make(self) -> str:
        return f"{self.prefix}-{self._next():x}"


class Access(RequestInfo):
    """One request as its access line tells it (see the module's docstring).

    ``status``: the HTTP status sent (None until a response starts), or the gRPC code's value;
    ``code``: the gRPC code's name (None over HTTP). ``from_client``: the id is the client's
    (an OIP ``id`` does not replace it then). ``start``: ``perf_counter_ns()`` at its arrival.
    ``context``: a gRPC call's context (where an adopted id goes as trailing metadata).
    ``span``: its server span when tracing is on.
    """

    __slots__ = (
        "protocol",
        "route",
        "method",
        "path",
        "status",
        "code",
        "start",
        "bytes_in",
        "bytes_out",
        "peer",
        "from_client",
        "context",
        "span",
        "end",
        "describe",
        "head",
    )

    def __init__(self, id: str, from_client: bool, start: int) -> None:
        self.id = id
        self.model: str | None = None
        self.version: str | None = None
        self.deadline: float | None = None
        self.priority = 0
        self.cache = 0
        self.from_client = from_client
        self.start = start
        self.protocol: str | None = None
        self.route: str | None = None
        self.method: str | None = None
        self.path: str = ""
        self.status: int | None = None
        self.code: str | None = None
        self.bytes_in = 0
        self.bytes_out = 0
        self.peer: str | None = None
        self.context: Any = None
        self.span: Any = None
        self.end = start  # perf_counter_ns() when the request ended (ended())
        #: fills in what the line says of the request (route, path, peer) when the line is
        #: made, if that was left to then (the HTTP middleware's, see AccessLog.write)
        self.describe: Any = None
        #: the line's ``protocol route "method path"`` made whole, where the front end keeps
        #: it made for each method and path (the HTTP middleware's describe); else None
        self.head: str | None = None

    # What the line says, made only when a line is written: in the text format the message
    # (the formatter puts the id in front of it), in the JSON format the keys.

    def ended(self) -> None:
        """The request has ended now."""
        self.end = _now()

    @property
    def duration_ms(self) -> float:
        """From its arrival to its end (:meth:`ended`), in milliseconds (to the microsecond)."""
        ns = self.end - self.start
        if 0 <= ns < _EXACT_NS and ns % 1000 != 500:
            return ((ns + 500) // 1000) / 1000  # (the nearest microsecond: no tie here)
        return round(ns / 1e6, 3)  # (a tie, or over 11 days)

    def __str__(self) -> str:
        status = self.code if self.code is not None else self.status
        head = self.head
        if head is None:
            head = access_head(self.protocol, self.route, self.method, self.path)
        return (
            f"{self.peer or '-'} {head} "
            f"{status} {(self.end - self.start) / 1e6:.3f}ms in={self.bytes_in} out={self.bytes_out} "
            f"model={self.model or '-'} version={self.version or '-'}"
        )

    #: The keys a JSON line adds for the request, in their order (podium.logs.JsonFormatter).
    json_keys = (
        "protocol",
        "route",
        "method",
        "path",
        "status",
        "code",
        "duration_ms",
        "bytes_in",
        "bytes_out",
        "model",
        "version",
        "peer",
    )

    def json_values(self) -> tuple[Any, ...]:
        """The values of :attr:`json_keys`, in their order: what a JSON line made on the log's
        thread asks for (no dict: its formatter puts them straight into its line's struct)."""
        ns = self.end - self.start
        if 0 <= ns < _EXACT_NS and ns % 1000 != 500:  # (duration_ms's, without its call)
            milliseconds = ((ns + 500) // 1000) / 1000
        else:
            milliseconds = self.duration_ms
        return (
            self.protocol,
            self.route,
            self.method,
            self.path,
            self.status,
            self.code,
            milliseconds,
            self.bytes_in,
            self.bytes_out,
            self.model,
            self.version,
            self.peer,
        )

    def fields(self) -> dict[str, Any]:
        """:attr:`json_keys` and their values (a record's ``fields``, asked by the formatter
        where a line is made through a dict: a record logged on its own, or a fallback)."""
        return dict(zip(self.json_keys, self.json_values(), strict=True))


def access_head(protocol: str | None, route: str | None, method: str | None, path: str) -> str:
    """The text line's ``protocol route "method path"`` (``-`` for what is not known; a gRPC
    call has no method: its path alone)."""
    request = f"{method} {path}" if method else path
    return f'{protocol or "-"} {route or "-"} "{request}"'


def printable(text: str, limit: int = MAX_PATH) -> str:
    """``text`` (a client's: a path) for a log line: cut at ``limit`` characters, and with
    anything but printable characters, ``"`` and ``\\`` escaped, so it cannot end a quoted
    field or forge a line."""
    if len(text) > limit:
        text = text[:limit] + "…"
    if text.isprintable() and '"' not in text and "\\" not in text:
        return text
    return text.encode("unicode_escape").decode("ascii").replace('"', '\\"')


_now = time.perf_counter_ns
_thread_id = threading.get_ident
#: Durations shorter than this many nanoseconds (11.6 days) are rounded to the microsecond
#: exactly as ``round(ns / 1e6, 3)`` rounds them, by integer arithmetic (a third of its cost):
#: ``ns / 1e6`` is within 2**-53 of itself of ``ns``'s value in milliseconds, under 1e-6 ms
#: here, so it lies on the same side of every tie (a tie is 1 ns from any other ``ns``), except
#: at a tie (``ns % 1000 == 500``), which is left to ``round``; and ``q / 1000`` is the double
#: nearest ``q`` thousandths, which ``round`` answers.
_EXACT_NS = 10**15
#: When logging started (``relativeCreated`` counts from it, as the logging module's records do).
_START: float = getattr(logging, "_startTime", time.time())


class AccessLog:
    """Writes each request's :class:`Access` as one ``podium.access`` line at INFO, when
    ``enabled`` and that logger lets INFO through.

    A request only keeps its :class:`Access`: its line is made later, by the log's thread, or
    with the lines of the same turn of the event loop at its end (a
    :class:`~podium.turn.TurnBuffer`), or at once off the loop's thread. Where they go is
    chosen once, when the log is made, by how logging is configured:

    - as ``podium serve`` configures it (:func:`podium.logs.configured`: Podium's one
      :class:`~podium.logs.LineWriter` on the root logger), each line is made by that writer's
      formatter and the turn's lines written in one write, with no record made: the line a
      record would give, without the logging module's cost per record (some thirty
      attributes, the walk up the loggers, the filters, the locks), which is several times
      the rest of the line's;
    - set up any other way (an application's handlers, a test capturing records), each line is
      a record of the logger, made from a template (not through ``Logger.info``, which looks
      for the caller's frame and the thread's and process's names) and handled as any other.
      Its message is the :class:`Access` itself (``str()`` is the text line) and its
      ``fields`` too (the JSON keys), so nothing is formatted that no handler writes.

    A handler added to the logger after the log is made is not seen by the first way.

    In the first way the lines are made and written off the event loop, by the log's own
    :class:`~._access_thread.LineThread`: the loop's thread (the one the log is made on) hands
    each ended request over as it ends (the thread gathers them: no turn's buffer, no callback
    per turn); at most ``max_queued`` lines wait, and a line that finds no room is dropped and
    counted (:attr:`dropped`), never waited for.
    """

    def __init__(
        self,
        enabled: bool = True,
        logger: str = "podium.access",
        *,
        max_queued: int = MAX_QUEUED_LINES,
    ) -> None:
        self.enabled = enabled
        self.logger = logging.getLogger(logger)
        made = logging.LogRecord(logger, logging.INFO, __file__, 0, "", (), None)
        self._template = dict(made.__dict__)
        self._thread = threading.get_ident()
        self._writer = configured()
        self.lines: LineThread | None = None
        self._emit: Callable[[list[Access]], None]
        #: hands one ended request to the log's thread (from the loop's thread), if there is one
        self._add: Callable[[Access], None] | None = None
        if self._writer is None:
            self._emit = self._records
        else:
            self.lines = LineThread(self._lines, max_queued)
            self._emit = self.lines.put
            self._add = self.lines.add
        self._held: TurnBuffer[Access] = TurnBuffer(self._emit)
        self._hold = self._held.add
        flush_at_exit(self)

    @property
    def dropped(self) -> int:
        """Lines dropped because ``max_queued`` lines were waiting to be written."""
        return 0 if self.lines is None else self.lines.dropped

    @property
    def queued(self) -> int:
        """Lines waiting to be written by the log's thread."""
        return 0 if self.lines is None else self.lines.queued

    def wants(self) -> bool:
        """Whether a line would be written now (the switch and the logger's level)."""
        return self.enabled and self.logger.isEnabledFor(logging.INFO)

    def write(self, access: Access, wanted: bool = False) -> None:
        """The line of a request that has ended (:meth:`Access.ended`), if :meth:`wants`: by the
        log's thread, else at the end of this turn of the event loop on its thread, else at
        once. ``wanted``: :meth:`wants` said yes as the request began (its front end asked
        then, to count its bytes), and is not asked again."""
        if not wanted and (not self.enabled or not self.logger.isEnabledFor(logging.INFO)):
            return
        if self._add is not None and _thread_id() == self._thread:
            self._add(access)
            return
        try:
            self._hold(access)
        except RuntimeError:  # no event loop runs on this thread
            if self._writer is not None:
                self._lines([access])
            else:
                self._records([access])

    def flush(self) -> None:
        """Make and write the lines of the requests held, and wait for the log's thread to
        write them (at exit: :func:`flush_at_exit`)."""
        if threading.get_ident() == self._thread or self.lines is None:
            self._held.flush()  # (the turn's buffer belongs to the loop's thread)
        if self.lines is not None:
            # logging.shutdown flushes handlers under their lock, which the thread's writes
            # take: then what waits is written here
            owned = getattr(getattr(self._writer, "lock", None), "_is_owned", None)
            self.lines.flush(here=bool(owned is not None and owned()))

    def close(self) -> None:
        """Write every line held and waiting, and end the log's thread (at shutdown); lines of
        requests that end later still get written."""
        self.flush()
        if self.lines is not None:
            self.lines.close()

    def _lines(self, held: list[Access]) -> None:
        """The lines, made by Podium's writer's formatter and written together."""
        writer: Any = self._writer
        for access in held:
            if access.describe is not None:
                access.describe(access)
        items = [(access.id, bounded(str(access), MAX_LOG_MESSAGE), access) for access in held]
        lines = writer.formatter.lines(
            time.time(), "INFO", self.logger.name, items, writer.terminator
        )
        writer.write_now(lines)

    def _records(self, held: list[Access]) -> None:
        """The lines as records of the logger."""
        created = time.time()
        thread = threading.get_ident()
        for access in held:
            if access.describe is not None:
                access.describe(access)
            record = logging.LogRecord.__new__(logging.LogRecord)
            values = record.__dict__
            values.update(self._template)
            values["created"] = created
            values["msecs"] = (created - int(created)) * 1000
            values["relativeCreated"] = (created - _START) * 1000
            values["msg"] = access
            values["fields"] = access
            values["request_id"] = access.id
            if thread != self._thread:  # the template's thread is the loop's
                values["thread"] = thread
                values["threadName"] = threading.current_thread().name
            self.logger.handle(record)


def adopt(oip_id: str | None, context: Any = None) -> None:
    """The OIP request's ``id`` becomes the request's id, if the client sent no id of its own
    (header or metadata) and it may be used (:func:`client_id`); over gRPC, ``context`` gets it
    as trailing metadata at once."""
    if not oip_id:
        return
    access = current_request.get()
    if not isinstance(access, Access) or access.from_client:
        return
    taken = client_id(oip_id)
    if taken is None:
        return
    access.id = taken
    access.from_client = True
    if context is not None:
        context.set_trailing_metadata(((ID_METADATA, taken),))


def with_request_id(metadata: tuple[tuple[str, Any], ...]) -> tuple[tuple[str, Any], ...]:
    """gRPC trailing metadata a handler sets (which replaces what was set before), with the
    current request's id added."""
    info = current_request.get()
    if info is None:
        return metadata
    return (*(item for item in metadata if item[0] != ID_METADATA), (ID_METADATA, info.id))
