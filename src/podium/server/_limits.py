"""Bounded connections for every HTTP listener: request heads, time, bodies, connection count.

uvicorn (with httptools) bounds none of these by itself: httptools buffers an unfinished header
without limit, a connection that never sends a byte is never closed, uvicorn's keep-alive timer
is armed only after a response (and a stray byte disarms it for good), and nothing caps the
number of connections. :class:`ConnectionGuard` holds one listener's limits and counters and
makes the protocol class that uvicorn runs for each of its connections (``http=`` of
``uvicorn.Config``): uvicorn's ``HttpToolsProtocol`` with the checks below. The checks cost the
per-request path a few attribute reads; the timers are per connection (a fresh connection's
head deadline), or only where a request is slow (a head or a body split over several reads).

- A request target longer than ``max_url_size`` is answered 414, a request head larger than
  ``max_header_size`` (request line and header fields) or with more than ``max_headers`` fields
  431; the head is counted as it arrives, so no more than the limit plus one read is buffered.
- A connection must deliver a complete request head within ``header_timeout`` of being accepted
  or of sending the first byte of its next request: 408 if part of a head arrived, a silent close
  if nothing did (an unsolicited 408 on an idle connection would be read as the answer to the
  client's next request).
- Between requests a connection may stay idle for ``keep_alive_timeout`` (a keep-alive timer per
  connection, armed at a response and not remade per request, plus the cases it misses: bytes
  that begin no request, a body finished after its response).
- A request body must bring at least ``max(1, min_body_rate * body_timeout)`` bytes in every
  ``body_timeout``, measured only while Podium waits for the client (not while the application
  has body bytes it has not read yet, nor before a ``100 Continue``): else 408, or a close if the
  response has begun.
- At most ``max_connections`` connections are served at once; more are answered 503.

A response's head is written together with the first part of its body (:class:`_Cork`): one
``write`` (a system call, and a TCP segment the client must wake up for) instead of two.

Refusals are written with ``Connection: close``, then the connection is half-closed and what
the client still sends is read and dropped for a moment (nginx's "lingering close"), so that the
client reads the answer instead of a reset. Warnings are logged at most once per 10 s per kind.

The protocol relies on uvicorn internals (attributes of ``HttpToolsProtocol``, its request cycle
and flow control), checked by :func:`check_uvicorn` when a guard is made: a uvicorn without them
fails at start with a message, rather than serving without limits. pyproject.toml pins the
uvicorn versions this was tested with.
"""

from __future__ import annotations

import asyncio
import enum
import http
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, ClassVar

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from ..config import ConnectionLimits
from ._cycle import scope_template, start_cycle
from ._limits_setup import check_uvicorn, default_max_connections, raise_open_files_limit

__all__ = [
    "LOST_HOOK",
    "ConnectionGuard",
    "ConnectionLimits",
    "ConnectionStatistics",
    "LostHook",
    "check_uvicorn",
    "default_max_connections",
    "raise_open_files_limit",
]

logger = logging.getLogger("podium")

#: Seconds a refused connection is drained before it is closed (the client reads the answer).
LINGER = 2.0

#: Seconds between two warnings of one kind on one listener.
LOG_EVERY = 10.0


@dataclass(frozen=True, slots=True)
class ConnectionStatistics:
    """A listener's connections now, and what its limits did since it started."""

    listener: str
    open: int  #: connections being served now (refused ones not counted)
    max_connections: int
    accepted: int  #: connections served, in total
    refused: int  #: connections answered 503 (or dropped) because max_connections were open
    header_timeouts: int  #: closed without a complete request head in time (408 or silent)
    idle_timeouts: int  #: closed after keep_alive_timeout between requests
    slow_bodies: int  #: closed for a request body below the minimum rate (408 or close)
    oversized_heads: int  #: answered 414 or 431
    bad_requests: int  #: answered 400: not HTTP/1.x the parser accepts


_COUNTED = tuple(f.name for f in fields(ConnectionStatistics))[1:]


