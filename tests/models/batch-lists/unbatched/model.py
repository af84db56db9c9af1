"""No batching: list[Order] is the inputs as they came (a JSON list body), as it always was."""

from pydantic import BaseModel


class Order(BaseModel):
    item: str
    qty: int


class Model:
    def predict(self, orders: list[Order]) -> dict:
        return {"type": type(orders).__name__, "items": [type(o).__name__ for o in orders]}
