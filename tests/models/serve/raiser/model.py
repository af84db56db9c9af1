"""Raises from predict, with a message the client should see."""


class Model:
    def predict(self, inputs):
        raise ValueError(f"the model refused: {inputs.get('why', 'no reason')}")
