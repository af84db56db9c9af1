"""The model repository extension's messages, as MLServer names them."""

from __future__ import annotations

import enum
from collections.abc import Iterator
from typing import Any

from pydantic import Field, RootModel

from .base import BaseModel

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


class RepositoryIndexResponse(RootModel[list[RepositoryIndexResponseItem]]):
    root: list[RepositoryIndexResponseItem] = Field(..., title="RepositoryIndexResponse")

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        return iter(self.root)

    def __getitem__(self, index: Any) -> Any:
        return self.root[index]

    def __len__(self) -> int:
        return len(self.root)


class RepositoryLoadErrorResponse(BaseModel):
    error: str | None = None


class RepositoryUnloadErrorResponse(BaseModel):
    error: str | None = None
