"""Thread workers: its own metrics through podium.metrics, made at import, in __init__ and in
load(); fails, or sleeps (for a client that leaves), when the request says so."""

import asyncio

from podium import metrics

IMPORTS = metrics.counter("plain_imports", "Times this module was imported for the model")
IMPORTS.inc()


def value(inputs, key, default):
    """``inputs[key]`` from a JSON object or OIP's decoded tensors."""
    found = inputs.get(key, default) if isinstance(inputs, dict) else default
    if hasattr(found, "tolist"):
        found = found.tolist()
    while isinstance(found, list):
        found = found[0]
    return found.decode() if isinstance(found, bytes) else found


class Model:
    def __init__(self):
        self.instances = metrics.gauge("plain_instances", "Instances made")
        self.instances.inc()

    def load(self):
        self.calls = metrics.counter("plain_calls", "predict calls by kind", ["kind"])
        self.sizes = metrics.histogram("plain_sizes", "Request sizes", buckets=(1, 2, 4))

    async def predict(self, inputs):
        kind = value(inputs, "kind", "ok")
        self.calls.labels(kind=kind).inc()
        self.sizes.observe(float(value(inputs, "size", 1)))
        if kind == "fail":
            raise ValueError("asked to fail")
        if kind == "slow":
            await asyncio.sleep(float(value(inputs, "sleep", 5)))
        return {"ok": 1}
