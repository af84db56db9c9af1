"""The benchmark's sequence model: a running total per sequence. With ``sequence_batching`` it
keeps the total in the sequence's state; without, it answers the value alone (the same code path
otherwise), so the two runs differ only by what sequences cost."""

from podium import Context


class Model:
    async def predict(self, inputs: dict, context: Context | None) -> dict:
        if context is None:
            return {"total": inputs["value"]}
        total = context.state.get("total", 0) + inputs["value"]
        context.state["total"] = total
        return {"total": total}
