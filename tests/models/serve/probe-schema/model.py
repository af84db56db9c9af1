"""Annotated with a pydantic model: reports the validated object."""

import json

from pydantic import BaseModel


class Order(BaseModel):
    item: str
    qty: int
    tags: list[str] = []


class Model:
    def predict(self, order: Order):
        return {"info": json.dumps({"type": type(order).__name__, "data": order.model_dump()})}
