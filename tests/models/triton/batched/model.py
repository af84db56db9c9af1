"""Doubles x; called with a list of up to 4 requests' inputs."""


class Model:
    def predict(self, batch: list) -> list:
        return [{"y": inputs["x"] * 2} for inputs in batch]
