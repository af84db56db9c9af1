"""Podium's log lines: text or JSON lines, bounded, and each naming the request it is about.

``podium serve`` (and every worker process) logs through one handler on the root logger
(:func:`configure`), so library and model lines come out the same way as Podium's own:

- ``--log-format text`` (:class:`TextFormatter`): ``2026-01-02 03:04:05,678 INFO name [id]:
  message``, where ``[id]`` is the id of the request the line is about, if any;
- ``--log-format json`` (:class:`JsonFormatter`): one JSON object per line, for log shippers,
  with the stable keys ``ts`` (UTC, ISO 8601 with milliseconds), ``level``, ``logger``,
  ``message`` and ``request_id`` (null outside a request), plus ``exception`` / ``stack`` when the
  record has them and the fields a record carries in its ``fields`` attribute (the access log's:
  docs/operations.md, "Logs"), and ``device`` (``cuda:1``) on a line made while a model's code
  runs on a GPU (docs/devices.md). Encoded by msgspec: no hand-made escaping.

Which request a line is about comes from :data:`podium.types.current_request`, read by
:class:`RequestIdFilter` on the handler, in the thread that logs: the front end sets it for each
request, and it follows the request into the tasks and threads that run its model code, so a
model's own ``logging`` calls name the request too.

Every line is bounded, in both formats: no request can make Podium write megabytes to its log.
Error messages are bounded where they are made (:func:`podium.errors.bounded`), but a log line
can also quote what a model's own exception says (its traceback's last line), and a model that
raises ``ValueError(f"bad input {value}")`` with a client's 20 MB value would write it out whole.
:class:`BoundedFormatter` is the last guard: a record's message is cut at
:data:`MAX_LOG_MESSAGE` characters, each line of a traceback at :data:`MAX_LOG_LINE`, and a
traceback keeps its first and last :data:`MAX_TRACEBACK` characters.
"""

from __future__ import annotations

import logging
import sys
import time
import weakref
from collections.abc import Mapping
from typing import IO, Any

import msgspec

from ._server_fields import SETTINGS
from .devices import running_on
from .errors import bounded
from .types import current_request

__all__ = [
    "MAX_LOG_LINE",
    "MAX_LOG_MESSAGE",
    "MAX_TRACEBACK",
    "BoundedFormatter",
    "JsonFormatter",
    "LineWriter",
    "RequestIdFilter",
    "TextFormatter",
    "bounded_traceback",
    "configure",
    "configured",
    "current_format",
    "flush_at_exit",
]

#: The longest message of one record (characters): a ready line naming many models fits.
MAX_LOG_MESSAGE = 16 * 1024
#: The longest line of a traceback (characters).
MAX_LOG_LINE = 2 * 1024
#: A traceback longer than twice this keeps this many characters of its head and of its tail.
MAX_TRACEBACK = 16 * 1024

#: What a formatter's ``lines`` makes lines of: each record's request id, message and fields.
Lines = list[tuple[str | None, str, Any]]


