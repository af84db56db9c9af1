import os

from greetings import greet


class Model:
    def __init__(self, secrets):
        self._secrets = secrets

    def predict(self, model_input):
        if model_input.get("stream"):
            return (f"{word} " for word in model_input["name"].split())
        return {
            "greeting": greet(
                self._secrets["salutation"], model_input["name"], os.environ["HELLO_PUNCTUATION"]
            )
        }
