import os

from harness_pkg import PACKAGE_VALUE

from model.helper import shout


class Model:
    def __init__(self, **kwargs):
        self._config = kwargs["config"]
        self._data_dir = kwargs["data_dir"]
        self._secrets = kwargs["secrets"]
        self._healthy = True
        self._notes = None

    def load(self):
        self._notes = (self._data_dir / "notes.txt").read_text().splitlines()

    def is_healthy(self) -> bool:
        return self._healthy

    def preprocess(self, inputs):
        return {"pre": True, **inputs}

    def predict(self, inputs):
        if "healthy" in inputs:
            self._healthy = bool(inputs["healthy"])
            return {"healthy": self._healthy}
        if "secret" in inputs:
            try:
                return {"secret": self._secrets[inputs["secret"]]}
            except Exception as exc:
                return {"secret_error": type(exc).__name__, "message": str(exc)}
        return {
            "inputs": inputs,
            "package": PACKAGE_VALUE,
            "sibling": shout("hi"),
            "data": self._notes,
            "data_dir_name": self._data_dir.name,
            "env": os.environ.get("HARNESS_ENV"),
            "greeting": self._secrets["greeting"],
            "model_name": self._config["model_name"],
            "metadata": self._config["model_metadata"],
            "concurrency": self._config["runtime"]["predict_concurrency"],
        }

    def postprocess(self, outputs):
        return {"post": True, "result": outputs}
