"""Answers with its own version, so a test can see which version a route reached."""


class Model:
    def __init__(self, config):
        self.version = str(config["version"])

    def predict(self, inputs):
        return {"version": self.version}
