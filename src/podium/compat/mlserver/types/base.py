"""The base of every MLServer message: a pydantic model that dumps without unset or None fields."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pydantic


class BaseModel(pydantic.BaseModel):
    """A pydantic model whose ``model_dump`` / ``model_dump_json`` leave out fields that were never
    set or are ``None`` unless asked otherwise, so a message dumps as it was sent (MLServer's rule)."""

    model_config = pydantic.ConfigDict(protected_namespaces=(), use_enum_values=True)

    def model_dump(
        self, exclude_unset: bool = True, exclude_none: bool = True, **kwargs: Any
    ) -> dict[str, Any]:
        return super().model_dump(exclude_unset=exclude_unset, exclude_none=exclude_none, **kwargs)

    def model_dump_json(
        self, exclude_unset: bool = True, exclude_none: bool = True, **kwargs: Any
    ) -> str:
        return super().model_dump_json(
            exclude_unset=exclude_unset, exclude_none=exclude_none, **kwargs
        )


class ListRoot:
    """A ``RootModel`` of a list read as the list itself: iterated, indexed, measured."""

    root: Any

    def __iter__(self) -> Iterator[Any]:
        return iter(self.root)

    def __getitem__(self, index: Any) -> Any:
        return self.root[index]

    def __len__(self) -> int:
        return len(self.root)
