"""Each gRPC call's id, key check, access line and span: a wrapper around every method handler.

:func:`observed` wraps a service's ``grpc.aio``-style handler (before the bridge adapts it). It
takes the call's id from the ``x-request-id`` metadata (or makes one), sets it as the current
request for everything below, sends it back as trailing metadata (``x-request-id``: set first,
so every ending, an abort included, carries it; a handler that sets trailing metadata of its own
adds it, see ``_oip.py``), checks the call's key where the listener wants one (``authorize``,
before the handler runs: a refused call has its line too), and when the call has ended (a
stream at its end) writes its access line: the RPC, its status code, bytes in and out (the
messages' sizes, asked only when a line is written), the peer. Server reflection is not
wrapped.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from ... import tracing
from ...errors import InvalidInput, PodiumError, grpc_code
from ...types import current_request
from .._access import (
    CACHE_METADATA,
    ID_METADATA,
    PRIORITY_METADATA,
    Access,
    AccessLog,
    RequestIds,
    ask_of_queue,
    cache_control,
    client_id,
)
from ._errors import abort_with
from .bridge import Aborted

__all__ = ["Authorize", "Lines", "code_of", "observed"]

_now = time.perf_counter_ns

#: The access log and the request ids of a listener's calls.
Lines = tuple[AccessLog, RequestIds]
#: Checks a call's metadata (its key), raising when the call may not go on.
Authorize = Callable[[Any], None] | None
#: Each status code's number and name, as the access line writes them: ``code.value`` and
#: ``code.name`` are enum descriptors, a Python call each on every call's line.
_LINE_CODES = {code: (code.value[0], code.name) for code in grpc.StatusCode}


def code_of(exc: BaseException | None, context: Any = None) -> grpc.StatusCode:
    """The status code a call ends with when its handler ends with ``exc`` (None: returned),
    as ``_errors.status_of`` decides it, without logging anything."""
    if exc is None:
        return grpc.StatusCode.OK
    if isinstance(exc, Aborted):
        return exc.code
    if isinstance(exc, grpc.aio.AbortError):  # grpc.aio's own abort: the context knows
        code = context.code() if context is not None else None
        return code if isinstance(code, grpc.StatusCode) else grpc.StatusCode.UNKNOWN
    if isinstance(exc, asyncio.CancelledError):
        return grpc.StatusCode.CANCELLED
    if isinstance(exc, PodiumError):
        return grpc.StatusCode[grpc_code(exc)]
    return grpc.StatusCode.UNKNOWN


class _Observer:
    """What every wrapped call of one method shares."""

    __slots__ = ("path", "name", "protocol", "log", "ids", "authorize")

    def __init__(self, path: str, name: str, protocol: str, access: Lines, authorize: Authorize):
        self.path = path
        self.name = name
        self.protocol = protocol
        self.log, self.ids = access
        self.authorize = authorize

    async def check(self, context: Any) -> None:
        """End the call unless ``authorize`` passes its metadata (called only when set)."""
        try:
            self.authorize(context.invocation_metadata())  # type: ignore[misc]
        except Exception as exc:
            await abort_with(context, exc)

    def begin(self, context: Any) -> Access:
        start = _now()
        metadata = context.invocation_metadata()
        sent = priority = cache = None
        for key, value in metadata or ():
            if key == ID_METADATA:
                sent = value
            elif key == PRIORITY_METADATA:
                priority = value
            elif key == CACHE_METADATA:
                cache = value
        found = client_id(sent)
        access = Access(self.ids.make() if found is None else found, found is not None, start)
        if cache is not None:
            access.cache = cache_control(cache)
        access.context = context
        remaining = context.time_remaining()
        if remaining is not None:  # the call's deadline bounds its wait in the model's queue
            access.deadline = time.monotonic() + remaining
        if priority is not None:
            try:
                ask_of_queue(access, PRIORITY_METADATA, priority)
            except InvalidInput:
                access.priority = -1  # not a level: the data plane refuses it (INVALID_ARGUMENT)
        context.set_trailing_metadata(((ID_METADATA, access.id),))
        hooks = tracing.hooks
        if hooks is not None:
            access.span = hooks.grpc_request(self.path, metadata)
        current_request.set(access)  # the call's own task: nothing to reset
        return access

    def end(self, access: Access, exc: BaseException | None) -> None:
        context, access.context = access.context, None  # (no cycle through the call's context)
        if access.span is None and not self.log.wants():
            return
        access.ended()
        access.status, access.code = _LINE_CODES[code_of(exc, context)]
        access.protocol = self.protocol
        access.route = self.name
        access.path = self.path
        access.peer = _peer(context)
        hooks = tracing.hooks
        if access.span is not None and hooks is not None:
            hooks.grpc_ended(access.span, access)
        self.log.write(access)


def observed(
    service: str,
    name: str,
    method: grpc.RpcMethodHandler,
    protocol: str,
    access: Lines,
    authorize: Authorize = None,
) -> grpc.RpcMethodHandler:
    """``method`` (RPC ``name`` of ``service``, whose calls' lines say ``protocol``), with each
    call's id, access line (``access``: the log and the ids) and span, and
    ``authorize(metadata)`` first if given (see the module's docstring); its messages parsed
    and written as before. A stream-unary method (Podium serves none) is refused."""
    observer = _Observer(f"/{service}/{name}", name, protocol, access, authorize)
    parse, render = method.request_deserializer, method.response_serializer
    if method.response_streaming:
        streamed = method.request_streaming
        behavior = method.stream_stream if streamed else method.unary_stream
        make = (
            grpc.stream_stream_rpc_method_handler
            if streamed
            else grpc.unary_stream_rpc_method_handler
        )
        return make(
            _stream(observer, behavior, streamed),
            request_deserializer=parse,
            response_serializer=render,
        )
    if method.request_streaming:
        raise ValueError("stream-unary methods are not observed (Podium serves none)")
    return grpc.unary_unary_rpc_method_handler(
        _unary(observer, method.unary_unary),
        request_deserializer=parse,
        response_serializer=render,
    )


def _unary(observer: _Observer, behavior: Any) -> Any:
    """A unary handler like ``behavior``, observed."""

    async def serve(request: Any, context: Any) -> Any:
        access = observer.begin(context)
        counting = observer.log.wants()
        if counting:
            access.bytes_in = request.ByteSize()
        try:
            if observer.authorize is not None:
                await observer.check(context)
            response = await behavior(request, context)
        except BaseException as exc:
            observer.end(access, exc)
            raise
        if counting and response is not None:
            access.bytes_out = response.ByteSize()
        observer.end(access, None)
        return response

    return serve


def _stream(observer: _Observer, behavior: Any, streamed: bool) -> Any:
    """A streaming handler like ``behavior`` (an async generator, or a coroutine that writes
    with ``context.write``), observed."""

    def counted(request: Any, access: Any) -> Any:
        if streamed:
            return _CountIn(request, access)
        access.bytes_in = request.ByteSize()
        return request

    if inspect.isasyncgenfunction(behavior):

        async def serve_items(request: Any, context: Any) -> AsyncIterator[Any]:
            access = observer.begin(context)
            counting = observer.log.wants()
            if counting:
                request = counted(request, access)
            failure: BaseException | None = None
            try:
                if observer.authorize is not None:
                    await observer.check(context)
                async with contextlib.aclosing(behavior(request, context)) as items:
                    async for item in items:
                        if counting:
                            access.bytes_out += item.ByteSize()
                        yield item
            except BaseException as exc:
                failure = exc
                raise
            finally:
                observer.end(access, failure)

        return serve_items

    async def serve(request: Any, context: Any) -> None:
        access = observer.begin(context)
        if observer.log.wants():
            request = counted(request, access)
            context = _Counting(context, access)
        try:
            if observer.authorize is not None:
                await observer.check(context)
            await behavior(request, context)
        except BaseException as exc:
            observer.end(access, exc)
            raise
        observer.end(access, None)

    return serve


class _CountIn:
    """A request stream that counts the bytes of each message read. Not an async generator: a
    message that does not parse raises in the handler, which may read on (a generator would
    end there)."""

    __slots__ = ("_requests", "_access")

    def __init__(self, requests: AsyncIterator[Any], access: Access) -> None:
        self._requests = aiter(requests)
        self._access = access

    def __aiter__(self) -> _CountIn:
        return self

    async def __anext__(self) -> Any:
        message = await anext(self._requests)
        self._access.bytes_in += message.ByteSize()
        return message


class _Counting:
    """A call's context whose ``write`` counts the bytes of each message it sends."""

    __slots__ = ("_context", "_access")

    def __init__(self, context: Any, access: Access) -> None:
        self._context = context
        self._access = access

    async def write(self, message: Any) -> None:
        self._access.bytes_out += message.ByteSize()
        await self._context.write(message)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)


def _peer(context: Any) -> str | None:
    """``ipv4:127.0.0.1:5000`` → ``127.0.0.1:5000`` (``ipv6:[::1]:5000`` → ``[::1]:5000``)."""
    try:
        peer = context.peer()
    except Exception:  # a call already gone may not say
        return None
    if not isinstance(peer, str):
        return None
    kind, _, address = peer.partition(":")
    return address if kind in ("ipv4", "ipv6") else peer
