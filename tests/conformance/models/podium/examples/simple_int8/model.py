"""The twin of Triton's `simple_int8` example model: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 -
INPUT1, element-wise (INT8)."""


class Model:
    def predict(self, inputs: dict) -> dict:
        a, b = inputs["INPUT0"], inputs["INPUT1"]
        return {"OUTPUT0": (a + b).astype(a.dtype), "OUTPUT1": (a - b).astype(a.dtype)}
