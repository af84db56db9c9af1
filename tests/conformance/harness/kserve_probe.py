"""The KServe SDK's clients, in a process of their own: ``python -m harness.kserve_probe
rest|grpc HOST:PORT`` prints one JSON object. (KServe's generated protos and tritonclient's
declare the same ``inference.*`` messages, which one protobuf descriptor pool refuses to hold.)"""

from __future__ import annotations

import asyncio
import json
import sys

import numpy as np
from kserve import InferenceGRPCClient, InferenceRESTClient, InferInput, InferRequest, RESTConfig


def _request() -> InferRequest:
    a = InferInput("INPUT0", [1, 16], "INT32")
    a.set_data_from_numpy(np.arange(16, dtype=np.int32).reshape(1, 16))
    b = InferInput("INPUT1", [1, 16], "INT32")
    b.set_data_from_numpy(np.ones((1, 16), dtype=np.int32))
    return InferRequest(model_name="simple", infer_inputs=[a, b])


async def rest(addr: str) -> dict:
    client = InferenceRESTClient(RESTConfig(protocol="v2", retries=0, timeout=30))
    try:
        ready = await client.is_model_ready(f"http://{addr}", "simple")
        res = await client.infer(f"http://{addr}", _request(), model_name="simple")
        return {"ready": ready, "outputs": {o.name: o.as_numpy().tolist() for o in res.outputs}}
    finally:
        await client.close()


async def grpc(addr: str) -> dict:
    client = InferenceGRPCClient(addr, retries=0, timeout=30)
    try:
        ready = await client.is_model_ready("simple")
        res = await client.infer(_request())
        return {"ready": ready, "outputs": {o.name: o.as_numpy().tolist() for o in res.outputs}}
    finally:
        await client.close()


def main() -> None:
    kind, addr = sys.argv[1], sys.argv[2]
    try:
        out = asyncio.run((rest if kind == "rest" else grpc)(addr))
    except Exception as exc:  # reported, not raised: the harness compares it
        out = {"exception": type(exc).__name__, "message": str(exc)[:500]}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
