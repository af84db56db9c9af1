"""Breaks the batching contract: returns one result too many."""


class Model:
    def predict(self, batch):
        return [{"ok": True} for _ in batch] + [{"extra": True}]
