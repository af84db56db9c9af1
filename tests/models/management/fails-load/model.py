"""load() fails: a synchronous registration answers 500 and leaves nothing registered."""


class Model:
    def load(self):
        raise RuntimeError("the weights file is missing (on purpose)")

    def predict(self, inputs):
        return {"never": True}
