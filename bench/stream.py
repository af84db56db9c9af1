"""Podium's streaming benchmark: SSE from `generate_stream`, Podium against MLServer.

    .venv/bin/python bench/stream.py [--quick] [--streams N] [--n ITEMS]
                                     [--podium-http-server NAME] [--json PATH]
    (or: .venv/bin/python bench/run.py --stream [same options])

Each server (pinned to CPU 0) serves a model that yields N items (default 1000) for one
request: Podium the native async-generator model in bench/models/stream1000, MLServer the
`predict_stream` model in bench/mlserver_stream. From CPU 1 an httpx client POSTs
`{"inputs":[{"name":"n","shape":[1],"datatype":"INT64","data":[N]}]}` to
`/v2/models/stream1000/generate_stream` and reads the Server-Sent Events one stream at a time
(a few discarded warm-up streams first). Per stream: time to first event (from sending the
request) and events per second over the whole stream (N / time to the last byte). The report
gives medians over the streams. Every stream's events are counted and decoded after the clock
stops; a short or malformed stream is flagged.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import socket
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx
from common import (
    BENCH,
    CLIENT_CPU,
    BenchError,
    Server,
    asgi_servers,
    command_line,
    ensure_mlserver,
    exit_on_signals,
    free_port,
    log,
    machine_lines,
    median,
    mlserver_server,
    mlserver_version,
    package_version,
    pin_self,
    podium_argv,
    podium_help,
    podium_http_server,
)

MODEL = "stream1000"
HTTP_SERVERS = ("granian", "uvicorn")
#: Client CPU share above which a row is marked as possibly limited by the client.
CLIENT_BOUND_PCT = 90
PATH = f"/v2/models/{MODEL}/generate_stream"


@dataclass
class StreamResult:
    ttfe_ms: float
    total_ms: float
    events: int
    client_cpu_ms: float = math.nan  # CPU time the client spent on this stream

    @property
    def events_per_s(self) -> float:
        return self.events / (self.total_ms / 1e3) if self.total_ms > 0 else math.nan


@dataclass
class StreamTarget:
    name: str
    label: str
    make_server: Callable[[], Server]
    available: str | None = None
    note: str = ""
    results: list[StreamResult] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _item_value(event: dict[str, object]) -> object:
    """The integer an event carries: outputs[0].data[0] (OIP), or a top-level "output"."""
    outputs = event.get("outputs")
    if isinstance(outputs, list) and outputs and isinstance(outputs[0], dict):
        data = outputs[0].get("data")
        while isinstance(data, list) and data:
            data = data[0]
        return data
    return event.get("output")


StreamOpener = Callable[[bytes], AbstractContextManager[tuple[int, Iterator[bytes]]]]


@contextmanager
def _httpx_stream(
    client: httpx.Client, url: str, body: bytes
) -> Iterator[tuple[int, Iterator[bytes]]]:
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    with client.stream("POST", url, content=body, headers=headers) as resp:
        if resp.status_code != 200:
            yield resp.status_code, iter([resp.read()])
        else:
            yield resp.status_code, resp.iter_raw()


class RawClient:
    """A minimal blocking HTTP/1.1 client: one keep-alive socket, chunked decoding by hand.

    Far less per-chunk work than httpx (whose h11 parser runs once per chunk, and a streaming
    server sends one chunk per event), so it shows what the servers do when the client is not
    the limit.
    """

    def __init__(self, port: int) -> None:
        self.port = port
        self.sock: socket.socket | None = None
        self.buf = bytearray()

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        self.buf.clear()

    def _read(self) -> bytes:
        """The next bytes from the socket (b"" at EOF)."""
        assert self.sock is not None
        return self.sock.recv(262144)

    def _recv(self) -> None:
        data = self._read()
        if not data:
            raise BenchError("server closed the connection mid-response")
        self.buf += data

    @contextmanager
    def stream(self, body: bytes) -> Iterator[tuple[int, Iterator[bytes]]]:
        if self.sock is None:
            self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=60)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        head = (
            f"POST {PATH} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
            "Content-Type: application/json\r\nAccept: text/event-stream\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        self.sock.sendall(head.encode() + body)
        while (end := self.buf.find(b"\r\n\r\n")) < 0:
            self._recv()
        lines = bytes(self.buf[:end]).decode("latin-1").split("\r\n")
        del self.buf[: end + 4]
        status = int(lines[0].split(" ", 2)[1])
        fields = {
            k.strip().lower(): v.strip().lower()
            for k, _, v in (x.partition(":") for x in lines[1:])
        }
        if "chunked" in fields.get("transfer-encoding", ""):
            chunks = self._chunked()
        else:
            chunks = self._sized(int(fields.get("content-length", "-1")))
        try:
            yield status, chunks
            for _ in chunks:  # drain what the caller left, keeping the connection usable
                pass
        except BaseException:
            self.close()
            raise
        if fields.get("connection") == "close":
            self.close()

    def _chunked(self) -> Iterator[bytes]:
        while True:
            while (line_end := self.buf.find(b"\r\n")) < 0:
                self._recv()
            size = int(bytes(self.buf[:line_end]).split(b";")[0], 16)
            if size == 0:
                while (trailer_end := self.buf.find(b"\r\n\r\n")) < 0:
                    self._recv()
                del self.buf[: trailer_end + 4]
                return
            stop = line_end + 2 + size
            while len(self.buf) < stop + 2:
                self._recv()
            yield bytes(self.buf[line_end + 2 : stop])
            del self.buf[: stop + 2]

    def _sized(self, length: int) -> Iterator[bytes]:
        assert self.sock is not None
        remaining = length
        while remaining != 0:
            if not self.buf:
                data = self._read()
                if not data:  # close-delimited body (length -1) ends here
                    self.close()
                    return
                self.buf += data
            take = len(self.buf) if remaining < 0 else min(remaining, len(self.buf))
            yield bytes(self.buf[:take])
            del self.buf[:take]
            remaining -= take if remaining > 0 else 0


def one_stream(opener: StreamOpener, n: int) -> tuple[StreamResult, str | None]:
    """One streamed request; returns its timings and a problem description (None when fine)."""
    body = json.dumps(
        {"inputs": [{"name": "n", "shape": [1], "datatype": "INT64", "data": [n]}]}
    ).encode()
    raw_events: list[bytes] = []
    buf = bytearray()
    first = math.nan
    cpu_start = time.process_time()
    start = time.perf_counter()
    with opener(body) as (status, chunks):
        if status != 200:
            text = b"".join(chunks)[:200]
            return StreamResult(math.nan, math.nan, 0), f"HTTP {status}: {text!r}"
        for chunk in chunks:
            buf += chunk
            pos = 0
            while True:
                end = buf.find(b"\n\n", pos)
                if end < 0:
                    break
                event = bytes(buf[pos:end])
                pos = end + 2
                if event.startswith(b"data:"):
                    if not raw_events:
                        first = time.perf_counter()
                    raw_events.append(event)
            del buf[:pos]
    done = time.perf_counter()
    result = StreamResult(
        ttfe_ms=(first - start) * 1e3,
        total_ms=(done - start) * 1e3,
        events=len(raw_events),
        client_cpu_ms=(time.process_time() - cpu_start) * 1e3,
    )
    # Validate after the clock stopped, so decoding never slows the measured stream.
    if len(raw_events) != n:
        return result, f"{len(raw_events)} events, expected {n}"
    for i in (0, n // 2, n - 1):
        try:
            value = _item_value(json.loads(raw_events[i][5:]))
        except ValueError as exc:
            return result, f"event {i} is not JSON: {exc}"
        if value != i:
            return result, f"event {i} carries {value!r}, expected {i}"
    return result, None


def run_target(target: StreamTarget, args: argparse.Namespace) -> None:
    with target.make_server() as srv, contextlib.ExitStack() as stack:
        if target.name == "podium":
            target.note = podium_http_server(args.podium_http_server, srv) or "?"
        opener: StreamOpener
        if args.client == "raw":
            raw = RawClient(srv.port)
            stack.callback(raw.close)
            opener = raw.stream
        else:
            client = stack.enter_context(httpx.Client(timeout=60.0))
            opener = functools.partial(_httpx_stream, client, srv.url + PATH)
        for i in range(args.warmup_streams + args.streams):
            result, problem = one_stream(opener, args.n)
            warm = i < args.warmup_streams
            if problem:
                target.problems.append(f"stream {i}{' (warm-up)' * warm}: {problem}")
                log(f"{target.name}: stream {i}: PROBLEM: {problem}")
                if not result.events:
                    raise BenchError(f"{target.name}: no events: {problem}")
            if not warm:
                target.results.append(result)
    res = target.results
    log(
        f"{target.name}: median TTFE {median([r.ttfe_ms for r in res]):.2f} ms, "
        f"{median([r.events_per_s for r in res]):,.0f} events/s over {len(res)} streams"
    )


def report(targets: list[StreamTarget], args: argparse.Namespace) -> str:
    lines = [f"## Streaming: {args.n} SSE events per request from generate_stream", ""]
    lines += machine_lines(command_line())
    client = f"httpx {package_version('httpx')}" if args.client == "httpx" else "raw socket"
    lines.append(
        f"- client: {client} (`--client {args.client}`), one stream at a time, "
        f"{args.warmup_streams} warm-up streams (discarded) then {args.streams}; medians"
    )
    versions = [f"podium {package_version('podium')}"]
    if args.mlserver_bin is not None:
        versions.append(f"mlserver {mlserver_version()}")
    lines += [f"- versions: {', '.join(versions)}", ""]
    lines.append(
        "| server | time to first event, ms | events/s | whole stream, ms "
        "| events/s min–max | client CPU | streams | problems |"
    )
    lines.append("|---|---:|---:|---:|---:|---:|---:|---|")
    med: dict[str, tuple[float, float]] = {}
    client_bound = False
    for t in targets:
        label = t.label + (f" (on {t.note})" if t.note else "")
        if t.available is not None:
            lines.append(f"| {label} | — | — | — | — | — | 0 | n/a: {t.available} |")
            continue
        ttfe = median([r.ttfe_ms for r in t.results])
        eps = median([r.events_per_s for r in t.results])
        total = median([r.total_ms for r in t.results])
        med[t.name] = (ttfe, eps)
        spread = (
            f"{min(r.events_per_s for r in t.results):,.0f}–"
            f"{max(r.events_per_s for r in t.results):,.0f}"
            if t.results
            else "—"
        )
        busy = median([r.client_cpu_ms / r.total_ms for r in t.results]) * 100
        busy_text = f"{busy:.0f}%"
        if busy >= CLIENT_BOUND_PCT:
            busy_text += " †"
            client_bound = True
        problems = f"**FLAGGED** {len(t.problems)}: {t.problems[0]}" if t.problems else "none"
        lines.append(
            f"| {label} | {ttfe:.2f} | {eps:,.0f} | {total:.1f} | {spread} | {busy_text} "
            f"| {len(t.results)}/{args.streams} | {problems} |"
        )
    if client_bound:
        lines += [
            "",
            f"† the client was busy ≥ {CLIENT_BOUND_PCT}% of the stream: it, not the server, may "
            "set this figure (try `--client raw`).",
        ]
    pod = med.get("podium")
    mls = med.get("mlserver")
    ratios: list[str] = []
    if pod and mls:
        ratios += [
            f"| Podium / MLServer, events/s | {pod[1] / mls[1]:.2f}× |",
            f"| time to first event: MLServer / Podium | {mls[0] / pod[0]:.2f}× |",
        ]
    podium_on = next((t.note for t in targets if t.name == "podium"), "")
    for h in HTTP_SERVERS:
        ref = med.get(f"stream-{h}")
        if ref and pod:
            mark = " (same HTTP server)" if podium_on == h else ""
            ratios.append(
                f"| Podium / raw ASGI stream on {h}{mark}, events/s | {pod[1] / ref[1]:.2f}× |"
            )
        if ref and mls and h == "uvicorn":
            ratios.append(
                f"| MLServer / raw ASGI stream on uvicorn, events/s | {mls[1] / ref[1]:.2f}× |"
            )
    if ratios:
        lines += ["", "| comparison | value |", "|---|---:|", *ratios]
    return "\n".join(lines)


def _reference_server(http_server: str) -> Server:
    return asgi_servers([http_server], app="stream_app:app", prefix="stream")[0]


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="bench/stream.py", description="SSE generate_stream: Podium vs MLServer."
    )
    parser.add_argument("--quick", action="store_true", help="5 streams, 1 warm-up")
    parser.add_argument("--streams", type=int, default=None, help="measured streams (20)")
    parser.add_argument("--warmup-streams", type=int, default=None, help="default 3")
    parser.add_argument("--n", type=int, default=1000, help="events per stream")
    parser.add_argument("--podium-http-server", default=None, metavar="NAME")
    parser.add_argument(
        "--client",
        choices=("httpx", "raw"),
        default="httpx",
        help="httpx (default), or raw: a minimal socket client with far less per-event cost",
    )
    parser.add_argument(
        "--only", default=None, help="subset of podium,mlserver,stream-granian,stream-uvicorn"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write raw results here")
    args = parser.parse_args(argv)
    args.streams = args.streams or (5 if args.quick else 20)
    if args.warmup_streams is None:
        args.warmup_streams = 1 if args.quick else 3
    if args.streams < 1 or args.n < 1:
        parser.error("--streams and --n must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    exit_on_signals()
    pin_self(CLIENT_CPU)
    everything = {"podium", "mlserver", *(f"stream-{h}" for h in HTTP_SERVERS)}
    wanted = set(args.only.split(",")) if args.only else everything
    if wanted - everything:
        raise SystemExit(f"unknown --only names: {', '.join(sorted(wanted - everything))}")

    podium_dir = BENCH / "models" / MODEL

    def podium() -> Server:
        port = free_port()
        return Server("podium", podium_argv(podium_dir, port, args.podium_http_server), port)

    targets: list[StreamTarget] = []
    if "podium" in wanted:
        target = StreamTarget("podium", "Podium", podium)
        if not podium_help():
            target.available = "`podium serve --help` fails: Podium's CLI is not available yet"
        targets.append(target)
    args.mlserver_bin = None
    if "mlserver" in wanted:
        target = StreamTarget(
            "mlserver",
            "MLServer",
            lambda: mlserver_server(args.mlserver_bin, BENCH / "mlserver_stream", free_port()),
        )
        try:
            args.mlserver_bin = ensure_mlserver()
        except BenchError as exc:
            target.available = f"MLServer could not be installed: {str(exc).splitlines()[0]}"
        targets.append(target)
    for http_server in HTTP_SERVERS:
        if f"stream-{http_server}" in wanted:
            targets.append(
                StreamTarget(
                    f"stream-{http_server}",
                    f"raw ASGI stream on {http_server}",
                    functools.partial(_reference_server, http_server),
                )
            )

    for target in targets:
        if target.available is not None:
            log(f"{target.name}: skipped: {target.available}")
            continue
        try:
            run_target(target, args)
        except (BenchError, httpx.HTTPError, OSError) as exc:
            target.problems.append(str(exc).splitlines()[0])
            log(f"{target.name}: FAILED: {exc}")

    text = report(targets, args)
    print(text)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        raw = {
            t.name: {
                "available": t.available,
                "note": t.note,
                "results": [asdict(r) for r in t.results],
                "problems": t.problems,
            }
            for t in targets
        }
        args.json.write_text(json.dumps({"command": command_line(), "targets": raw}, indent=2))
    return 1 if any(t.problems or t.available for t in targets) else 0


if __name__ == "__main__":
    sys.exit(main())
