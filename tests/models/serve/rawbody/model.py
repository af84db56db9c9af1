"""Takes only the request: Podium must not read or parse the body; the model reads it itself."""

from starlette.requests import Request


class Model:
    async def predict(self, request: Request):
        if request.query_params.get("mode") == "stream":
            chunks = [chunk async for chunk in request.stream() if chunk]
            body = b"".join(chunks)
        else:
            body = await request.body()
        return {
            "size": len(body),
            "head": body[:40].decode("latin-1"),
            "method": request.method,
            "path": request.url.path,
        }
