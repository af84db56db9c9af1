"""A batched predict annotated list[Order]: each element is one request validated."""

from pydantic import BaseModel


class Order(BaseModel):
    item: str
    qty: int


class Model:
    def predict(self, batch: list[Order]) -> list[dict]:
        return [
            {"type": type(o).__name__, "item": o.item, "double": o.qty * 2, "batch": len(batch)}
            for o in batch
        ]
