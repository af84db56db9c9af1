"""The metrics calls of TorchServe 0.12's examples/custom_metrics/mnist_handler.py, without the
model: metrics declared in metrics.yaml (RequestBatchSize) are found with get_metric, others
are added to the cache or recorded with add_*."""

import json

from ts.metrics.dimension import Dimension
from ts.metrics.metric_type_enum import MetricTypes


class Metered:
    def initialize(self, context):
        metrics = context.metrics
        self.inf_request_count = metrics.add_metric_to_cache(
            metric_name="InferenceRequestCount",
            unit="count",
            dimension_names=[],
            metric_type=MetricTypes.COUNTER,
        )
        metrics.add_metric_to_cache(
            metric_name="PreprocessCallCount",
            unit="count",
            dimension_names=["ModelName"],
            metric_type=MetricTypes.COUNTER,
        )
        metrics.add_metric(
            name="InitializeCallCount", value=1, unit="count", metric_type=MetricTypes.COUNTER
        )

    def preprocess(self, data):
        metrics = self.context.metrics
        self.inf_request_count.add_or_update(value=1, dimension_values=[])
        metrics.get_metric(
            metric_name="PreprocessCallCount", metric_type=MetricTypes.COUNTER
        ).add_or_update(value=1, dimension_values=[self.context.model_name])
        # declared in metrics.yaml only: TorchServe's backend put it in the cache
        metrics.get_metric(
            metric_name="RequestBatchSize", metric_type=MetricTypes.GAUGE
        ).add_or_update(value=len(data), dimension_values=[self.context.model_name])
        body = data[0].get("body")
        metrics.add_size(
            name="SizeOfImage", value=len(json.dumps(body)) / 1024, idx=None, unit="kB"
        )
        metrics.add_time(
            name="HandlerMethodTime",
            value=1.5,
            idx=None,
            unit="ms",
            dimensions=[Dimension(name="MethodName", value="preprocess")],
            metric_type=MetricTypes.GAUGE,
        )
        return [row.get("body") for row in data]

    def inference(self, rows):
        return rows

    def postprocess(self, rows):
        self.context.metrics.add_counter(
            name="PostprocessCallCount", value=1, idx=None, dimensions=[]
        )
        return [{"echo": row} for row in rows]
