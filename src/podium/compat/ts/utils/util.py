"""``ts.utils.util``: the helpers handlers import from it.

``map_class_to_label``, ``CLEANUP_REGEX``, ``get_yaml_config``, ``PT2Backend``,
``check_valid_pt2_backend`` and ``deprecated`` behave as TorchServe 0.12's; the rest re-exports
``podium.model.torchserve``'s objects (one class under every import path).
"""

from __future__ import annotations

import enum
import functools
import logging
import re
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import yaml

from podium.model.torchserve import (
    PredictionException,
    list_classes_from_module,
    load_label_mapping,
)

__all__ = [
    "CLEANUP_REGEX",
    "PT2Backend",
    "PredictionException",
    "check_valid_pt2_backend",
    "deprecated",
    "get_yaml_config",
    "list_classes_from_module",
    "load_label_mapping",
    "map_class_to_label",
]

logger = logging.getLogger("ts.utils.util")  # TorchServe's name, under either import path

#: An HTML tag or an entity (``&amp;``, ``&#39;``, ``&#x27;``): what text handlers strip.
CLEANUP_REGEX = re.compile("<.*?>|&([a-z0-9]+|#[0-9]{1,6}|#x[0-9a-f]{1,6});")


class PT2Backend(str, enum.Enum):  # noqa: UP042 - str() is "PT2Backend.EAGER" as on TorchServe
    """The ``torch.compile`` backends a model's ``pt2`` config may name."""

    EAGER = "eager"
    AOT_EAGER = "aot_eager"
    INDUCTOR = "inductor"
    NVFUSER = "nvfuser"
    AOT_NVFUSER = "aot_nvfuser"
    AOT_CUDAGRAPHS = "aot_cudagraphs"
    OFI = "ofi"
    FX2TRT = "fx2trt"
    ONNXRT = "onnxrt"
    IPEX = "ipex"
    TORCHXLA_TRACE_ONCE = "torchxla_trace_once"
    OPENVINO = "openvino"
    TENSORRT = "tensorrt"
    HPU_BACKEND = "hpu_backend"


def check_valid_pt2_backend(backend: str) -> bool:
    """Whether ``backend`` is one of :class:`PT2Backend` (a warning when it is not)."""
    if backend in {member.value for member in PT2Backend}:
        return True
    logger.warning("%s is not a supported backend", backend)
    return False


def map_class_to_label(
    probs: list[Any],
    mapping: dict[str, Any] | None = None,
    lbl_classes: Iterable[Sequence[Any]] | None = None,
) -> list[dict[Any, Any]]:
    """One ``{label: value}`` dict per row of ``probs``.

    ``lbl_classes`` gives each row's class ids (else 0, 1, ... for the length of the first row);
    a class id is looked up as ``mapping[str(id)]``, or is ``str(id)`` without a mapping.
    """
    if not isinstance(probs, list):
        raise TypeError("map_class_to_label: convert the probabilities to a list first")
    if mapping is not None and not isinstance(mapping, dict):
        raise TypeError("map_class_to_label: the mapping must be a dict")
    if lbl_classes is None:
        width = len(probs[0]) if probs else 0
        lbl_classes = [range(width)] * len(probs)
    rows = []
    for classes, values in zip(lbl_classes, probs, strict=False):
        row = {}
        for cls, value in zip(classes, values, strict=False):
            row[mapping[str(cls)] if mapping is not None else str(cls)] = value
        rows.append(row)
    return rows


def get_yaml_config(yaml_file_path: str) -> Any:
    """The YAML file's content, parsed safely (``None`` for an empty file)."""
    with open(yaml_file_path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def deprecated(
    version: str, replacement: str = "", klass: type[Warning] = PendingDeprecationWarning
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a function to warn (``klass``) on each call that it goes away in ``version``."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            warnings.warn(
                f"{func.__name__} is deprecated in {version} and moved to {replacement}",
                klass,
                stacklevel=2,
            )
            return func(*args, **kwargs)

        return wrapper

    return decorate
