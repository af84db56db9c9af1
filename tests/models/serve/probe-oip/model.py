"""Annotated with InferenceRequest: reports the request it was given."""

import json

import msgspec

from podium import InferenceRequest


class Model:
    def predict(self, request: InferenceRequest):
        described = {"type": type(request).__name__, "request": msgspec.to_builtins(request)}
        return {"info": json.dumps(described)}
