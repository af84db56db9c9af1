"""A TorchServe handler for the iris MLP, written against TorchServe's ``BaseHandler``.

``BaseHandler`` does the work TorchServe's default handlers leave to it: ``initialize`` loads
the eager model (``iris_mlp.py`` + its state dict) or the TorchScript file, whichever the
archive holds, and ``handle`` runs ``preprocess`` → ``inference`` → ``postprocess`` and records
``HandlerTime``. This class only turns requests into one batch tensor and the model's output
back into one answer per request, and records metrics through ``context.metrics`` as
TorchServe's handlers do. It runs unmodified on TorchServe, on Podium with Podium's ``ts``, and
on Podium with the real ``torchserve`` package installed.

A request is JSON: ``{"instances": [[5.1, 3.5, 1.4, 0.2], ...]}`` or the list of rows itself;
each answer is ``{"probabilities": [[...], ...], "labels": ["setosa", ...]}``.
"""

import json

import torch
from ts.torch_handler.base_handler import BaseHandler


class IrisHandler(BaseHandler):
    def initialize(self, context):
        super().initialize(context)
        self.rows_per_request = []

    def preprocess(self, data):
        rows, self.rows_per_request = [], []
        for request in data:
            body = request.get("data") or request.get("body")
            if isinstance(body, (bytes, bytearray)):
                body = json.loads(body)
            instances = body["instances"] if isinstance(body, dict) else body
            rows.extend(instances)
            self.rows_per_request.append(len(instances))
        self.context.metrics.add_counter("IrisRequests", len(data), None)
        self.context.metrics.add_size("IrisPayloadRows", len(rows), None, "kB")
        return torch.as_tensor(rows, dtype=torch.float32, device=self.device)

    def postprocess(self, data):
        # read per call, as TorchServe's own handlers read self.context.system_properties
        batch_size = self.context.system_properties.get("batch_size") or 1
        metrics = self.context.metrics
        metrics.add_percent("IrisBatchFill", 100.0 * len(self.rows_per_request) / batch_size)
        metrics.add_metric("IrisRows", data.shape[0], "count")
        probabilities = data.tolist()
        answers, start = [], 0
        for count in self.rows_per_request:
            part = probabilities[start : start + count]
            start += count
            labels = [self._label(row.index(max(row))) for row in part]
            answers.append({"probabilities": part, "labels": labels})
        return answers

    def _label(self, index):
        return self.mapping.get(str(index), str(index)) if self.mapping else str(index)