class ConnectionGuard:
    """One HTTP listener's limits and counters, and the uvicorn protocol class that keeps them.

    Pass :attr:`protocol` as ``http=`` to ``uvicorn.Config``. :meth:`statistics` is cheap and may
    be called at any time from the event loop's thread (metrics read it).
    """

    def __init__(self, name: str, limits: ConnectionLimits) -> None:
        check_uvicorn()
        self.name = name
        self.limits = limits
        #: ``limits.max_connections``; None: MOST_CONNECTIONS (the server gives what files allow)
        self.max_connections = limits.max_connections or default_max_connections(None)
        self.open = 0
        self.refusing = 0  # refused connections still draining
        self.accepted = 0
        self.refused = 0
        self.header_timeouts = 0
        self.idle_timeouts = 0
        self.slow_bodies = 0
        self.oversized_heads = 0
        self.bad_requests = 0
        self._next_log: dict[str, float] = {}
        self._quiet: dict[str, int] = {}

        #: the protocol class for uvicorn: one per listener, so that it finds this guard
        class GuardedHttpToolsProtocol(_GuardedProtocol):
            pass

        GuardedHttpToolsProtocol.guard = self
        self.protocol: type[HttpToolsProtocol] = GuardedHttpToolsProtocol

    def statistics(self) -> ConnectionStatistics:
        """The counters now (each field of :class:`ConnectionStatistics` is this guard's
        attribute of that name; ``listener`` its ``name``)."""
        return ConnectionStatistics(self.name, *(getattr(self, f) for f in _COUNTED))

    def warn(self, kind: str, message: str, *args: Any) -> None:
        """Log ``message`` unless one of this ``kind`` was logged in the last LOG_EVERY s."""
        now = time.monotonic()
        if now < self._next_log.get(kind, 0.0):
            self._quiet[kind] = self._quiet.get(kind, 0) + 1
            return
        self._next_log[kind] = now + LOG_EVERY
        quiet = self._quiet.pop(kind, 0)
        suffix = f" ({quiet} more like this not logged)" if quiet else ""
        logger.warning("%s: " + message + suffix, self.name, *args)


class _Wait(enum.Enum):
    """What a connection's one timer is waiting for."""

    NOTHING = 0
    HEAD = 1  # a complete request head (header_timeout)
    BODY = 2  # the next body_timeout's worth of request body
    IDLE = 3  # the next request (keep_alive_timeout), where the keep-alive timer does not see it
    LINGER = 4  # the end of a refused connection's draining


class _Refused(Exception):
    """Raised in a parser callback to stop parsing; ``data_received`` answers ``_refusal``."""


_BAD_REQUEST = (400, "Invalid HTTP request received.")  # uvicorn's own answer, kept


class _Cork:
    """A connection's transport as its request cycles see it: the first write of a response
    (uvicorn writes the head as soon as the application starts the response) is held until the
    next write, which takes it along in the same system call, or until the end of the event
    loop's turn (``call_soon``), whichever is first: a streamed response's head is never
    held longer than one turn, and the order of bytes is kept. Everything else is the
    transport's own (``close`` writes what is held first)."""

    __slots__ = ("transport", "loop", "held", "armed", "_flush")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self.transport = transport
        self.loop = loop
        self.held: bytes | None = None
        self.armed = False  # the next write begins a response: hold it
        self._flush: asyncio.Handle | None = None  # the end of turn's flush of what is held

    def write(self, data: bytes) -> None:
        held = self.held
        if held is not None:
            self.held = None
            # the usual case (a body written in the head's turn): the flush has nothing left to
            # do; cancelled, the loop drops it without calling it
            self._flush.cancel()  # type: ignore[union-attr]
            self.transport.write(held + data)
        elif self.armed:
            self.armed = False
            self.held = data
            self._flush = self.loop.call_soon(self.flush)
        else:
            self.transport.write(data)

    def flush(self) -> None:
        """Write what is held, if anything."""
        held = self.held
        if held is not None:
            self.held = None
            self._flush.cancel()  # type: ignore[union-attr]
            if not self.transport.is_closing():
                self.transport.write(held)

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


#: The scope key of a request's :class:`LostHook` (the guarded protocol's requests only).
LOST_HOOK = "podium.lost"


class LostHook:
    """Tells a request that its client has left, the moment the connection is lost: the
    application sets ``callback`` while it waits (``server/http/_exchange.py``), instead of
    keeping a task reading ``receive()`` for ``http.disconnect``. In the request's scope as
    :data:`LOST_HOOK`; ``callback`` is called once, on the loop, if set then."""

    #: set on the instance while the application waits; a class default, so that making the
    #: hook of every request runs no ``__init__``
    callback: Callable[[], None] | None = None
    #: the task the connection started to serve the request (``_start_asgi_task``), in which
    #: the listener's app (pure ASGI, Podium's own) serves it: an application that waits for
    #: the client to leave (``Exchange.watch``) need not look it up
    task: asyncio.Task[None] | None = None


