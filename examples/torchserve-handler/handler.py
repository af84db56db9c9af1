"""A TorchServe handler, unmodified: a tiny lexicon sentiment model with dynamic batching.

Written against TorchServe's contract (``initialize(context)``, ``handle(data, context)``,
``ts.context.Context``); Podium serves it as it is, from this directory or from the .mar built
by ``podium archive`` (see README.md).
"""

import json
import os

from ts.context import Context


class SentimentHandler:
    def __init__(self):
        self.initialized = False

    def initialize(self, context: Context):
        model_dir = context.system_properties["model_dir"]
        with open(os.path.join(model_dir, "lexicon.json"), encoding="utf-8") as f:
            self.lexicon = json.load(f)
        self.threshold = context.model_yaml_config["handler"]["threshold"]
        self.initialized = True

    def preprocess(self, data):
        texts = []
        for row in data:
            body = row.get("data") or row.get("body")
            if isinstance(body, (bytes, bytearray)):
                body = body.decode("utf-8")
            if isinstance(body, dict):
                body = body.get("text", "")
            texts.append(str(body))
        return texts

    def inference(self, texts):
        scores = []
        for text in texts:
            words = [w.strip(".,!?").lower() for w in text.split()]
            hits = [self.lexicon[w] for w in words if w in self.lexicon]
            scores.append(sum(hits) / len(hits) if hits else 0.0)
        return scores

    def postprocess(self, scores):
        return [
            {
                "label": "positive"
                if s > self.threshold
                else "negative"
                if s < -self.threshold
                else "neutral",
                "score": round(s, 3),
            }
            for s in scores
        ]

    def handle(self, data, context):
        results = self.postprocess(self.inference(self.preprocess(data)))
        for idx in range(len(data)):
            context.set_response_header(idx, "X-Batch-Size", str(len(data)))
        return results
