"""A truss batched by its podium.yaml whose predict's request parameter is the list of the
requests it gets, in the batch's order."""

import typing

from starlette.requests import Request


class Model:
    def predict(self, batch: list, requests: typing.List[Request]) -> list:  # noqa: UP006
        return [
            {"tag": r.headers["x-tag"], "n": inputs["n"], "batch": len(requests)}
            for inputs, r in zip(batch, requests, strict=True)
        ]
