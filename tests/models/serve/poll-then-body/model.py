"""Polls is_disconnected() before reading the body Podium already parsed; must not hang."""

from starlette.requests import Request


class Model:
    async def predict(self, inputs, request: Request):
        still_there = not await request.is_disconnected()
        raw = await request.body()
        parsed = await request.json()
        return {"still_there": still_there, "raw_length": len(raw), "same": parsed == inputs}
