"""Breaks two rules of the contract: a streaming predict with a postprocess, and a postprocess
that takes only the request."""

from starlette.requests import Request


class Model:
    def predict(self, inputs):
        yield inputs

    def postprocess(self, request: Request):
        return None
