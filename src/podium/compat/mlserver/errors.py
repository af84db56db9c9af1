"""``mlserver.errors``: errors a runtime raises on purpose, each with the HTTP status to answer.

Podium maps ``status_code`` onto its own error table when a runtime raises one of these: 400 and
422 → ``InvalidInput`` (400), 404 → ``NotFound``, 503 → ``Unavailable``, anything else →
``ModelError`` (500). See ``docs/mlserver.md``.
"""

from __future__ import annotations

__all__ = [
    "InferenceError",
    "InvalidModelURI",
    "MLServerError",
    "ModelNotFound",
    "ModelNotReady",
    "ModelParametersMissing",
]

_BAD_REQUEST = 400
_NOT_FOUND = 404
_UNPROCESSABLE = 422


class MLServerError(Exception):
    """An error with the HTTP status code the client gets (400 unless given)."""

    def __init__(self, msg: str, status_code: int = _BAD_REQUEST) -> None:
        super().__init__(msg)
        self.status_code = status_code


class InvalidModelURI(MLServerError):
    def __init__(self, name: str, model_uri: str | None = None) -> None:
        where = f" ({model_uri})" if model_uri else ""
        super().__init__(f"Invalid URI specified for model {name}{where}", _UNPROCESSABLE)


class ModelNotFound(MLServerError):
    def __init__(self, name: str, version: str | None = None) -> None:
        which = f"Model {name}" if version is None else f"Model {name} with version {version}"
        super().__init__(f"{which} not found", _NOT_FOUND)


class ModelNotReady(MLServerError):
    def __init__(self, name: str, version: str | None = None) -> None:
        which = f"Model {name}" if version is None else f"Model {name} with version {version}"
        super().__init__(f"{which} is not ready yet.", _BAD_REQUEST)


class InferenceError(MLServerError):
    def __init__(self, msg: str) -> None:
        super().__init__(msg, _BAD_REQUEST)


class ModelParametersMissing(MLServerError):
    def __init__(self, model_name: str) -> None:
        super().__init__(f"Parameters missing for model {model_name}", _BAD_REQUEST)
