"""Errors: a plain exception, PredictionException with its own status, a wrong return type."""

from ts.utils.util import PredictionException


def handle(data, context):
    if data is None:
        return None
    body = data[0].get("body")
    if isinstance(body, (bytes, bytearray)):
        body = body.decode()
    what = body.get("do") if isinstance(body, dict) else body
    if what == "raise":
        raise ValueError("the handler was told to fail")
    if what == "refuse":
        raise PredictionException("not today", 429)
    if what == "dict":
        return {"not": "a list"}
    return ["fine"]
