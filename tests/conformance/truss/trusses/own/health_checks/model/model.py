import time


class Model:
    def __init__(self, **kwargs):
        self._raise = False

    def load(self):
        time.sleep(3)

    def is_healthy(self):
        if self._raise:
            raise RuntimeError("is_healthy failed on purpose")
        return True

    def predict(self, inputs):
        self._raise = bool(inputs.get("raise"))
        return {"raise": self._raise}
