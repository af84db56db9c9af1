"""A native stateful-sequence model: the running total and mean of the numbers a sequence sends.

``sequence_batching: true`` in config.yaml; ``predict`` asks for the sequence's ``Context``, whose
``state`` lives as long as the sequence. ``{"value": 0, "done": true}`` ends it.

    curl -si localhost:8080/v1/models/running-total:predict -d '{"value": 3}'   # note the id
    curl -s localhost:8080/v1/models/running-total:predict -d '{"value": 5}' \\
        -H 'ts_request_sequence_id: <id>'
"""

from podium import Context


class Model:
    async def predict(self, inputs: dict, context: Context) -> dict:
        state = context.state
        state["total"] = state.get("total", 0) + inputs["value"]
        state["count"] = state.get("count", 0) + 1
        if inputs.get("done"):
            context.end()
        return {"total": state["total"], "mean": state["total"] / state["count"]}
