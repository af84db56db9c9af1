"""``ts.metrics.dimension``: a metric's dimension (a label)."""

from podium.model.torchserve import Dimension

__all__ = ["Dimension"]
