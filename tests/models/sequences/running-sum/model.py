"""A stateful sequence model: the running sum of the integers a sequence sends. ``{"add": n}``
adds n; ``{"add": n, "finish": true}`` makes the model end the sequence itself. Takes the JSON
of the Truss and TorchServe routes, TorchServe gRPC's bytes, and OIP's decoded tensors."""

import json

from podium import Context


def _number(value):
    value = value.tolist() if hasattr(value, "tolist") else value
    while isinstance(value, list):
        value = value[0]
    return int(value)


class Model:
    def predict(self, inputs, context: Context) -> dict:
        if isinstance(inputs, bytes | bytearray | str):
            inputs = json.loads(inputs)
        total = context.state.get("total", 0) + _number(inputs["add"])
        context.state["total"] = total
        context.headers["x-running-total"] = str(total)
        if inputs.get("finish") is not None and _number(inputs["finish"]):
            context.end()
        return {"total": total, "first": context.first, "sequence": context.sequence_id}
