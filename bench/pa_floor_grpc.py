"""A floor, not a server: the least a grpcio server can do per perf_analyzer ``ModelInfer`` call.

    python bench/pa_floor_grpc.py --port P [--server handoff|sync|uvloop] [--host 127.0.0.1]

bench/perf_analyzer.py runs it (``--floor``) beside Podium and Triton, pinned to the same CPU and
loaded by the same perf_analyzer, so that their gRPC figures can be read against what any
grpcio server could reach at best. It knows one model, ``identity_fp32``, and answers only what
perf_analyzer 2.51 asks over gRPC (``ModelMetadata``, ``ModelConfig``, ``ServerMetadata``; the
liveness and readiness probes) with messages serialized once, as Podium answers them. The server
metadata leaves out the statistics extension, so perf_analyzer asks for no statistics.
``ModelInfer`` parses the request and answers ``OUTPUT0`` with the request's
``raw_input_contents`` as ``raw_output_contents``: the work any OIP server has to do at least,
since perf_analyzer's data are random. Nothing is validated: a floor.

Its shapes are bench/grpc_echo.py's (RESULTS.md section 9 compares them):

- ``handoff`` (default, the fastest there): ``ModelInfer`` served on grpcio internals, as Podium
  serves it: grpc's polling thread reads each request and one answering thread builds and sends
  the answer (``grpc_echo.inline_handler``); the other methods on a small thread pool;
- ``sync``: grpcio's public API, ``grpc.server`` with a pool of 8 threads;
- ``uvloop``: ``grpc.aio`` on uvloop.

The messages come from tritonclient's generated modules (wire names ``inference.*``). It prints
``pa-floor-grpc ready on HOST:PORT`` once listening.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from concurrent import futures
from typing import Any

import grpc
from grpc import aio
from grpc_echo import inline_handler
from grpc_messages import SERVICE, pb
from tritonclient.grpc import model_config_pb2 as _model_config_pb2

config_pb: Any = _model_config_pb2  # generated module: untyped
MODEL = "identity_fp32"


def _prebuilt() -> dict[str, bytes]:
    """The serialized answer of each method other than ``ModelInfer``, whatever it is asked."""
    config = config_pb.ModelConfig(name=MODEL, platform="pa-floor", max_batch_size=0)
    config.input.add(name="INPUT0", data_type=config_pb.TYPE_FP32, dims=[-1])
    config.output.add(name="OUTPUT0", data_type=config_pb.TYPE_FP32, dims=[-1])
    config.instance_group.add(
        name=f"{MODEL}_0", kind=config_pb.ModelInstanceGroup.KIND_CPU, count=1
    )
    metadata = pb.ModelMetadataResponse(name=MODEL, versions=["1"], platform="pa-floor")
    metadata.inputs.add(name="INPUT0", datatype="FP32", shape=[-1])
    metadata.outputs.add(name="OUTPUT0", datatype="FP32", shape=[-1])
    extensions = ["model_configuration", "binary_tensor_data"]
    messages = {
        "ServerLive": pb.ServerLiveResponse(live=True),
        "ServerReady": pb.ServerReadyResponse(ready=True),
        "ModelReady": pb.ModelReadyResponse(ready=True),
        "ServerMetadata": pb.ServerMetadataResponse(
            name="pa-floor", version="0.1.0", extensions=extensions
        ),
        "ModelMetadata": metadata,
        "ModelConfig": pb.ModelConfigResponse(config=config),
    }
    return {name: message.SerializeToString() for name, message in messages.items()}


def echo(request: Any, _context: object = None) -> Any:
    """The identity's answer: OUTPUT0 is INPUT0, its bytes passed through."""
    response = pb.ModelInferResponse(model_name=request.model_name, id=request.id)
    for tensor in request.inputs:
        response.outputs.add(name="OUTPUT0", datatype=tensor.datatype, shape=tensor.shape)
    response.raw_output_contents.extend(request.raw_input_contents)
    return response


async def _echo_async(request: Any, _context: object) -> Any:
    return echo(request)


def _constant(answer: bytes) -> Any:
    def reply(_request: bytes, _context: object) -> bytes:
        return answer

    return reply


def _constant_async(answer: bytes) -> Any:
    async def reply(_request: bytes, _context: object) -> bytes:
        return answer

    return reply


def handlers(shape: str) -> dict[str, Any]:
    """The method handlers of ``shape`` (handoff, sync or uvloop), by method name."""
    asynchronous = shape == "uvloop"
    constant = _constant_async if asynchronous else _constant
    out = {
        name: grpc.unary_unary_rpc_method_handler(constant(answer))
        for name, answer in _prebuilt().items()
    }
    if shape == "handoff":
        out["ModelInfer"] = inline_handler("proto", None, None, echo, True)
    else:
        out["ModelInfer"] = grpc.unary_unary_rpc_method_handler(
            _echo_async if asynchronous else echo,
            request_deserializer=pb.ModelInferRequest.FromString,
            response_serializer=pb.ModelInferResponse.SerializeToString,
        )
    return out


def _announce(host: str, port: int, shape: str) -> None:
    print(f"pa-floor-grpc ready on {host}:{port} (server={shape})", flush=True)


async def _serve_aio(args: argparse.Namespace) -> None:
    server = aio.server()
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(SERVICE, handlers(args.server)),)
    )
    port = server.add_insecure_port(f"{args.host}:{args.port}")
    await server.start()
    _announce(args.host, port, args.server)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop(grace=1)


def _serve_sync(args: argparse.Namespace) -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(SERVICE, handlers(args.server)),)
    )
    port = server.add_insecure_port(f"{args.host}:{args.port}")
    server.start()
    _announce(args.host, port, args.server)

    def _stop(_signum: int, _frame: object) -> None:
        server.stop(grace=1)

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    server.wait_for_termination()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--server", choices=("handoff", "sync", "uvloop"), default="handoff")
    args = parser.parse_args(argv)
    if args.server == "uvloop":
        import uvloop

        uvloop.run(_serve_aio(args))
    else:
        _serve_sync(args)
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
