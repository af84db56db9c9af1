"""The running sum again, with sequences that expire: idle after 150 ms, at most 2 open."""

from podium import Context


class Model:
    async def predict(self, inputs: dict, context: Context) -> dict:
        total = context.state.get("total", 0) + int(inputs["add"])
        context.state["total"] = total
        return {"total": total}
