"""A truss that serves a WebSocket (Truss allows no predict beside one)."""


class Model:
    async def websocket(self, websocket):
        while True:
            text = await websocket.receive_text()
            if text == "bye":
                return
            await websocket.send_text(f"echo {text}")
