"""Streams the words of its prompt, one item per word, as an async generator.

Over OIP each item is a response with a BYTES output named ``output`` (MLServer's streaming
example works unchanged on ``generate_stream``); Triton's generate form (``text_input``) gets
``text_output``; Truss and TorchServe clients get the words as chunks of plain text.
"""

import asyncio


def _text(value):
    if isinstance(value, list | tuple):
        value = value[0] if value else ""
    if isinstance(value, bytes):
        value = value.decode()
    if not isinstance(value, str):
        raise ValueError("the prompt must be a string")
    return value


class Model:
    def __init__(self, config):
        self.delay = float(config.get("model_metadata", {}).get("delay_s", 0.05))

    async def predict(self, inputs):
        if isinstance(inputs, bytes | str):
            inputs = {"prompt": inputs}
        triton = "text_input" in inputs
        prompt = _text(inputs.get("text_input" if triton else "prompt", ""))
        for i, word in enumerate(prompt.split()):
            piece = word if i == 0 else " " + word
            await asyncio.sleep(self.delay)
            yield {"text_output": piece} if triton else piece
