"""A generator model: yields OUTPUT0 = INPUT0 + k for k in 1..3 (each item an answer of its own
on a streaming route)."""


class Model:
    def predict(self, inputs: dict):
        a = inputs["INPUT0"]
        for k in (1, 2, 3):
            yield {"OUTPUT0": (a + k).astype(a.dtype)}
