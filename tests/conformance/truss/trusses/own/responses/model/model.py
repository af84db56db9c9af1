import fastapi
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.requests import Request
from starlette.responses import Response


class Model:
    def predict(self, inputs, request: Request):
        kind = inputs.get("kind")
        if kind == "response":
            return Response(b"plain text", media_type="text/plain", headers={"x-harness": "1"})
        if kind == "json_response":
            return JSONResponse({"made": "by the model"}, status_code=201)
        if kind == "error_response":
            return JSONResponse({"detail": "teapot"}, status_code=418)
        if kind == "redirect":
            return Response(status_code=307, headers={"location": "/elsewhere"})
        if kind == "streaming_response":
            return StreamingResponse(iter([b"a", b"b", b"c"]), media_type="text/event-stream")
        if kind == "generator":
            return (f"item-{i};" for i in range(3))
        if kind == "mixed_generator":
            return (x for x in ["a", "", b"b", "ü"])
        if kind == "int_generator":
            return (x for x in ["a", 1, "c"])
        if kind == "empty_generator":
            return (x for x in [])
        if kind == "iterator":
            return iter(["an iterator is not a generator"])
        if kind == "none":
            return None
        if kind == "bytes":
            return b"raw bytes"
        if kind == "text":
            return "just a string"
        if kind == "header":
            return {"x-harness": request.headers.get("x-harness"), "method": request.method}
        if kind == "error":
            raise ValueError("model failed on purpose")
        if kind == "http_exception":
            raise fastapi.HTTPException(status_code=422, detail="not a good input")
        if kind == "http_exception_dict":
            raise fastapi.HTTPException(status_code=409, detail={"why": "conflict"})
        if kind == "key_error":
            return inputs["missing"]
        if kind == "stream_error_first":
            return self._fail_first()
        return {"echo": inputs}

    def _fail_first(self):
        raise RuntimeError("failed before the first item")
        yield "never"
