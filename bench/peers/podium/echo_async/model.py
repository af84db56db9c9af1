"""bench/peers.py's tiny JSON predict on Podium's Truss route, ``async def``:
``{"x": [1, 2, 3, 4]}`` in, ``{"y": [1, 2, 3, 4]}`` out."""


class Model:
    async def predict(self, inputs: dict) -> dict:
        return {"y": inputs["x"]}
