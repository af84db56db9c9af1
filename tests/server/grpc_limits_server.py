"""A real ``GrpcServer`` with a small test service, in a process of its own, for the gRPC limits
tests (its threads and memory are measured apart from the clients').

``python grpc_limits_server.py MODE LIMITS`` (MODE: ``relayed`` or ``aio``;
LIMITS: a JSON object of ``GrpcLimits`` fields) prints ``ready HOST:PORT`` once serving, and
serves until SIGTERM. Service ``podium.test.Limits`` (OIP messages as carriers):

- ``Peer``: the caller's address as grpc sees it (``model_name``): a new one means a new
  connection.
- ``Sleep``: sleeps ``float(id)`` seconds, then answers as ``Peer``.
- ``Hold`` (response stream): sends one message at once (the caller's address as ``Peer``
  gives it), waits until ``Release`` was called, then sends a second and ends.
- ``Release``: lets every ``Hold`` (present and future) finish.
- ``Held``: how many ``Hold`` streams have begun (``id``).
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from typing import Any

import grpc

from podium.server.grpc import GrpcLimits, GrpcServer, Service
from podium.server.grpc._tensors import ModelInferRequest, ModelInferResponse

NAME = "podium.test.Limits"


class Handlers:
    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.held = 0

    async def peer(self, request: Any, context: Any) -> Any:
        return ModelInferResponse(model_name=context.peer())

    async def sleep(self, request: Any, context: Any) -> Any:
        await asyncio.sleep(float(request.id or 0))
        return ModelInferResponse(model_name=context.peer())

    async def hold(self, request: Any, context: Any) -> Any:
        self.held += 1
        yield ModelInferResponse(id="0", model_name=context.peer())
        await self.release.wait()
        yield ModelInferResponse(id="1")

    async def release_all(self, request: Any, context: Any) -> Any:
        self.release.set()
        return ModelInferResponse()

    async def count(self, request: Any, context: Any) -> Any:
        return ModelInferResponse(id=str(self.held))


def service(handlers: Handlers) -> Service:
    parse, render = ModelInferRequest.FromString, ModelInferResponse.SerializeToString

    def unary(behavior: Any) -> grpc.RpcMethodHandler:
        return grpc.unary_unary_rpc_method_handler(
            behavior, request_deserializer=parse, response_serializer=render
        )

    return Service(
        NAME,
        {
            "Peer": unary(handlers.peer),
            "Sleep": unary(handlers.sleep),
            "Release": unary(handlers.release_all),
            "Held": unary(handlers.count),
            "Hold": grpc.unary_stream_rpc_method_handler(
                handlers.hold, request_deserializer=parse, response_serializer=render
            ),
        },
    )


async def main(mode: str, limits: GrpcLimits) -> None:
    server = GrpcServer(
        [service(Handlers())],
        host="127.0.0.1",
        port=0,
        max_message_size=1 << 20,
        grace=1.0,
        relay=mode == "relayed",
        limits=limits,
    )
    address = await server.start()
    if server.decision is not None:
        print(f"mode {server.decision.mode.name.lower()}", flush=True)
    print(f"ready {address}", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await server.stop()


if __name__ == "__main__":
    mode, fields = sys.argv[1], json.loads(sys.argv[2])
    asyncio.run(main(mode, GrpcLimits(**fields)))
