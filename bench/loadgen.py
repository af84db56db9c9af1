"""A small HTTP/1.1 load generator, used only where wrk cannot be had.

N keep-alive connections (no pipelining: one request in flight per connection), each sending
the same request back-to-back for a fixed duration, on raw asyncio transports (uvloop when
installed). Every response's latency is recorded; the report gives req/s, p50, p99, non-2xx
responses and socket errors. Run pinned to its own core, as bench/run.py does:

    taskset -c 1 python bench/loadgen.py http://127.0.0.1:8080/ -c 64 -d 10 --json
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import math
import sys
import time
from dataclasses import dataclass, field
from typing import cast
from urllib.parse import urlsplit


@dataclass
class Stats:
    latencies_ns: list[int] = field(default_factory=list)
    non_2xx: int = 0
    errors: int = 0
    reconnects: int = 0


class _Conn(asyncio.Protocol):
    """One keep-alive connection: send, read one full response, record, send again."""

    def __init__(self, request: bytes, stats: Stats, deadline: float, done: asyncio.Future[None]):
        self.request = request
        self.stats = stats
        self.deadline = deadline
        self.done = done
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.sent_at = 0
        self.keep_alive = True
        self._status = 0

    # -- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass
        self._send()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while self.buf:
            end = self._response_end()
            if end is None:
                return
            status = self._status
            del self.buf[:end]
            now = time.perf_counter_ns()
            if time.monotonic() <= self.deadline:
                self.stats.latencies_ns.append(now - self.sent_at)
                if not 200 <= status < 300:
                    self.stats.non_2xx += 1
            if time.monotonic() >= self.deadline or not self.keep_alive:
                self._finish()
                return
            self._send()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            if (
                exc is not None
                or self.buf
                or (self.keep_alive and time.monotonic() < self.deadline)
            ):
                self.stats.errors += 1
            self.done.set_result(None)

    # -- internals

    def _send(self) -> None:
        assert self.transport is not None
        self.sent_at = time.perf_counter_ns()
        self.transport.write(self.request)

    def _finish(self) -> None:
        if not self.done.done():
            self.done.set_result(None)
        if self.transport is not None:
            self.transport.close()

    def _response_end(self) -> int | None:
        """Offset just past the first complete response in the buffer, or None if incomplete."""
        head_end = self.buf.find(b"\r\n\r\n")
        if head_end < 0:
            return None
        head = bytes(self.buf[:head_end]).decode("latin-1")
        lines = head.split("\r\n")
        try:
            self._status = int(lines[0].split(" ", 2)[1])
        except (IndexError, ValueError):
            self._status = 0
        length = -1
        chunked = False
        self.keep_alive = True
        for line in lines[1:]:
            name, _, value = line.partition(":")
            key = name.strip().lower()
            if key == "content-length":
                length = int(value.strip())
            elif key == "transfer-encoding" and "chunked" in value.lower():
                chunked = True
            elif key == "connection" and value.strip().lower() == "close":
                self.keep_alive = False
        body_start = head_end + 4
        if chunked:
            return self._chunked_end(body_start)
        if length < 0:
            length = 0
        end = body_start + length
        return end if len(self.buf) >= end else None

    def _chunked_end(self, pos: int) -> int | None:
        while True:
            line_end = self.buf.find(b"\r\n", pos)
            if line_end < 0:
                return None
            size = int(bytes(self.buf[pos:line_end]).split(b";")[0], 16)
            pos = line_end + 2
            if size == 0:
                trailer_end = self.buf.find(b"\r\n\r\n", pos - 2)
                return None if trailer_end < 0 else trailer_end + 4
            pos += size + 2
            if len(self.buf) < pos:
                return None


def _percentile(sorted_values: list[int], pct: float) -> float:
    if not sorted_values:
        return float("nan")
    index = max(0, math.ceil(pct / 100 * len(sorted_values)) - 1)
    return sorted_values[index] / 1e6  # ms


async def _run(
    host: str, port: int, request: bytes, connections: int, duration: float
) -> tuple[Stats, float]:
    loop = asyncio.get_running_loop()
    stats = Stats()
    start = time.monotonic()
    deadline = start + duration

    async def one_connection() -> None:
        made = 0
        while time.monotonic() < deadline:
            done: asyncio.Future[None] = loop.create_future()
            try:
                await loop.create_connection(
                    functools.partial(_Conn, request, stats, deadline, done), host, port
                )
            except OSError:
                stats.errors += 1
                await asyncio.sleep(0.05)
                continue
            await done
            stats.reconnects += made > 0
            made += 1

    tasks = [asyncio.create_task(one_connection()) for _ in range(connections)]
    try:
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=duration + 10)
    except TimeoutError:
        for task in tasks:
            task.cancel()
    elapsed = min(time.monotonic(), deadline) - start
    return stats, elapsed


def build_request(url: str, method: str, body: bytes, headers: list[str]) -> tuple[str, int, bytes]:
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    port = parts.port or 80
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}"]
    lines += headers
    if body or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(body)}")
    raw = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
    return host, port, raw


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("-c", "--connections", type=int, default=64)
    parser.add_argument("-d", "--duration", type=float, default=10.0)
    parser.add_argument("-m", "--method", default="GET")
    parser.add_argument("--body", default="", help="request body (string)")
    parser.add_argument("-H", "--header", action="append", default=[], help="'Name: value'")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)

    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass

    host, port, request = build_request(
        args.url, args.method.upper(), args.body.encode(), args.header
    )
    stats, elapsed = asyncio.run(_run(host, port, request, args.connections, args.duration))
    lat = sorted(stats.latencies_ns)
    result = {
        "requests": len(lat),
        "seconds": elapsed,
        "rps": len(lat) / elapsed if elapsed > 0 else 0.0,
        "p50_ms": _percentile(lat, 50),
        "p99_ms": _percentile(lat, 99),
        "non_2xx": stats.non_2xx,
        "errors": stats.errors,
        "reconnects": stats.reconnects,
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['requests']} requests in {elapsed:.2f}s, {args.connections} connections")
        print(f"Requests/sec: {result['rps']:.2f}")
        print(f"Latency p50: {result['p50_ms']:.3f}ms  p99: {result['p99_ms']:.3f}ms")
        print(f"Non-2xx or 3xx responses: {stats.non_2xx}")
        print(f"Socket errors: {stats.errors}  reconnects: {stats.reconnects}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
