"""Loads at once, beside a model that is still loading."""


class Model:
    def predict(self, inputs):
        return {"quick": True}