class BoundedFormatter(logging.Formatter):
    """A :class:`logging.Formatter` whose output is bounded (see the module's docstring)."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = bounded(record.message, MAX_LOG_MESSAGE)
        return super().formatMessage(record)

    def formatException(self, ei: Any) -> str:
        return bounded_traceback(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:
        return bounded_traceback(super().formatStack(stack_info))


def bounded_traceback(text: str) -> str:
    """``text`` (a formatted traceback) with each line :func:`bounded` to :data:`MAX_LOG_LINE`
    characters, and its middle left out past 2 × :data:`MAX_TRACEBACK`."""
    if len(text) <= MAX_LOG_LINE:
        return text
    text = "\n".join(bounded(line, MAX_LOG_LINE) for line in text.split("\n"))
    if len(text) > 2 * MAX_TRACEBACK:
        cut = len(text) - 2 * MAX_TRACEBACK
        text = f"{text[:MAX_TRACEBACK]}\n… ({cut} characters left out) …\n{text[-MAX_TRACEBACK:]}"
    return text


class RequestIdFilter(logging.Filter):
    """Sets ``record.request_id``: the id of the request being served where the record was made
    (:data:`podium.types.current_request`), unless the record names one already (``extra=``);
    and ``record.device`` where a thread worker's model code runs on a GPU (``podium.device()``
    there: its JSON line says it; a worker process's lines say it as one of their ``static``
    keys). On the handler, so it sees every record that reaches it, whichever logger made it."""

    def filter(self, record: logging.LogRecord) -> bool:
        if "request_id" not in record.__dict__:
            info = current_request.get()
            record.request_id = None if info is None else info.id
        on = running_on()
        if on is not None:
            record.__dict__.setdefault("device", on)
        return True


def _parts(record: logging.LogRecord) -> tuple[float, str, str, str | None, str, Any]:
    """What a formatter's ``line`` writes of a record: its time, level, logger, request id,
    message (bounded) and ``fields``."""
    return (
        record.created,
        record.levelname,
        record.name,
        record.__dict__.get("request_id"),
        bounded(record.getMessage(), MAX_LOG_MESSAGE),
        record.__dict__.get("fields"),
    )


class _Stamps:
    """A clock's text to the millisecond, ``pattern`` (``time.strftime``'s, of the second)
    then ``point`` and the milliseconds (three digits) then ``end``. The seconds' text is made
    once per second (``time.strftime`` costs more than a log line's other parts together), and
    the whole stamp once per ``created``: the access lines made together share one time
    (``AccessLog``), and formatting the milliseconds costs as much as the rest of a line."""

    __slots__ = ("_pattern", "_convert", "_point", "_end", "_second", "_last")

    def __init__(self, pattern: str, convert: Any, point: str, end: str = "") -> None:
        self._pattern = pattern
        self._convert = convert
        self._point = point
        self._end = end
        # (time, its text), each replaced whole: threads that log at once (the access log's
        # and any other) never read a text with another time's
        self._second: tuple[int, str] = (-1, "")
        self._last: tuple[float, str] = (-1.0, "")

    def text(self, created: float) -> str:
        at, text = self._last
        if created == at:
            return text
        second = int(created)
        at_second, seconds = self._second
        if second != at_second:
            seconds = time.strftime(self._pattern, self._convert(second))
            self._second = (second, seconds)
        # str().zfill(3): the text of f"{n:03d}" for 0 <= n < 1000, without a format spec
        milliseconds = str(int((created % 1) * 1000)).zfill(3)
        text = f"{seconds}{self._point}{milliseconds}{self._end}"
        self._last = (created, text)
        return text


class TextFormatter(BoundedFormatter):
    """Podium's text lines: ``2026-01-02 03:04:05,678 LEVEL logger [tag] [request id]: message``
    (local time; ``[tag]`` where given, e.g. a worker process's; ``[request id]`` where the
    record is about a request), then the traceback if any. Bounded as :class:`BoundedFormatter`."""

    def __init__(self, tag: str = "") -> None:
        super().__init__()
        self._tag = f" [{tag}]" if tag else ""
        self._clock = _Stamps("%Y-%m-%d %H:%M:%S", time.localtime, ",")

    def format(self, record: logging.LogRecord) -> str:
        parts = _parts(record)
        record.message = parts[4]
        line = self.line(*parts)
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line = f"{line}\n{record.exc_text}"
        if record.stack_info:
            line = f"{line}\n{self.formatStack(record.stack_info)}"
        return line

    def line(
        self,
        created: float,
        level: str,
        name: str,
        request_id: str | None,
        message: str,
        fields: Any,
    ) -> str:
        """The line of a record without traceback (``message`` bounded already; ``fields`` are
        not written in this format)."""
        stamp = self._clock.text(created)
        if request_id:
            return f"{stamp} {level} {name}{self._tag} [{request_id}]: {message}"
        return f"{stamp} {level} {name}{self._tag}: {message}"

    def lines(self, created: float, level: str, name: str, items: Lines, end: str) -> str:
        """The lines of records made at one time (``items``: each one's request id, message
        and fields, as :meth:`line` takes them), each ended by ``end``: what :meth:`line` makes
        of each, with what they share (the stamp, level and logger) made once."""
        head = f"{self._clock.text(created)} {level} {name}{self._tag}"
        return "".join(
            [
                f"{head} [{request_id}]: {message}{end}"
                if request_id
                else f"{head}: {message}{end}"
                for request_id, message, _ in items
            ]
        )


_encoder = msgspec.json.Encoder()
#: The keys every JSON line has, first and in this order.
_STANDARD_KEYS = ("ts", "level", "logger", "message", "request_id")
#: The most ``fields`` types whose line structs a JSON formatter keeps (a bounded memory).
_MAX_LINE_TYPES = 32


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (see the module's docstring for the keys).

    ``static``: keys every line carries (a worker process's ``worker`` and ``pid``). A record's
    ``fields`` (a mapping, or an object whose ``fields()`` returns one, asked only here) add
    keys; they never replace the standard ones. Values that JSON cannot carry are written as
    their ``str()``. Bounded as :class:`BoundedFormatter`.

    :meth:`lines` (the access log's) makes the same lines more cheaply where each item's
    ``fields`` names its keys in its type's ``json_keys`` (a tuple) and gives their values in
    that order from ``json_values()``: each line is then a msgspec struct of the line's keys in
    the dict's order, made once per type, and the lines are encoded in one call. A struct
    encodes as the dict of the same keys and values does (one encoder, the same values; only
    the keys are written ahead), and where it cannot be used (keys that clash or that msgspec
    cannot write ahead, a value JSON cannot carry) the lines are made through the dict.
    """

    def __init__(self, static: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        # a static key never replaces a standard one: those are left out here, once
        self._static = {k: v for k, v in (static or {}).items() if k not in _STANDARD_KEYS}
        self._taken = frozenset((*_STANDARD_KEYS, *self._static))  # the keys fields cannot set
        self._clock = _Stamps("%Y-%m-%dT%H:%M:%S", time.gmtime, ".", "Z")
        self._static_values = tuple(self._static.values())
        #: each ``fields`` type's line struct (:meth:`_line_type`), or None where its lines are
        #: made through the dict
        self._line_types: dict[type, Any] = {}

    def format(self, record: logging.LogRecord) -> str:
        line = self._keys(*_parts(record))
        device = record.__dict__.get("device")
        if device is not None:
            line.setdefault("device", str(device)[:64])
        if record.exc_info:
            line["exception"] = bounded_traceback(self.formatException(record.exc_info))
        elif record.exc_text:
            line["exception"] = bounded_traceback(record.exc_text)
        if record.stack_info:
            line["stack"] = bounded_traceback(self.formatStack(record.stack_info))
        return self._encode(line)

    def line(self, *parts: Any) -> str:
        """The line of a record without traceback (``parts``: as :meth:`TextFormatter.line`'s)."""
        return self._encode(self._keys(*parts))

    def lines(self, created: float, level: str, name: str, items: Lines, end: str) -> str:
        """The lines of records made at one time, each ended by ``end`` (as
        :meth:`TextFormatter.lines`)."""
        made = self._structs(created, level, name, items)
        if made is not None:
            try:
                text = _encoder.encode_lines(made).decode()
            except (TypeError, ValueError):
                pass  # (a value JSON cannot carry: each line through the dict, as format's)
            else:
                # (a JSON line holds no "\n" of its own: control characters are escaped)
                return text if end == "\n" else text.replace("\n", end)
        keys, encode = self._keys, self._encode
        made = [encode(keys(created, level, name, *item)) for item in items]
        made.append("")  # (the last line's end)
        return end.join(made)

    def _structs(self, created: float, level: str, name: str, items: Lines) -> list[Any] | None:
        """Each item's line as its struct (see the class's docstring); None if an item's
        ``fields`` has none."""
        ts = self._clock.text(created)
        static = self._static_values
        types = self._line_types
        made: list[Any] = []
        add = made.append
        for request_id, message, fields in items:
            kind = type(fields)
            line = types.get(kind, False)
            if line is False:
                line = self._line_type(kind)
            if line is None:
                return None
            if static:
                add(line(ts, level, name, message, request_id, *static, *fields.json_values()))
            else:
                add(line(ts, level, name, message, request_id, *fields.json_values()))
        return made

    def _line_type(self, kind: type) -> Any:
        """The struct of the lines whose ``fields`` are of type ``kind``: the standard keys, the
        static ones and ``kind.json_keys``, in the dict's order; None where its keys are not a
        tuple of keys that are their own (none taken, none twice) and msgspec can write ahead
        (no ``"``, ``\\`` or control character)."""
        keys = getattr(kind, "json_keys", None)
        line = None
        if (
            isinstance(keys, tuple)
            and all(isinstance(key, str) for key in keys)
            and self._taken.isdisjoint(keys)
            and len(set(keys)) == len(keys)
        ):
            names = (*_STANDARD_KEYS, *self._static, *keys)
            slots = [f"k{index}" for index in range(len(names))]
            try:
                # (gc=False: a line's struct lives for one encoding and holds only its values)
                line = msgspec.defstruct(
                    "JsonLine",
                    [(slot, Any) for slot in slots],
                    rename=dict(zip(slots, names, strict=True)),
                    gc=False,
                )
            except (TypeError, ValueError):
                line = None
        if len(self._line_types) < _MAX_LINE_TYPES:
            self._line_types[kind] = line
        return line

    def _keys(
        self,
        created: float,
        level: str,
        name: str,
        request_id: str | None,
        message: str,
        fields: Any,
    ) -> dict[str, Any]:
        line: dict[str, Any] = {
            "ts": self._clock.text(created),
            "level": level,
            "logger": name,
            "message": message,
            "request_id": request_id,
        }
        if self._static:
            line.update(self._static)  # (none of the keys above: __init__)
        if fields is not None:
            if not isinstance(fields, Mapping):
                fields = fields.fields()
            if self._taken.isdisjoint(fields):  # as a rule (the access log's): add them whole
                line.update(fields)
            else:
                for key, value in fields.items():
                    line.setdefault(key, value)
        return line

    @staticmethod
    def _encode(line: dict[str, Any]) -> str:
        try:
            return _encoder.encode(line).decode()
        except (TypeError, ValueError):  # a field JSON cannot carry: its text instead
            return msgspec.json.encode(line, enc_hook=str).decode()


class LineWriter(logging.StreamHandler[IO[str]]):
    """The stream handler :func:`configure` installs: each record is written at once, and the
    access log's lines, made ahead on its own thread, straight (:meth:`write_now`: many lines,
    one write). :meth:`flush` (at exit, by ``logging.shutdown``) first has the access log write
    the lines it still holds (:func:`flush_at_exit`).
    """

    def emit(self, record: logging.LogRecord) -> None:
        # not StreamHandler's: its flush() per record would be this flush (the access log's)
        try:
            line = self.format(record) + self.terminator
        except Exception:
            self.handleError(record)
            return
        self.write_now(line)

    def write_now(self, text: str) -> None:
        """Write ``text`` (whole lines) in one write."""
        with self.lock:  # type: ignore[union-attr]
            try:
                self.stream.write(text)
                self.stream.flush()
            except RecursionError:
                raise
            except Exception:
                # no record to name: the stream failed (closed, full disk); the lines are lost,
                # as a plain StreamHandler's would be
                pass

    def flush(self) -> None:
        """Write every held line (the access lines not yet made too: :func:`flush_at_exit`)."""
        for held in list(_flushers):
            held.flush()
        super().flush()


_flushers: weakref.WeakSet[Any] = weakref.WeakSet()


def flush_at_exit(held: Any) -> None:
    """``held.flush()`` is called whenever a :class:`LineWriter` is flushed (at exit, by
    ``logging.shutdown``): lines ``held`` keeps to make later (the access log's) are not lost."""
    _flushers.add(held)


_format = "text"
_installed: LineWriter | None = None


def configured() -> LineWriter | None:
    """The writer :func:`configure` installed, while it is the root logger's one handler: where
    lines made ahead (the access log's) can go straight, formatted by its formatter's ``line``,
    as a record would reach it. None where this process's logging is set up otherwise (by an
    application, by a test)."""
    writer = _installed
    if writer is None or logging.root.handlers != [writer]:
        return None
    return writer


def current_format() -> str:
    """The ``--log-format`` this process logs in (what worker processes are told to use)."""
    return _format


def configure(
    level: int | str,
    fmt: str = "text",
    *,
    tag: str = "",
    static: Mapping[str, Any] | None = None,
    stream: IO[str] | None = None,
) -> logging.Handler:
    """Log every record of this process at ``level`` and above to ``stream`` (stderr) in
    ``fmt`` (``--log-format``'s choices), through one handler on the root logger, with
    :class:`RequestIdFilter`; the handler. ``tag`` goes into every text line, ``static`` into
    every JSON one (a worker process's name and pid). Called once, by the process's entry point
    (``podium serve``, a worker process)."""
    global _format, _installed
    SETTINGS["log_format"].check(fmt)
    handler = LineWriter(sys.stderr if stream is None else stream)
    handler.setFormatter(JsonFormatter(static) if fmt == "json" else TextFormatter(tag))
    handler.addFilter(RequestIdFilter())
    # No record of this process's names another process (worker processes are spawned, not
    # forked through multiprocessing): skip multiprocessing's lookup in every record.
    logging.logMultiprocessing = False
    logging.basicConfig(level=level, handlers=[handler])
    _format = fmt
    _installed = handler
    return handler
