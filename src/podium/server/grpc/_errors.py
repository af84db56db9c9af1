"""The one place where an exception becomes a gRPC status.

A :class:`~podium.errors.PodiumError` takes its code from the single table in ``errors.py`` and
keeps its message (bounded, as every message a client gets: :func:`podium.errors.bounded`); anything else is a bug (in Podium or in a conversion), logged with its
traceback and answered ``INTERNAL`` with its type and text. Every handler ends in
:func:`abort_with`, so no exception ever leaves a handler unhandled and gRPC's own generic
"Unexpected error" never reaches a client.
"""

from __future__ import annotations

import logging
from typing import Any, NoReturn

import grpc

from ...errors import PodiumError, bounded, grpc_code

__all__ = ["ReplyFailed", "abort_with", "status_of"]

logger = logging.getLogger("podium.grpc")


class ReplyFailed(Exception):
    """A model answered with an HTTP error status (e.g. TorchServe's ``set_response_status``),
    which becomes the gRPC status ``code`` with ``message``."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def status_of(exc: BaseException, where: str = "") -> tuple[grpc.StatusCode, str]:
    """The status code and message a client gets for ``exc`` (logged if unexpected)."""
    if isinstance(exc, PodiumError):  # its message is bounded already
        return grpc.StatusCode[grpc_code(exc)], exc.message
    if isinstance(exc, ReplyFailed):  # a model's own words: bounded as an error's
        return exc.code, bounded(exc.message)
    logger.error("unexpected error serving %s", where or "a gRPC call", exc_info=exc)
    return grpc.StatusCode.INTERNAL, bounded(f"internal error: {type(exc).__name__}: {exc}")


async def abort_with(context: Any, exc: BaseException, where: str = "") -> NoReturn:
    """End the call with the status for ``exc`` (raises, as ``context.abort`` does)."""
    code, message = status_of(exc, where)
    await context.abort(code, message)
    raise AssertionError("context.abort returned")  # pragma: no cover - it always raises
