"""list[Order] on a batched predict in a worker process: as in a thread worker."""

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
