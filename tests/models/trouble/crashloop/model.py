"""A process worker that dies (exit code 3) 0.2 s after it is ready, every time."""

import os
import threading


class Model:
    def load(self):
        threading.Timer(0.2, os._exit, (3,)).start()

    def predict(self, inputs):
        return inputs
