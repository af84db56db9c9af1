import time


class Model:
    def predict(self, inputs):
        def items():
            for i in range(inputs.get("n", 10)):
                yield f"{i};"
                time.sleep(inputs.get("gap", 0.5))

        return items()
