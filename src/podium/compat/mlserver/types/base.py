"""The base of every MLServer message: a pydantic model that dumps without unset or None fields."""

from __future__ import annotations

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
