"""TorchServe's error bodies, for the routes that speak TorchServe's APIs (its inference routes
and its management API): ``{"code": <status>, "type": "<exception>", "message": "..."}``.

The status is Podium's, from the one table in ``errors.py``; ``type`` is the name of the
exception TorchServe 0.12's frontend answers the same failure with, so that clients that test
it (``ModelNotFoundException`` against ``ModelVersionNotFoundException``, say) keep working.
"""

from __future__ import annotations

from typing import Any

from ..errors import (
    Conflict,
    InvalidInput,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    PodiumError,
    SequenceClosed,
    Unauthenticated,
    Unavailable,
    ValidationFailed,
    VersionNotFound,
    http_status,
)

__all__ = ["NoRoute", "torchserve_error", "torchserve_type"]


class NoRoute(NotFound):
    """No route of the listener has this path (TorchServe's ``ResourceNotFoundException``)."""


#: Podium's error class → TorchServe's exception name, most specific first. What is not here
#: is ``InternalServerException``: TorchServe's name for every failure of a handler (whatever
#: status a ``PredictionException`` asked for) and of the server.
_TYPES: tuple[tuple[type[PodiumError], str], ...] = (
    (NoRoute, "ResourceNotFoundException"),
    (VersionNotFound, "ModelVersionNotFoundException"),
    (NotFound, "ModelNotFoundException"),
    (Conflict, "ConflictStatusException"),
    (InvalidInput, "BadRequestException"),
    (PayloadTooLarge, "BadRequestException"),
    (MethodNotAllowed, "MethodNotAllowedException"),
    (Unavailable, "ServiceUnavailableException"),
    # TorchServe refuses a request of a closed or expired sequence as a job it cannot queue
    (SequenceClosed, "ServiceUnavailableException"),
    (Unauthenticated, "InvalidKeyException"),
)


def torchserve_type(exc: PodiumError) -> str:
    """TorchServe's name for the error, in the ``type`` field of an error body."""
    for cls, name in _TYPES:
        if isinstance(exc, cls):
            return name
    return "InternalServerException"


def torchserve_error(exc: PodiumError) -> tuple[int, dict[str, Any]]:
    """The status and TorchServe's error body for ``exc`` (with Podium's ``details`` of a
    model's failed schema, as on every route)."""
    status = http_status(exc)
    body: dict[str, Any] = {"code": status, "type": torchserve_type(exc), "message": exc.message}
    if isinstance(exc, ValidationFailed) and exc.details:
        body["details"] = exc.details
    return status, body
