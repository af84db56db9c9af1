"""The one place where an exception becomes a gRPC status.

:func:`status_of` decides for every gRPC answer, whichever server serves it:

- a :class:`~podium.errors.PodiumError` takes its code from the single table in ``errors.py``
  and keeps its message (bounded, as every message a client gets:
  :func:`podium.errors.bounded`);
- the bridge's ``Aborted`` (a handler's ``context.abort``) carries its own code and message;
- ``asyncio.CancelledError`` is ``CANCELLED`` (the client is gone or the server stops);
- anything else is a bug (in Podium or in a conversion), logged with its traceback, and answered
  ``INTERNAL`` with its type and text where a handler caught it (:func:`abort_with`), ``UNKNOWN``
  with grpc's own words where it escaped a handler (``unhandled=True``: what grpc answers
  itself, so the relayed and ``grpc.aio`` servers agree).

Every Podium handler ends in :func:`abort_with`, so no exception ever leaves one unhandled and
gRPC's own generic "Unexpected error" never reaches a client.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

import grpc

from ...errors import PodiumError, bounded, grpc_code
from .._access import with_request_id
from .bridge import Aborted

__all__ = ["abort_with", "guarded", "status_of", "unhandled_status"]

logger = logging.getLogger("podium.grpc")


def status_of(
    exc: BaseException, where: str = "", *, unhandled: bool = False
) -> tuple[grpc.StatusCode, str]:
    """The status code and message a client gets for ``exc`` (logged if unexpected);
    ``unhandled``: it escaped the handler (see the module's docstring)."""
    if isinstance(exc, PodiumError):  # its message is bounded already
        return grpc.StatusCode[grpc_code(exc)], exc.message
    if isinstance(exc, Aborted):
        return exc.code, exc.details
    if isinstance(exc, asyncio.CancelledError):
        return grpc.StatusCode.CANCELLED, "the call was cancelled"
    logger.error("unexpected error serving %s", where or "a gRPC call", exc_info=exc)
    if unhandled:
        return grpc.StatusCode.UNKNOWN, bounded(f"Exception calling application: {exc}")
    return grpc.StatusCode.INTERNAL, bounded(f"internal error: {type(exc).__name__}: {exc}")


def unhandled_status(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """:func:`status_of` an exception that escaped a handler: what the bridge ends a call with."""
    return status_of(exc, unhandled=True)


async def abort_with(context: Any, exc: BaseException, where: str = "") -> NoReturn:
    """End the call with the status for ``exc`` (raises, as ``context.abort`` does)."""
    code, message = status_of(exc, where)
    retry_after = getattr(exc, "retry_after", None)
    if retry_after is not None:  # an overloaded model's refusal: when to try again
        context.set_trailing_metadata(
            with_request_id((("retry-after", str(max(1, math.ceil(retry_after)))),))
        )
    await context.abort(code, message)
    raise AssertionError("context.abort returned")  # pragma: no cover - it always raises


def guarded(
    handler: Callable[[Any, Any], Awaitable[Any]], where: str
) -> Callable[[Any, Any], Awaitable[Any]]:
    """The unary ``handler`` (method ``where``) with its every failure ending the call through
    :func:`abort_with`; grpc's own abort passes as it is."""

    async def serve(message: Any, context: Any) -> Any:
        try:
            return await handler(message, context)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            await abort_with(context, exc, where)

    return serve
