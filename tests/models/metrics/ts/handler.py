"""A TorchServe handler recording metrics through context.metrics, every kind of call."""

from ts.metrics.dimension import Dimension
from ts.metrics.metric_type_enum import MetricTypes


class Handler:
    def initialize(self, context):
        self.context = context
        metric = context.metrics.add_metric_to_cache("TsCached", "count", ["route"])
        self.cached = metric

    def handle(self, data, context):
        metrics = context.metrics
        metrics.add_counter("TsHandled", len(data), None, [Dimension("kind", "rows")])
        metrics.add_time("TsHandlerTime", 12.5, None, "ms")
        metrics.add_size("TsPayloadSize", 0.25, None, "MB")
        metrics.add_percent("TsLoad", 40.0)
        metrics.add_metric("TsRows", len(data), "count", metric_type=MetricTypes.HISTOGRAM)
        self.cached.add_or_update(1, ["predictions"])
        return [{"rows": len(data)} for _ in data]
