"""A CPU-bound pure-Python model, served by worker processes (``workers: process``).

Each request runs about 2 ms of pure-Python arithmetic (a few thousand rounds of a hash-like mix),
holding the GIL the whole time: in one process, requests would take turns; with two worker
processes, two run at once on two cores.
"""

import os


class Model:
    def __init__(self, config):
        self.rounds = int(config.get("model_metadata", {}).get("rounds", 12000))

    def predict(self, inputs):
        seed = int(inputs.get("seed", 1)) if isinstance(inputs, dict) else 1
        rounds = int(inputs.get("rounds", self.rounds)) if isinstance(inputs, dict) else self.rounds
        x = seed & 0xFFFFFFFF
        for i in range(rounds):
            x = (x * 1103515245 + 12345 + i) & 0xFFFFFFFF
            x ^= x >> 13
        return {"digest": x, "rounds": rounds, "pid": os.getpid()}
