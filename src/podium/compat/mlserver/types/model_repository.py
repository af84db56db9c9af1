"""The model repository extension's messages, as MLServer names them."""

from __future__ import annotations

import enum

from pydantic import Field, RootModel

from .base import BaseModel, ListRoot

__all__ = [
    "RepositoryIndexRequest",
    "RepositoryIndexResponse",
    "RepositoryIndexResponseItem",
    "RepositoryLoadErrorResponse",
    "RepositoryUnloadErrorResponse",
    "State",
]


class State(enum.Enum):
    UNKNOWN = "UNKNOWN"
    READY = "READY"
    UNAVAILABLE = "UNAVAILABLE"
    LOADING = "LOADING"
    UNLOADING = "UNLOADING"


class RepositoryIndexRequest(BaseModel):
    ready: bool | None = None


class RepositoryIndexResponseItem(BaseModel):
    name: str
    version: str | None = None
    state: State
    reason: str


class RepositoryIndexResponse(ListRoot, RootModel[list[RepositoryIndexResponseItem]]):  # type: ignore[misc]
    root: list[RepositoryIndexResponseItem] = Field(..., title="RepositoryIndexResponse")


class RepositoryLoadErrorResponse(BaseModel):
    error: str | None = None


class RepositoryUnloadErrorResponse(BaseModel):
    error: str | None = None
