"""A running sum per sequence; ``{"finish": 1}`` makes the model end the sequence."""

from podium import Context


class Model:
    def predict(self, inputs, context: Context) -> dict:
        total = context.state.get("total", 0) + int(inputs.get("add", 0))
        context.state["total"] = total
        if inputs.get("finish"):
            context.end()
        return {"total": total}
