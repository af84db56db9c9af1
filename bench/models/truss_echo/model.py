"""Truss-style echo: ``async def predict`` gets the request's JSON body as a dict and returns it,
so the Truss route (``POST /v1/models/truss_echo:predict``) does no tensor work at all: the plain
path of issue 14's item 4 (what Podium costs above the HTTP server)."""

from typing import Any


class Model:
    async def predict(self, request: dict[str, Any]) -> dict[str, Any]:
        return request
