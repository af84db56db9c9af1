import asyncio

from starlette.requests import Request


class Model:
    def __init__(self, **kwargs):
        self._loaded = False

    async def load(self):
        await asyncio.sleep(0)
        self._loaded = True

    def preprocess(self, inputs, request: Request):
        request.state.seen = ["preprocess"]
        return {"inputs": inputs, "header": request.headers.get("x-harness")}

    async def predict(self, inputs, request: Request):
        request.state.seen.append("predict")
        return {**inputs, "loaded": self._loaded}

    def postprocess(self, outputs, request: Request):
        request.state.seen.append("postprocess")
        return {**outputs, "seen": request.state.seen}
