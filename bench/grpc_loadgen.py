"""Fallback gRPC load generator for bench/grpc_bench.py (used when h2load cannot be had).

    python bench/grpc_loadgen.py HOST:PORT --method /pkg.Service/Method --body FILE
                                 [-c CALLS] [--channels K] [-d SECONDS] [--expect FILE] [--json]

`-c` coroutines on one uvloop event loop each make unary calls back to back, spread over
`--channels` grpc.aio channels (HTTP/2 connections), for a fixed duration. The request is the
serialized message in FILE (no gRPC framing), sent with identity serializers, so the client
does no protobuf work. Every call's gRPC status is checked, and with `--expect` every response
must equal that file's bytes. Prints req/s, p50/p99 (ms), and counts of completed calls, gRPC
errors and wrong responses; `--json` prints them as one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

from grpc import aio


async def _worker(
    call: aio.UnaryUnaryMultiCallable,
    body: bytes,
    expect: bytes | None,
    stop_at: float,
    latencies: list[float],
    errors: dict[str, int],
) -> None:
    clock = time.perf_counter
    while True:
        start = clock()
        if start >= stop_at:
            return
        try:
            reply = await call(body)
        except aio.AioRpcError as exc:
            code = exc.code().name
            errors[code] = errors.get(code, 0) + 1
            continue
        latencies.append(clock() - start)
        if expect is not None and reply != expect:
            errors["WRONG_RESPONSE"] = errors.get("WRONG_RESPONSE", 0) + 1


async def run(args: argparse.Namespace, body: bytes, expect: bytes | None) -> dict[str, object]:
    channels = [aio.insecure_channel(args.target) for _ in range(args.channels)]
    try:
        calls = [ch.unary_unary(args.method) for ch in channels]  # identity (de)serializers
        for ch in channels:
            await asyncio.wait_for(ch.channel_ready(), timeout=10)
        latencies: list[float] = []
        errors: dict[str, int] = {}
        start = time.perf_counter()
        stop_at = start + args.duration
        await asyncio.gather(
            *(
                _worker(calls[i % len(calls)], body, expect, stop_at, latencies, errors)
                for i in range(args.concurrency)
            )
        )
        elapsed = time.perf_counter() - start
    finally:
        for ch in channels:
            await ch.close()
    latencies.sort()

    def pct(q: float) -> float:
        if not latencies:
            return float("nan")
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1e3

    return {
        "rps": len(latencies) / elapsed,
        "p50_ms": pct(0.50),
        "p99_ms": pct(0.99),
        "requests": len(latencies),
        "errors": sum(errors.values()),
        "error_codes": errors,
        "seconds": elapsed,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", help="HOST:PORT")
    parser.add_argument("--method", required=True, help="/package.Service/Method")
    parser.add_argument("--body", required=True, help="file with the serialized request")
    parser.add_argument("--expect", default=None, help="file with the expected response")
    parser.add_argument("-c", "--concurrency", type=int, default=64)
    parser.add_argument("--channels", type=int, default=4)
    parser.add_argument("-d", "--duration", type=float, default=10.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    body = Path(args.body).read_bytes()
    expect = Path(args.expect).read_bytes() if args.expect else None
    try:
        import uvloop
    except ImportError:
        result = asyncio.run(run(args, body, expect))
    else:
        result = uvloop.run(run(args, body, expect))
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{result['rps']:,.0f} calls/s  p50 {result['p50_ms']:.2f} ms  "
            f"p99 {result['p99_ms']:.2f} ms  calls {result['requests']}  "
            f"errors {result['errors']} {result['error_codes']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
