"""A floor, not a server: the least a Python ASGI app on uvicorn can do per perf_analyzer call.

    cd bench && uvicorn --loop uvloop --http httptools --no-access-log pa_floor_http:app

bench/perf_analyzer.py runs it (``--floor``) beside Podium and Triton, pinned to the same CPU and
loaded by the same perf_analyzer, so that their figures can be read against what any server on
uvicorn + httptools could reach at best. It knows one model, ``identity_fp32``, and answers only
what perf_analyzer 2.51 asks over HTTP (model metadata, model config, server metadata; the
readiness probe and one JSON call for the benchmark's own checks) with bytes built once, as
Podium answers them. The server metadata leaves out the statistics extension, so perf_analyzer
asks for no statistics. An infer call with the binary tensor extension is echoed without reading
its JSON header: OUTPUT0 is INPUT0, one FP32 dimension, so the raw bytes after the header are
the whole answer and their length gives its shape. Nothing is validated: a floor.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from hello_app import app as hello

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

MODEL = "identity_fp32"
_TENSOR = [{"name": "INPUT0", "datatype": "FP32", "shape": [-1]}]
_JSON = (b"content-type", b"application/json")


def _dumps(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


#: What Podium answers to each GET perf_analyzer and the benchmark make, built once.
_GETS: dict[str, bytes] = {
    "/v2": _dumps(
        {
            "name": "pa-floor",
            "version": "0.1.0",
            "extensions": ["model_configuration", "binary_tensor_data"],
        }
    ),
    f"/v2/models/{MODEL}": _dumps(
        {
            "name": MODEL,
            "versions": ["1"],
            "platform": "pa-floor",
            "inputs": _TENSOR,
            "outputs": [{**_TENSOR[0], "name": "OUTPUT0"}],
        }
    ),
    f"/v2/models/{MODEL}/config": _dumps(
        {
            "name": MODEL,
            "platform": "pa-floor",
            "max_batch_size": 0,
            "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
            "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
            "instance_group": [{"name": f"{MODEL}_0", "kind": "KIND_CPU", "count": 1}],
        }
    ),
    "/v2/health/live": b'{"live":true}',
    "/v2/health/ready": b'{"ready":true}',
    f"/v2/models/{MODEL}/ready": _dumps({"name": MODEL, "ready": True}),
}
_INFER = f"/v2/models/{MODEL}/infer"
_NOT_FOUND = b'{"error":"the floor serves only what perf_analyzer asks of identity_fp32"}'
#: The answer's JSON header and its length, by the size of the raw tensor: perf_analyzer sends
#: one size for a whole run, so each is built once.
_HEADS: dict[int, tuple[bytes, bytes]] = {}


def _head(size: int) -> tuple[bytes, bytes]:
    output = {"name": "OUTPUT0", "datatype": "FP32", "shape": [size // 4]}
    head = _dumps(
        {"model_name": MODEL, "outputs": [{**output, "parameters": {"binary_data_size": size}}]}
    )
    _HEADS[size] = head, str(len(head)).encode()
    return _HEADS[size]


async def _answer(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    """Answer perf_analyzer's calls for ``identity_fp32``; 404 to anything else."""
    if scope["type"] != "http":
        await hello(scope, receive, send)  # the lifespan's start-up and shut-down
        return
    path = scope["path"]
    if scope["method"] == "GET":
        found = _GETS.get(path)
        if found is None:
            await _answer(send, 404, [_JSON], _NOT_FOUND)
        else:
            await _answer(send, 200, [_JSON], found)
        return
    body = b""
    more = True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    if path != _INFER:
        await _answer(send, 404, [_JSON], _NOT_FOUND)
        return
    for name, value in scope["headers"]:
        if name == b"inference-header-content-length":
            raw = body[int(value) :]
            head, head_length = _HEADS.get(len(raw)) or _head(len(raw))
            headers = [
                (b"content-type", b"application/octet-stream"),
                (b"inference-header-content-length", head_length),
            ]
            await _answer(send, 200, headers, head + raw)
            return
    # A JSON call: only the benchmark's check before the load sends one.
    inputs = json.loads(body)["inputs"]
    outputs = [{**tensor, "name": "OUTPUT0"} for tensor in inputs]
    await _answer(send, 200, [_JSON], _dumps({"model_name": MODEL, "outputs": outputs}))
