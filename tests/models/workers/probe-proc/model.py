"""Process workers with the raw request: reports what the rebuilt request looked like, or (with
``{"watch": tag}``) records when ``is_disconnected()`` turns true after the client left."""

import asyncio
import json
import os
import sys
from pathlib import Path

from starlette.requests import Request

_KIT = str(Path(__file__).resolve().parents[2] / "serve" / "_lib")
if _KIT not in sys.path:
    sys.path.insert(0, _KIT)

from e2e_model_kit import record  # noqa: E402


class Model:
    async def predict(self, request: Request):
        body = await request.body()
        parsed = json.loads(body) if body.startswith(b"{") else {}
        tag = parsed.get("watch")
        if tag:
            record(tag, "watching", pid=os.getpid(), disconnected=await request.is_disconnected())
            try:
                for _ in range(1000):
                    if await request.is_disconnected():
                        record(tag, "saw-disconnect")
                        return {"left": True}
                    await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                # the server cancels the work when the client leaves; the request says so too
                record(tag, "cancelled", disconnected=await request.is_disconnected())
                raise
            record(tag, "never noticed")
            return {"left": False}
        return {
            "pid": os.getpid(),
            "type": type(request).__name__,
            "method": request.method,
            "url": str(request.url),
            "path": request.url.path,
            "query": dict(request.query_params),
            "headers": {k: v for k, v in request.headers.items() if k.startswith("x-")},
            "content_type": request.headers.get("content-type"),
            "body": body.decode(),
            "client": bool(request.client),
        }
