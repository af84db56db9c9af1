"""A BaseHandler subclass with get_insights, and no handle of its own: BaseHandler.handle runs
preprocess → inference → postprocess on /predictions, and preprocess → explain_handle →
get_insights on /explanations (the request header explain: True). No model file: initialize
only keeps the context."""

import json

from ts.torch_handler.base_handler import BaseHandler


class ExplainHandler(BaseHandler):
    def initialize(self, context):
        self.context = context
        self.manifest = context.manifest
        self.initialized = True

    def preprocess(self, data):
        rows = []
        for row in data:
            body = row.get("data") or row.get("body")
            if isinstance(body, (bytes, bytearray)):
                body = json.loads(body)
            rows.append(body)
        return rows

    def inference(self, rows, *args, **kwargs):
        return [2 * float(r["x"]) for r in rows]

    def postprocess(self, ys):
        return [{"y": y} for y in ys]

    def get_insights(self, tensor_data, raw_data, target=0):
        # BaseHandler.explain_handle passes the first row's data/body and its target
        if isinstance(raw_data, (bytes, bytearray)):
            raw_data = json.loads(raw_data)
        return [{"x": r["x"], "importance": [1.0], "target": target} for r in tensor_data]
