"""``ts.metrics.metric_type_enum``: counter, gauge or histogram."""

from podium.model.torchserve import MetricTypes

__all__ = ["MetricTypes"]
