"""Dynamic batching: each request answered with its own item and the batch's size."""


class Model:
    def predict(self, batch):
        return [{"x": item["x"], "batch": len(batch)} for item in batch]
