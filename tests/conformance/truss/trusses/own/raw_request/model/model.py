from starlette.requests import Request


class Model:
    async def predict(self, request: Request):
        body = await request.body()
        return {
            "length": len(body),
            "content_type": request.headers.get("content-type"),
            "path": request.url.path,
            "query": request.url.query,
        }
