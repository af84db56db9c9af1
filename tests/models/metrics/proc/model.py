"""A process worker with preprocess and postprocess and metrics of its own; ``{"crash": 1}``
kills its worker process (the server restarts it)."""

import os

from podium import metrics


class Model:
    def load(self):
        self.calls = metrics.counter("proc_calls", "predict calls in worker processes")
        self.pids = metrics.gauge("proc_pid", "The pid of the worker process that loaded last")
        self.pids.set(os.getpid())

    def preprocess(self, inputs):
        return inputs

    def predict(self, inputs):
        self.calls.inc()
        if inputs.get("crash"):
            os._exit(1)
        return {"pid": os.getpid()}

    def postprocess(self, outputs):
        return outputs
