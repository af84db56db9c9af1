import fastapi


class Model:
    async def websocket(self, ws: fastapi.WebSocket):
        while True:
            message = await ws.receive()
            if message["type"] == "websocket.disconnect":
                return
            if message.get("bytes") is not None:
                await ws.send_bytes(b"echo:" + message["bytes"])
                continue
            text = message.get("text")
            if text == "bye":
                await ws.send_text("goodbye")
                return
            if text == "fail":
                raise RuntimeError("websocket model failed on purpose")
            if text == "close4000":
                await ws.close(code=4000, reason="closed by the model")
                return
            await ws.send_text(f"echo:{text}")
