"""``mlserver.metrics.errors``: what a custom metric call raises (500s, as in MLServer)."""

from __future__ import annotations

from typing import Any

from ..errors import MLServerError

__all__ = ["InvalidModelContext", "MetricNotFound"]


class InvalidModelContext(MLServerError):
    """A metric was registered or logged outside any model's call."""

    def __init__(self) -> None:
        super().__init__(
            "Contextual method (e.g. mlserver.log() or mlserver.register()) was called outside "
            "of a model context. ",
            500,
        )


class MetricNotFound(MLServerError):
    """No metric of that name, or one that is not a histogram ``log`` can observe."""

    def __init__(self, metric_name: str, collector: Any = None) -> None:
        message = f"No metric found with name '{metric_name}'"
        if collector is not None:
            message = (
                f"Invalid metric found with name '{metric_name}'. Object is of type "
                f"'{type(collector)}' instead of 'MetricWrapperBase'."
            )
        super().__init__(message, 500)
