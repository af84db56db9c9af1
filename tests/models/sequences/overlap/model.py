"""A native stateful streaming sequence with continuous batching (examples/stateful-stream is the
TorchServe handler version): the next request of a sequence runs while the previous one is still
streaming, so a client can stop a stream with a request on the same sequence:

- an odd number n streams n items (one every 200 ms) and adds them to the sequence's total;
- ``-1`` cancels the stream in progress (it stops at its next item);
- ``0`` ends the sequence.

"""

import asyncio

from podium import Context


class Model:
    async def predict(self, inputs: dict, context: Context):
        value = int(inputs["value"])
        state = context.state
        if value == -1:
            state["cancel"] = True
            yield "cancelling the stream in progress\n"
            return
        if value == 0:
            context.end()
            yield f"ended; total {state.get('total', 0)}\n"
            return
        for i in range(value if value % 2 else 1):
            if state.pop("cancel", False):
                yield "cancelled\n"
                return
            await asyncio.sleep(0.2)
            state["total"] = state.get("total", 0) + 1
            yield f"item {i}; total {state['total']}\n"
