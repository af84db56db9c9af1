"""TorchServe 0.12's examples/custom_metrics/mnist_handler.py without its MNIST model: the same
context.metrics calls (add_metric_to_cache, add_metric, get_metric of a metric that only
metrics.yaml declares, add_size, add_time with a dimension, add_counter, add_percent), on a
BaseHandler subclass whose steps echo the JSON body."""

import json
import time

from ts.metrics.dimension import Dimension
from ts.metrics.metric_type_enum import MetricTypes
from ts.torch_handler.base_handler import BaseHandler


class CustomMetrics(BaseHandler):
    def initialize(self, context):
        self.context = context
        self.manifest = context.manifest
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
        self.initialized = True

    def preprocess(self, data):
        start = time.time()
        metrics = self.context.metrics
        self.inf_request_count.add_or_update(value=1, dimension_values=[])
        metrics.get_metric(
            metric_name="PreprocessCallCount", metric_type=MetricTypes.COUNTER
        ).add_or_update(value=1, dimension_values=[self.context.model_name])
        metrics.get_metric(
            metric_name="RequestBatchSize", metric_type=MetricTypes.GAUGE
        ).add_or_update(value=len(data), dimension_values=[self.context.model_name])
        body = data[0].get("data") or data[0].get("body")
        if isinstance(body, (bytes, bytearray)):
            body = json.loads(body)
        metrics.add_size(
            name="SizeOfImage", value=len(json.dumps(body)) / 1024, idx=None, unit="kB"
        )
        metrics.add_time(
            name="HandlerMethodTime",
            value=(time.time() - start) * 1000,
            idx=None,
            unit="ms",
            dimensions=[Dimension(name="MethodName", value="preprocess")],
            metric_type=MetricTypes.GAUGE,
        )
        return [body]

    def inference(self, rows, *args, **kwargs):
        return rows

    def postprocess(self, rows):
        self.context.metrics.add_counter(
            name="PostprocessCallCount", value=1, idx=None, dimensions=[]
        )
        self.context.metrics.add_percent(
            name="ExamplePercentMetric",
            value=50,
            idx=None,
            dimensions=[],
            metric_type=MetricTypes.HISTOGRAM,
        )
        return [{"echo": row} for row in rows]
