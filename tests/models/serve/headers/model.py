"""Takes the inputs and the raw request: reports the request's headers, method, path and body.

Over gRPC the headers are the call's metadata; as an OIP model its answer is one JSON string.
"""

import json

from starlette.requests import Request


class Model:
    async def predict(self, inputs, request: Request):
        body = await request.body()
        described = {
            "headers": dict(request.headers),
            "method": request.method,
            "path": request.url.path,
            "body": body.decode("latin-1"),
            "client": list(request.client) if request.client else None,
            "disconnected": await request.is_disconnected(),
            "inputs": sorted(inputs),
        }
        return {"info": json.dumps(described)}
