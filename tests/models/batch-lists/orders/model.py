"""A batched predict annotated list[Order]: each element is one request validated. The same
file serves in a worker process (orders-proc/model.py links here; a truss may not link out of
itself, so truss-orders has its own copy)."""

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