class _GuardedProtocol(HttpToolsProtocol):
    guard: ClassVar[ConnectionGuard]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._timer: asyncio.TimerHandle | None = None
        self._waiting = _Wait.NOTHING
        self._admitted = False
        self._closing = False  # refused: draining until the linger ends
        self._refusal: tuple[int, str] | None = None
        # The scope of the last request whose head is complete: a request head is arriving
        # exactly when uvicorn's current scope (made at the head's first byte) is not it.
        self._head_done: Any = None
        self._head_split = False  # the arriving head was left unfinished by a read
        self._head_wire = 0  # bytes of the reads after the one where the head began
        self._chunk = 0  # bytes of the read being parsed
        self._body_wire = 0
        self._body_mark = 0
        self._body_owed = True  # the client owed bytes when the current body window began
        self._hooks: list[LostHook] = []  # the requests of this connection not answered yet
        #: loop time of the last response, while nothing arrived since (keep-alive: see
        #: on_response_complete); None while the connection is not idle
        self._idle_since: float | None = None

    # -- uvicorn's protocol interface ------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._scope = scope_template(self)
        self._cork = _Cork(transport, self.loop)
        guard = self.guard
        if guard.open >= guard.max_connections:
            guard.refused += 1
            guard.warn(
                "max-connections",
                "%d connections open (--max-connections): refusing new ones with 503",
                guard.open,
            )
            if guard.refusing >= guard.max_connections:
                transport.abort()  # a flood: even draining would hold too many descriptors
                return
            guard.refusing += 1
            self._refuse(503, f"more than {guard.max_connections} connections open; retry later")
            return
        self._admitted = True
        guard.open += 1
        guard.accepted += 1
        self._wait(_Wait.HEAD, guard.limits.header_timeout)

    def on_message_begin(self) -> None:
        # uvicorn's, the scope copied from the connection's (see _cycle.scope_template)
        self.url = b""
        self.expect_100_continue = False
        headers: list[tuple[bytes, bytes]] = []
        self.headers = headers
        self.scope = scope = self._scope.copy()  # type: ignore[assignment]
        scope["asgi"] = {"version": self.asgi_version, "spec_version": "2.3"}
        scope["headers"] = headers
        scope["state"] = self.app_state.copy()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._unset_keepalive_if_required()  # (uvicorn's own does only where exc is None)
        if self._admitted:
            self._admitted = False
            self.guard.open -= 1
        elif self._closing:
            self.guard.refusing -= 1
        hooks, self._hooks = self._hooks, []
        super().connection_lost(exc)
        for hook in hooks:
            callback, hook.callback = hook.callback, None
            if callback is not None:
                callback()

    def data_received(self, data: bytes) -> None:
        # uvicorn's data_received, with the limits; keep the common path (a whole request in
        # one read) to a few attribute reads.
        if self._closing:
            return  # refused: drained, not parsed
        self._idle_since = None  # (uvicorn cancels its keep-alive timer here)
        scope = self.scope
        self._chunk = len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            status, reason = self._refusal or _BAD_REQUEST
            if self._refusal is None:
                self.guard.bad_requests += 1
                self.guard.warn("bad-request", "invalid HTTP request from %s", self._peer())
            self._refuse(status, reason)
            return
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self._upgrade()
                return
            # A listener without WebSockets (ws="none"): the request was dispatched as plain
            # HTTP, and the parser goes on with the next request, as uvicorn does.
        cycle = self.cycle
        if (
            self._timer is not None
            or self.scope is not self._head_done
            or (cycle is not None and (cycle.more_body or cycle.response_complete))
        ):
            self._settle(scope, len(data))

    def _upgrade(self) -> None:
        """Hand the connection to uvicorn's WebSocket protocol, which owns it from now on: its
        head was within the limits, and this protocol's timer lets go of it. It stays counted
        against ``--max-connections`` until the WebSocket's connection is lost: a client
        cannot open WebSockets past the bound an HTTP connection has."""
        self._cancel()
        self._unset_keepalive_if_required()
        self.handle_websocket_upgrade()
        protocol = self.transport.get_protocol()
        if protocol is self or not self._admitted:
            return
        self._admitted = False  # the WebSocket's protocol releases the count now
        guard = self.guard
        lost = protocol.connection_lost

        def counted_lost(exc: Exception | None) -> None:
            guard.open -= 1
            lost(exc)

        protocol.connection_lost = counted_lost  # type: ignore[method-assign]

    def on_headers_complete(self) -> None:
        self._head_done = self.scope
        limits = self.guard.limits
        if (
            len(self.url) > limits.max_url_size
            or len(self.headers) > limits.max_headers
            or (
                (self._head_split or self._chunk > limits.max_header_size)
                and self._head_size() > limits.max_header_size
            )
        ):
            self._refusal = self._head_refusal(self._head_size())
            raise _Refused  # httptools stops parsing; data_received answers
        self._head_split = False
        hook = LostHook()
        self.scope[LOST_HOOK] = hook  # type: ignore[literal-required]
        before = self.cycle
        start_cycle(self, self._cork)
        cycle = self.cycle
        if cycle is not before:
            alone = before is None or before.response_complete  # (not pipelined)
            self._cork.armed = alone
            if alone:
                self._hooks = [hook]
            else:
                self._hooks.append(hook)

    def _start_asgi_task(self, cycle: Any, app: Any) -> None:
        """uvicorn's, with the task noted on the request's ``LostHook`` (its ``task``)."""
        if self.config.reset_contextvars:  # (uvicorn's opt-in empty context: its own way)
            super()._start_asgi_task(cycle, app)
            return
        task = self.loop.create_task(cycle.run_asgi(app))
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)
        hook = cycle.scope.get(LOST_HOOK)
        if hook is not None:
            hook.task = task

    def on_response_complete(self) -> None:
        # uvicorn's, but for the keep-alive timer. uvicorn makes a timer at every response and
        # cancels it at the next request's first byte: a libuv timer made and closed per
        # request, where a busy connection's timer never rings. Here the connection keeps one,
        # armed at a response when none is, and _idle_since says since when it has been idle;
        # when it rings, _keep_alive_rang closes the connection only if it is still idle since
        # then and for keep_alive_timeout, else waits again for the rest (or for the next
        # response, if a request came in). Every connection is still closed at
        # keep_alive_timeout after its last response, as by uvicorn's timer.
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self.flow.resume_reading()
        if self.pipeline:  # a pipelined request was waiting: start it
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
            return
        self._idle_since = self.loop.time()
        if self.timeout_keep_alive_task is None:
            self.timeout_keep_alive_task = self.loop.call_later(
                self.timeout_keep_alive, self._keep_alive_rang
            )

    def _keep_alive_rang(self) -> None:
        self.timeout_keep_alive_task = None
        idle_since = self._idle_since
        if idle_since is None or self.transport.is_closing():
            return  # bytes arrived since (a request, or _settle's IDLE wait if they began none)
        left = idle_since + self.timeout_keep_alive - self.loop.time()
        if left > 0:  # a later response: its own deadline
            self.timeout_keep_alive_task = self.loop.call_later(left, self._keep_alive_rang)
        else:
            self.timeout_keep_alive_handler()

    def timeout_keep_alive_handler(self) -> None:
        if not self.transport.is_closing():
            self.guard.idle_timeouts += 1
        super().timeout_keep_alive_handler()

    def shutdown(self) -> None:
        if self._closing:
            self.transport.close()
            return
        super().shutdown()

    # -- the limits ------------------------------------------------------------------------------

    def _settle(self, scope_before: Any, received: int) -> None:
        """After a read (or a timer): check the arriving head, arm the timer the state needs."""
        limits = self.guard.limits
        cycle = self.cycle
        if self.scope is not self._head_done:  # a request head is arriving
            if self.scope is scope_before and self._head_split:
                self._head_wire += received
            else:  # it began in this read, maybe after another request's bytes: not counted
                self._head_split = True
                self._head_wire = 0
            refusal = self._head_refusal(max(self._head_wire, self._head_size()))
            if refusal is not None:
                self._refuse(*refusal)
            elif self._waiting is not _Wait.HEAD:
                self._wait(_Wait.HEAD, limits.header_timeout)
        elif cycle is not None and not cycle.response_complete:  # a request is being served
            if cycle.more_body:  # its body is arriving
                self._body_wire += received
                if self._waiting is not _Wait.BODY:
                    self._body_mark = self._body_wire
                    self._body_owed = not self._excused(cycle)
                    self._wait(_Wait.BODY, limits.body_timeout)
            elif self._timer is not None:
                self._cancel()
        elif self._waiting not in (_Wait.HEAD, _Wait.IDLE):  # idle between requests
            # Bytes that begin no request (blank lines) end the keep-alive timer's idle time
            # (_idle_since), and a body that ends after its response never starts it again. A
            # deadline already set is kept: trickled bytes do not extend it.
            if self._idle_since is None:  # (the keep-alive timer does not see the connection idle)
                self._wait(_Wait.IDLE, limits.keep_alive_timeout)
            else:
                self._cancel()

    def _head_size(self) -> int:
        """Bytes of the arriving head's target and complete header fields (as on the wire)."""
        return len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)

    def _head_refusal(self, size: int) -> tuple[int, str] | None:
        limits = self.guard.limits
        if len(self.url) > limits.max_url_size:
            answer = (
                414,
                f"request target longer than {limits.max_url_size} bytes (--max-url-size)",
            )
        elif len(self.headers) > limits.max_headers:
            answer = (431, f"more than {limits.max_headers} header fields (--max-headers)")
        elif size > limits.max_header_size:
            answer = (
                431,
                f"request head larger than {limits.max_header_size} bytes (--max-header-size)",
            )
        else:
            return None
        self.guard.oversized_heads += 1
        self.guard.warn("oversized-head", "%s from %s", answer[1], self._peer())
        return answer

    def _wait(self, what: _Wait, seconds: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._waiting = what
        self._timer = self.loop.call_later(seconds, self._expired)

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._waiting = _Wait.NOTHING

    def _expired(self) -> None:
        what = self._waiting
        self._timer = None
        self._waiting = _Wait.NOTHING
        if self.transport.is_closing():
            return
        if what is _Wait.HEAD:
            self._head_expired()
        elif what is _Wait.BODY:
            self._body_expired()
        elif what is _Wait.IDLE:
            self.guard.idle_timeouts += 1
            self.transport.close()
        elif what is _Wait.LINGER:
            self.transport.close()

    def _head_expired(self) -> None:
        limits = self.guard.limits
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            # A pipelined head behind a response under way: it cannot be answered before that
            # response, and its reading is paused meanwhile; wait again.
            self._wait(_Wait.HEAD, limits.header_timeout)
            return
        self.guard.header_timeouts += 1
        if self.scope is self._head_done:  # nothing of a request arrived: nothing to answer
            self.transport.close()
            return
        reason = f"no complete request head within {limits.header_timeout:g} s (--header-timeout)"
        self.guard.warn("header-timeout", "%s from %s", reason, self._peer())
        self._refuse(408, reason)

    def _body_expired(self) -> None:
        limits = self.guard.limits
        cycle = self.cycle
        if (
            cycle is None
            or cycle.response_complete
            or not cycle.more_body
            or self.scope is not self._head_done
        ):
            self._settle(self.scope, 0)  # the body ended meanwhile
            return
        progress = self._body_wire - self._body_mark
        self._body_mark = self._body_wire
        owed, excused = self._body_owed, self._excused(cycle)
        self._body_owed = not excused
        # A window is judged only if the client owed bytes through all of it: not one that
        # ended, or began, while the fault was not the client's (100 Continue sent just before
        # the window closed leaves the client the whole next window to answer it).
        if progress >= max(1, limits.min_body_rate * limits.body_timeout) or excused or not owed:
            self._wait(_Wait.BODY, limits.body_timeout)
            return
        self.guard.slow_bodies += 1
        reason = (
            f"request body slower than {limits.min_body_rate} bytes/s over "
            f"{limits.body_timeout:g} s (--min-body-rate, --body-timeout)"
        )
        self.guard.warn("slow-body", "%s from %s", reason, self._peer())
        self._refuse(408, reason, answers=cycle)

    def _excused(self, cycle: RequestResponseCycle) -> bool:
        """Not the client's fault that no body arrives: the application has not read what did
        (reading is paused past uvicorn's high-water mark), or the client waits for 100
        Continue."""
        return bool(cycle.body) or self.flow.read_paused or cycle.waiting_for_100_continue

    def _refuse(
        self, status: int, reason: str, *, answers: RequestResponseCycle | None = None
    ) -> None:
        """Answer ``status`` (with ``Connection: close``), then drain and close.

        ``answers`` is the request the answer is for (a slow body's); an answer to no request
        (a head refused before its request exists) cannot be sent while another response is
        under way: the connection is closed instead.
        """
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            if cycle is not answers or cycle.response_started:
                self.transport.close()
                return
            # The application sees a disconnect, and what it sends is dropped.
            cycle.disconnected = True
            cycle.message_event.set()
        self._cork.flush()
        body = reason.encode()
        head = [b"HTTP/1.1 %d %s\r\n" % (status, http.HTTPStatus(status).phrase.encode())]
        for name, value in self.server_state.default_headers:
            head.append(b"%s: %s\r\n" % (name, value))
        head.append(
            b"content-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\n"
            b"connection: close\r\n\r\n" % len(body)
        )
        transport = self.transport
        transport.write(b"".join(head) + body)
        self._closing = True
        self._unset_keepalive_if_required()
        self.flow.resume_reading()  # drain what the client still sends
        if transport.can_write_eof():
            transport.write_eof()  # once the answer is out
        self._wait(_Wait.LINGER, LINGER)

    def _peer(self) -> str:
        return f"{self.client[0]}:{self.client[1]}" if self.client else "a client"
