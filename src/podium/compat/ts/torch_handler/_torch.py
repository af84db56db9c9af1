"""``torch`` (and ``captum.attr``) for the default handlers, or an ImportError that says what
to install."""

from typing import Any

try:
    import torch
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "TorchServe's default handlers need torch (and Pillow for images): "
        "pip install 'podium[torchserve-handlers]'"
    ) from exc

__all__ = ["captum_attr", "torch"]


def captum_attr() -> Any:
    """``captum.attr``, which the default handlers' explanations use, or what to install."""
    try:
        import captum.attr
    except ImportError as exc:
        raise ImportError(
            "explanations of TorchServe's default handlers need captum (pip install captum)"
        ) from exc
    return captum.attr
