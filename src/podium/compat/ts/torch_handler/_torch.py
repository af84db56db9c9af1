"""``torch`` for the default handlers, or an ImportError that says what to install."""

try:
    import torch
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "TorchServe's default handlers need torch (and Pillow for images): "
        "pip install 'podium[torchserve-handlers]'"
    ) from exc

__all__ = ["torch"]
