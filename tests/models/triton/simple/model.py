"""OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1 (INT32), as Triton's `simple`. It reads
its inputs by name: a request without them must never reach it (400, not its KeyError)."""


class Model:
    def predict(self, inputs: dict) -> dict:
        a, b = inputs["INPUT0"], inputs["INPUT1"]
        return {"OUTPUT0": (a + b).astype(a.dtype), "OUTPUT1": (a - b).astype(a.dtype)}
