"""load() fails: the model stays registered and reports not ready, with the reason."""


class Model:
    def load(self):
        raise RuntimeError("the weights file is missing (on purpose)")

    def predict(self, inputs):
        return {"never": True}
