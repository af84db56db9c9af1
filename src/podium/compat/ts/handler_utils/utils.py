"""``ts.handler_utils.utils``: ``import_class``, and the streaming helper newer TorchServe
exports here too."""

from __future__ import annotations

import importlib
from typing import Any

from ..protocol.otf_message_handler import send_intermediate_predict_response

__all__ = ["import_class", "send_intermediate_predict_response"]


def import_class(class_name: str, module_prefix: str | None = None) -> Any:
    """The class named ``module.Class`` (``module`` under ``module_prefix`` when given; with a
    prefix, a bare ``Class`` is looked up in the prefix module itself)."""
    if not class_name:
        raise ImportError("class name is not defined")
    module_name, _, name = class_name.rpartition(".")
    if module_prefix:
        target = f"{module_prefix}.{module_name}" if module_name else module_prefix
    elif module_name:
        target = module_name
    else:
        raise ImportError(f"module name is not defined for class {name!r}")
    found = getattr(importlib.import_module(target), name, None)
    if found is None:
        raise ImportError(f"class {name!r} not found in module {target!r}")
    return found
