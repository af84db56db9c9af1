"""A one-file model the management tests copy into the model store and register by name."""


class Model:
    def predict(self, inputs):
        return {"echo": inputs}
