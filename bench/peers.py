"""Podium against its Python peers: LitServe, BentoML, Ray Serve and MLServer, three workloads.

    .venv/bin/python bench/peers.py [--quick] [--repeat N] [--duration S] [--warmup S]
                                    [--only podium,litserve,bentoml,ray,mlserver]
                                    [--workloads predict,stream,batch] [--json PATH]

Workloads (issue 14), each server with its own native route and feature:

- ``predict``: a tiny JSON echo (``{"x": [1, 2, 3, 4]}`` → ``{"y": [1, 2, 3, 4]}``; MLServer's
  OIP infer of the same four numbers), one row for ``async def`` model code and one for plain
  ``def`` where the server has both, at --connections (64), loaded by wrk;
- ``stream``: one request, 100 chunks back (``{"n": 100}`` → 100 JSON lines; MLServer: 100 SSE
  events of ``generate_stream``), --stream-connections (16) clients that each read whole
  streams one after another, checked chunk by chunk after the clock stops;
- ``batch``: each server's dynamic batching, max batch 32, 5 ms wait, a model whose batch takes
  1 ms + 0.05 ms per item (sleeping, like an accelerator), at --batch-connections (128) by wrk;
  the model counts its batches, so the mean batch each server formed is reported.

Every server is started fresh for each row and round, pinned to CPU 0; the load runs on CPU 1.
Server CPU per request sums the whole process tree (LitServe, BentoML, Ray and MLServer start
several processes). The peers are installed into bench/.venvs/<peer> when missing. A markdown
report goes to stdout; the exit status is 1 when anything was flagged. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from common import (
    BENCH,
    CLIENT_CPU,
    BenchError,
    Server,
    TreeUsage,
    command_line,
    ensure_mlserver,
    ensure_venv,
    ensure_wrk,
    exit_on_signals,
    free_port,
    http_post_json,
    log,
    machine_lines,
    median,
    mlserver_server,
    package_version,
    pin_self,
    pinned,
    podium_argv,
    run_client,
    tool_version,
    venv_package_version,
    venv_python,
)
from run import LoadResult, parse_wrk

PEERS_DIR = BENCH / "peers"
POST_LUA = PEERS_DIR / "post.lua"
SERVERS = ("podium", "litserve", "bentoml", "ray", "mlserver")
WORKLOADS = ("predict", "stream", "batch")
STREAM_N = 100
#: a stream not finished this long after its request counts as an error
STREAM_TIMEOUT_S = 30.0
#: Each peer's virtual env: what goes in, and what must import for it to count as installed.
VENV_SPECS: dict[str, tuple[tuple[str, ...], str, str]] = {
    "litserve": (
        ("litserve==0.2.19", "uvloop", "httptools"),
        "import litserve, uvloop, httptools",
        "litserve",
    ),
    "bentoml": (("bentoml==1.4.40",), "import bentoml", "bentoml"),
    "ray": (("ray[serve]==2.60.0",), "import ray.serve, fastapi", "ray"),
}
#: How each server runs here (its defaults but for what the row's note says): the report's
#: preamble, so that a table is never read without it.
LAYOUTS = (
    "Podium: one process (`podium serve`, its default worker: the model in-process).",
    "LitServe: a main process, one API server process (uvicorn) and one inference worker process "
    "joined by queues (`workers_per_device` 1, `num_api_servers` 1), plus multiprocessing helpers.",
    "BentoML: `bentoml serve`'s arbiter and one service worker process (`workers=1`); its "
    "default per-request access log and tracing stay on.",
    "Ray: a local Ray instance (`num_cpus=1`, no dashboard: GCS, raylet, workers) beside the "
    "driver; a request goes to Serve's HTTP proxy actor, then over Ray to the one replica actor "
    "(another process), which takes at most `max_ongoing_requests` (default 5) at once while the "
    "rest wait in the proxy; sync methods run in a thread pool.",
    "MLServer: one process (`parallel_workers: 0`), `debug: false`, no metrics endpoint, as in "
    "`bench/run.py`.",
)
#: Load generator CPU share above which a row may be measuring the generator.
GEN_BOUND_PCT = 90

ECHO = [1.0, 2.0, 3.0, 4.0]
X_BODY = b'{"x":[1,2,3,4]}'
X_BATCH_BODY = b'{"x":[[1,2,3,4]]}'  # BentoML's batchable input: a batch of one
N_BODY = b'{"n":%d}' % STREAM_N
OIP_BODY = b'{"inputs":[{"name":"input-0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}'
OIP_N_BODY = b'{"inputs":[{"name":"n","shape":[1],"datatype":"INT64","data":[%d]}]}' % STREAM_N


# --------------------------------------------------------------------------- rows


@dataclass
class StreamRun:
    """One stream load: whole streams completed inside the window, and what was wrong."""

    streams: int = 0
    items: int = 0
    bad: int = 0  # streams with a wrong status, item count or item
    errors: int = 0  # connection errors and streams not finished in time
    first_problem: str = ""
    seconds: float = 0.0
    latencies_s: list[float] = field(default_factory=list)  # request → last chunk
    first_s: list[float] = field(default_factory=list)  # request → first body bytes
    client_cpu_pct: float = math.nan


@dataclass
class Result:
    """One measured run of one row, whatever the workload."""

    rate: float  # requests/s (streams/s for streams)
    p50_ms: float
    p99_ms: float
    requests: int
    errors: int
    client_cpu_pct: float
    server_cpu_us: float = math.nan  # whole process tree, per request (per stream)
    server_cs: float = math.nan  # context switches per request, all processes, all threads
    processes: int = 0
    unpinned: int = 0
    first_ms: float = math.nan  # streams: time to the first chunk, p50
    batch_mean: float = math.nan
    model_busy: float = math.nan
    problem: str = ""
    startup_s: float = math.nan  # from starting the server to its ready answer
    idle_cpu_pct: float = math.nan  # share of one core the tree used with no request in flight


@dataclass
class Row:
    server: str  # one of SERVERS
    workload: str  # one of WORKLOADS
    code: str  # "async", "sync": the model code's kind
    path: str
    body: bytes
    make: Callable[[int], Server]  # port → the server, not started
    framing: str = ""  # streams: "lines" or "sse"
    note: str = ""
    runs: list[Result] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.server}-{self.workload}-{self.code}"


def _podium(model_dir: Path) -> Callable[[int], Server]:
    def make(port: int) -> Server:
        return Server(name="podium", argv=podium_argv(model_dir, port, None), port=port)

    return make


def _litserve(mode: str) -> Callable[[int], Server]:
    def make(port: int) -> Server:
        argv = [str(venv_python("litserve")), str(PEERS_DIR / "litserve_app.py"), str(port), mode]
        return Server(name="litserve", argv=argv, port=port, ready_path="/health")

    return make


def _bentoml(port: int) -> Server:
    bentoml = venv_python("bentoml").parent / "bentoml"
    argv = [str(bentoml), "serve", "bentoml_app:Peers", "--host", "127.0.0.1", "--port", str(port)]
    return Server(name="bentoml", argv=argv, port=port, cwd=PEERS_DIR, ready_path="/readyz")


def _ray(mode: str) -> Callable[[int], Server]:
    def make(port: int) -> Server:
        argv = [str(venv_python("ray")), str(PEERS_DIR / "ray_app.py"), str(port), mode]
        return Server(name="ray", argv=argv, port=port, ready_path="/ready", ready_timeout=300.0)

    return make


def _mlserver(folder: Path) -> Callable[[int], Server]:
    def make(port: int) -> Server:
        return mlserver_server(venv_python("mlserver").parent / "mlserver", folder, port)

    return make


def build_rows(servers: list[str], workloads: list[str]) -> list[Row]:
    podium = PEERS_DIR / "podium"
    table = [
        Row("podium", "predict", "async", "/v1/models/echo_async:predict", X_BODY,
            _podium(podium / "echo_async"), note="Truss route"),
        Row("podium", "predict", "sync", "/v1/models/echo_sync:predict", X_BODY,
            _podium(podium / "echo_sync"), note="Truss route"),
        Row("podium", "stream", "async", "/v1/models/stream100:predict", N_BODY,
            _podium(podium / "stream100"), framing="lines", note="Truss route, chunked lines"),
        Row("podium", "batch", "async", "/v2/models/batch_busy/infer", OIP_BODY,
            _podium(BENCH / "models" / "batch_busy"),
            note="OIP infer; batch_size 32, max_batch_delay 5 ms"),
        Row("litserve", "predict", "async", "/predict", X_BODY, _litserve("async"),
            note="enable_async=True"),
        Row("litserve", "predict", "sync", "/predict", X_BODY, _litserve("sync")),
        Row("litserve", "stream", "sync", "/predict", N_BODY, _litserve("stream"),
            framing="lines", note="stream=True, a sync generator"),
        Row("litserve", "batch", "sync", "/predict", X_BODY, _litserve("batch"),
            note="max_batch_size 32, batch_timeout 5 ms; time.sleep in its worker process"),
        Row("bentoml", "predict", "async", "/predict_async", X_BODY, _bentoml),
        Row("bentoml", "predict", "sync", "/predict_sync", X_BODY, _bentoml),
        Row("bentoml", "stream", "async", "/stream", N_BODY, _bentoml, framing="lines",
            note="async generator endpoint"),
        Row("bentoml", "batch", "async", "/batch", X_BATCH_BODY, _bentoml,
            note="batchable=True, max_batch_size 32, max_latency_ms 1000"),
        Row("ray", "predict", "async", "/predict", X_BODY, _ray("async"),
            note="FastAPI ingress"),
        Row("ray", "predict", "sync", "/predict", X_BODY, _ray("sync"), note="FastAPI ingress"),
        Row("ray", "predict", "async-wide", "/predict", X_BODY, _ray("async-wide"),
            note="FastAPI ingress, max_ongoing_requests 128"),
        Row("ray", "stream", "async", "/stream", N_BODY, _ray("stream"), framing="lines",
            note="StreamingResponse"),
        Row("ray", "batch", "async", "/batch", X_BODY, _ray("batch"),
            note="@serve.batch(32, 5 ms), max_ongoing_requests 128"),
        Row("mlserver", "predict", "async", "/v2/models/echo/infer", OIP_BODY,
            _mlserver(BENCH / "mlserver_echo"), note="OIP infer; async only"),
        Row("mlserver", "stream", "async", "/v2/models/stream1000/generate_stream",
            OIP_N_BODY, _mlserver(BENCH / "mlserver_stream"), framing="sse",
            note="predict_stream, SSE generate_stream"),
        Row("mlserver", "batch", "async", "/v2/models/batch/infer", OIP_BODY,
            _mlserver(PEERS_DIR / "mlserver_batch"),
            note="OIP infer; max_batch_size 32, max_batch_time 5 ms"),
    ]  # fmt: skip
    return [r for r in table if r.server in servers and r.workload in workloads]


# --------------------------------------------------------------------------- answers


def _numbers(value: object) -> list[float]:
    if isinstance(value, list):
        return [x for item in value for x in _numbers(item)]
    return [float(value)] if isinstance(value, int | float) else []


def echo_problem(status: int, body: bytes) -> str:
    """'' when a predict or batch answer echoes [1, 2, 3, 4] (in any of the servers' forms)."""
    if status != 200:
        return f"HTTP {status}: {body[:300]!r}"
    try:
        answer = json.loads(body)
        if isinstance(answer, list):  # BentoML's batchable answer: a batch of one
            answer = answer[0]
        data = answer["y"] if "y" in answer else answer["outputs"][0]["data"]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        return f"not an echo ({exc}): {body[:300]!r}"
    if _numbers(data) != ECHO:
        return f"echo returned {data!r}, expected {ECHO}"
    return ""


def batch_stats(body: bytes) -> tuple[float, float, float]:
    """(batches, busy seconds, the model's clock) from a batching model's answer."""
    answer = json.loads(body)
    if isinstance(answer, list):
        answer = answer[0]
    if "busy_s" in (answer.get("parameters") or {}):  # Podium's bench/models/batch_busy
        params = answer["parameters"]
        return float(params["batches"]), float(params["busy_s"]), float(params["at_s"])
    for output in answer.get("outputs", []):  # MLServer: an output row per request
        if output["name"] == "stats":
            batches, busy, at = _numbers(output["data"])[:3]
            return batches, busy, at
    return float(answer["batches"]), float(answer["busy_s"]), float(answer["at_s"])


def stream_items(body: bytes, framing: str) -> list[bytes]:
    """The items of a decoded stream body: JSON lines, or the payloads of SSE `data:` events."""
    if framing == "sse":
        events = [e.strip() for e in body.split(b"\n\n") if e.strip()]
        return [e[5:].strip() if e.startswith(b"data:") else b"" for e in events]
    return [line for line in body.split(b"\n") if line.strip()]


def item_index(item: bytes) -> int:
    value = json.loads(item)
    if "i" in value:
        return int(value["i"])
    return int(_numbers(value["outputs"][0]["data"])[0])


def stream_problem(status: int, body: bytes, framing: str) -> str:
    """'' when a stream answer is 200 with STREAM_N items numbered 0 … N-1 in order."""
    if status != 200:
        return f"HTTP {status}: {body[:200]!r}"
    items = stream_items(body, framing)
    if len(items) != STREAM_N:
        return f"{len(items)} items, expected {STREAM_N}: {body[:200]!r}"
    try:
        for k in (0, STREAM_N // 2, STREAM_N - 1):
            if item_index(items[k]) != k:
                return f"item {k} is {items[k][:100]!r}"
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        return f"malformed item ({exc}): {body[:200]!r}"
    return ""


def dechunk(data: bytes) -> bytes | None:
    """The body of a chunked transfer encoding, or None when it is malformed or incomplete."""
    out = bytearray()
    at = 0
    while True:
        eol = data.find(b"\r\n", at)
        if eol < 0:
            return None
        try:
            size = int(data[at:eol].split(b";")[0], 16)
        except ValueError:
            return None
        if size == 0:
            return bytes(out)
        out += data[eol + 2 : eol + 2 + size]
        at = eol + 4 + size


# --------------------------------------------------------------------------- stream client


class _StreamConnection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection reading one response at a time. It keeps the raw
    bytes and only finds where the response ends while the clock runs; decoding and checking
    happen afterwards."""

    MAX_BYTES = 4 << 20

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.head_end = -1
        self.chunked = False
        self.length = -1
        self.first_at = 0.0
        self.done: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no subclass

    def connection_lost(self, exc: Exception | None) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_exception(ConnectionError(f"connection closed: {exc}"))

    def send(self, request: bytes) -> asyncio.Future[None]:
        self.buf.clear()
        self.head_end, self.chunked, self.length, self.first_at = -1, False, -1, 0.0
        self.done = asyncio.get_running_loop().create_future()
        assert self.transport is not None
        self.transport.write(request)
        return self.done

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if self.head_end < 0:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            self.head_end = end + 4
            head = bytes(self.buf[:end]).lower()
            self.chunked = b"transfer-encoding: chunked" in head
            for line in head.split(b"\r\n"):
                if line.startswith(b"content-length:"):
                    self.length = int(line.split(b":", 1)[1])
        if not self.first_at and len(self.buf) > self.head_end:
            self.first_at = time.perf_counter()
        if self.done is None or self.done.done():
            return
        if self.chunked:
            finished = self.buf.endswith(b"\r\n0\r\n\r\n") or (
                len(self.buf) == self.head_end + 5 and self.buf.endswith(b"0\r\n\r\n")
            )
        elif self.length >= 0:
            finished = len(self.buf) - self.head_end >= self.length
        else:
            finished = False  # read to close: no such server here
        if finished:
            self.done.set_result(None)
        elif len(self.buf) > self.MAX_BYTES:
            self.done.set_exception(ValueError("answer over 4 MiB"))

    def response(self) -> tuple[int, bytes]:
        """(status, decoded body) of the response just read."""
        status = int(bytes(self.buf[9:12]))
        raw = bytes(self.buf[self.head_end :])
        body = dechunk(raw) if self.chunked else raw
        return status, body if body is not None else b"<malformed chunked body>"


async def stream_load(port: int, row: Row, connections: int, seconds: float) -> StreamRun:
    """`connections` clients, each sending one stream request after another for `seconds`;
    counted: streams that finished inside the window. Every stream is checked afterwards."""
    run = StreamRun()
    request = (
        f"POST {row.path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(row.body)}\r\n\r\n"
    ).encode() + row.body
    loop = asyncio.get_running_loop()
    deadline = time.perf_counter() + seconds
    answers: list[tuple[int, bytes]] = []

    async def client() -> None:
        transport, conn = await loop.create_connection(_StreamConnection, "127.0.0.1", port)
        try:
            while time.perf_counter() < deadline:
                start = time.perf_counter()
                try:
                    await asyncio.wait_for(conn.send(request), STREAM_TIMEOUT_S)
                except (TimeoutError, ConnectionError, ValueError) as exc:
                    run.errors += 1
                    run.first_problem = run.first_problem or f"{type(exc).__name__}: {exc}"
                    return
                end = time.perf_counter()
                if end <= deadline:
                    run.latencies_s.append(end - start)
                    run.first_s.append((conn.first_at or end) - start)
                    answers.append(conn.response())
        finally:
            conn.done = None  # nobody waits any more: closing is no error
            transport.close()

    cpu, began = time.process_time(), time.perf_counter()
    results = await asyncio.gather(*(client() for _ in range(connections)), return_exceptions=True)
    run.client_cpu_pct = 100 * (time.process_time() - cpu) / (time.perf_counter() - began)
    for failed in results:
        if isinstance(failed, BaseException):
            run.errors += 1
            run.first_problem = run.first_problem or f"{type(failed).__name__}: {failed}"
    run.seconds = seconds
    for status, body in answers:
        problem = stream_problem(status, body, row.framing)
        if problem:
            run.bad += 1
            run.first_problem = run.first_problem or problem
        else:
            run.streams += 1
            run.items += STREAM_N
    return run


def _percentile_ms(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return 1e3 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _run_streams(port: int, row: Row, connections: int, seconds: float) -> StreamRun:
    try:
        import uvloop

        return uvloop.run(stream_load(port, row, connections, seconds))
    except ImportError:
        return asyncio.run(stream_load(port, row, connections, seconds))


# --------------------------------------------------------------------------- wrk


def wrk_run(wrk: str, url: str, body: bytes, seconds: int, connections: int) -> LoadResult:
    # wrk leaves an answer slower than its --timeout (2 s by default) out of its percentiles and
    # counts it as a socket error: a slow server would look fast and broken. 30 s records them.
    argv = [wrk, "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", "--timeout", "30s"]
    argv += ["-s", str(POST_LUA)]
    out, cpu = run_client(
        pinned([*argv, url], CLIENT_CPU), seconds, env={"PEERS_BODY": body.decode()}
    )
    result = parse_wrk(out)
    result.client_cpu_pct = cpu
    return result


# --------------------------------------------------------------------------- running


def _per_request(used: TreeUsage, requests: int, result: Result) -> None:
    result.processes, result.unpinned = used.processes, used.unpinned
    if requests > 0 and used.usage.cpu_s > 0:
        result.server_cpu_us = 1e6 * used.usage.cpu_s / requests
        result.server_cs = (used.usage.voluntary + used.usage.involuntary) / requests


def _minus(after: TreeUsage, before: TreeUsage) -> TreeUsage:
    return TreeUsage(
        after.usage - before.usage, max(after.processes, before.processes), after.unpinned
    )


def measure(row: Row, srv: Server, args: argparse.Namespace) -> Result:
    """Check one answer, warm up, then the measured load; the server is running."""
    status, _, body = http_post_json(srv.port, row.path, row.body, timeout=30)
    problem = (
        stream_problem(status, body, row.framing)
        if row.workload == "stream"
        else echo_problem(status, body)
    )
    if problem:
        raise BenchError(f"wrong answer from {srv.url}{row.path}: {problem}")
    idle_cpu_pct = math.nan
    if args.idle > 0:  # what the server burns with nothing to do (Ray's processes poll)
        before = srv.tree_usage()
        time.sleep(args.idle)
        idle_cpu_pct = 100 * (srv.tree_usage().usage.cpu_s - before.usage.cpu_s) / args.idle
    result = _load(row, srv, args)
    result.idle_cpu_pct = idle_cpu_pct
    return result


def _load(row: Row, srv: Server, args: argparse.Namespace) -> Result:
    """Warm-up and the measured run, on a server that answered right."""
    if row.workload == "stream":
        if args.warmup > 0:
            _run_streams(srv.port, row, args.stream_connections, args.warmup)
        before = srv.tree_usage()
        run = _run_streams(srv.port, row, args.stream_connections, args.duration)
        used = _minus(srv.tree_usage(), before)
        result = Result(
            rate=run.streams / run.seconds,
            p50_ms=_percentile_ms(run.latencies_s, 0.5),
            p99_ms=_percentile_ms(run.latencies_s, 0.99),
            requests=run.streams,
            errors=run.bad + run.errors,
            client_cpu_pct=run.client_cpu_pct,
            first_ms=_percentile_ms(run.first_s, 0.5),
            problem=run.first_problem,
        )
        _per_request(used, run.streams, result)
        return result
    connections = args.batch_connections if row.workload == "batch" else args.connections
    url = srv.url + row.path
    if args.warmup > 0:
        wrk_run(args.wrk, url, row.body, args.warmup, connections)
    stats_before = _stats(srv, row) if row.workload == "batch" else None
    before = srv.tree_usage()
    load = wrk_run(args.wrk, url, row.body, args.duration, connections)
    used = _minus(srv.tree_usage(), before)
    result = Result(
        rate=load.rps,
        p50_ms=load.p50_ms,
        p99_ms=load.p99_ms,
        requests=load.requests,
        errors=load.errors,
        client_cpu_pct=load.client_cpu_pct,
    )
    if load.errors:
        result.problem = f"{load.non_2xx} non-2xx, {load.socket_errors} socket errors"
    _per_request(used, load.requests, result)
    if stats_before is not None:
        stats_after = _stats(srv, row)
        batches = stats_after[0] - stats_before[0] - 1  # less the probe's own batch
        clock = stats_after[2] - stats_before[2]
        if batches > 0:
            result.batch_mean = load.requests / batches
        if clock > 0:
            result.model_busy = (stats_after[1] - stats_before[1]) / clock
    return result


def _stats(srv: Server, row: Row) -> tuple[float, float, float]:
    status, _, body = http_post_json(srv.port, row.path, row.body, timeout=30)
    try:
        if status != 200:
            raise ValueError(f"HTTP {status}")
        return batch_stats(body)
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise BenchError(f"no batch counters in the answer ({exc}): {body[:200]!r}") from exc


def one_round(rows: list[Row], args: argparse.Namespace, round_no: int) -> None:
    # the order alternates between rounds, so no server always runs first or last
    order = rows if round_no % 2 else list(reversed(rows))
    for row in order:
        tag = f"round {round_no}/{args.repeat} {row.name}"
        try:
            started = time.perf_counter()
            with row.make(free_port()) as srv:
                ready = time.perf_counter() - started
                result = measure(row, srv, args)
                result.startup_s = ready
        except (BenchError, OSError, http.client.HTTPException, ValueError) as exc:
            log(f"{tag}: FAILED: {exc}")
            row.failures.append(f"round {round_no}: {str(exc).splitlines()[0][:300]}")
            continue
        row.runs.append(result)
        unit = "streams/s" if row.workload == "stream" else "req/s"
        extra = ""
        if not math.isnan(result.batch_mean):
            extra = f", {result.batch_mean:.1f} per batch, busy {100 * result.model_busy:.0f} %"
        log(
            f"{tag}: {result.rate:,.0f} {unit}, p50 {result.p50_ms:.2f} ms, p99 "
            f"{result.p99_ms:.2f} ms, {result.server_cpu_us:,.0f} µs CPU/req over "
            f"{result.processes} processes{extra}"
            + (f"  PROBLEM: {result.errors} errors: {result.problem}" if result.errors else "")
        )


# --------------------------------------------------------------------------- report


def _fmt(value: float, digits: int = 0, suffix: str = "") -> str:
    return "—" if math.isnan(value) else f"{value:,.{digits}f}{suffix}"


def _ratio(a: float, b: float) -> str:
    if math.isnan(a) or math.isnan(b) or b == 0:
        return "—"
    return f"{a / b:.3f}×" if a / b < 0.1 else f"{a / b:.2f}×"


def _med(runs: list[Result], attr: str) -> float:
    return median([v for r in runs if not math.isnan(v := getattr(r, attr))])


def report(rows: list[Row], args: argparse.Namespace, loads: list[str]) -> tuple[str, list[str]]:
    lines = ["## Podium against its Python peers: tiny predict, 100-chunk streams, batching", ""]
    lines += machine_lines(command_line())
    lines.append(f"- machine load (1/5/15 min load averages): {'; after: '.join(loads)}")
    lines.append(f"- versions: {', '.join(args.versions)}")
    lines.append(
        f"- {args.repeat} round(s), each row on a fresh server, {args.warmup} s warm-up "
        f"(discarded) then {args.duration} s; medians over rounds; rounds alternate the order; "
        f"plain requests by {args.wrk_version} (1 thread, `--timeout 30s`), streams by this process "
        "(asyncio + uvloop, raw HTTP/1.1, every stream checked after the clock stops)"
    )
    lines.append(
        "- server CPU: user + system time of the server's whole process tree (every process in "
        "its session and their descendants) over the measured run, per request (stream); "
        "`procs`: how many processes that was; `idle CPU`: the share of one core the same tree "
        f"used over {args.idle:g} s with no request, after the first answer and before the load; "
        "`start s`: from starting the server to its ready answer"
    )
    lines += [f"- {line}" for line in LAYOUTS if line.split(":")[0].lower() in args.servers]
    flagged: list[str] = []
    titles = {
        "predict": f"Tiny JSON predict, {args.connections} connections",
        "stream": f"{STREAM_N}-chunk streams, {args.stream_connections} concurrent streams",
        "batch": (
            f"Dynamic batching (max 32, 5 ms), a batch takes 1 ms + 0.05 ms per item, "
            f"{args.batch_connections} connections"
        ),
    }
    for workload in WORKLOADS:
        wrows = [r for r in rows if r.workload == workload]
        if not wrows:
            continue
        unit = "streams/s" if workload == "stream" else "req/s"
        per = "stream" if workload == "stream" else "req"
        head = f"| server | code | route | {unit} | × Podium | p50 ms | p99 ms | server CPU µs/{per} | CPU × Podium | cs/{per} | procs |"
        sep = "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
        if workload == "stream":
            head += " first chunk ms |"
            sep += "---:|"
        if workload == "batch":
            head += " mean batch | model busy |"
            sep += "---:|---:|"
        head += f" {unit} min–max | start s | idle CPU | load gen CPU | rounds | problems |"
        sep += "---:|---:|---:|---:|---:|---|"
        lines += ["", f"### {titles[workload]}", "", head, sep]
        podium = {r.code: r for r in wrows if r.server == "podium"}
        for row in wrows:
            rate = _med(row.runs, "rate")
            cpu = _med(row.runs, "server_cpu_us")
            base = podium.get(row.code) or podium.get("async")
            base_rate = _med(base.runs, "rate") if base else math.nan
            base_cpu = _med(base.runs, "server_cpu_us") if base else math.nan
            gen = _med(row.runs, "client_cpu_pct")
            gen_text = _fmt(gen, 0, " %") + (" †" if gen >= GEN_BOUND_PCT else "")
            problems = []
            errors = sum(r.errors for r in row.runs)
            if errors:
                first = next((r.problem for r in row.runs if r.problem), "")
                problems.append(f"**FLAGGED** {errors} errors ({first[:120]})")
            unpinned = max((r.unpinned for r in row.runs), default=0)
            if unpinned:
                problems.append(f"**FLAGGED** {unpinned} process(es) not pinned to CPU 0")
            if row.failures:
                problems.append(f"**FLAGGED** {len(row.failures)} failed round(s)")
            if not row.runs and not row.failures:
                problems.append("**FLAGGED** not run")
            for text in problems:
                flagged.append(f"{row.name}: {text}")
            for failure in row.failures:
                flagged.append(f"{row.name}: {failure}")
            rates = [r.rate for r in row.runs]
            spread = f"{min(rates):,.0f}–{max(rates):,.0f}" if rates else "—"
            procs = max((r.processes for r in row.runs), default=0)
            route = f"`{row.path}`" + (f" ({row.note})" if row.note else "")
            cells = [
                row.server,
                row.code,
                route,
                _fmt(rate),
                _ratio(rate, base_rate) if row.server != "podium" else "1",
                _fmt(_med(row.runs, "p50_ms"), 2),
                _fmt(_med(row.runs, "p99_ms"), 2),
                _fmt(cpu),
                _ratio(cpu, base_cpu) if row.server != "podium" else "1",
                _fmt(_med(row.runs, "server_cs"), 2),
                str(procs or "—"),
            ]
            if workload == "stream":
                cells.append(_fmt(_med(row.runs, "first_ms"), 2))
            if workload == "batch":
                cells.append(_fmt(_med(row.runs, "batch_mean"), 1))
                cells.append(_fmt(100 * _med(row.runs, "model_busy"), 0, " %"))
            cells += [
                spread,
                _fmt(_med(row.runs, "startup_s"), 1),
                _fmt(_med(row.runs, "idle_cpu_pct"), 1, " %"),
                gen_text,
                f"{len(row.runs)}/{args.repeat}",
                "; ".join(problems),
            ]
            lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "× Podium: the row's figure over Podium's with the same kind of model code (sync "
        "against sync, async against async; a server without sync code is compared with "
        "Podium's async row). CPU × Podium above 1: the server spends that many times "
        "Podium's CPU per request. † the load generator used ≥ "
        f"{GEN_BOUND_PCT} % of its core: it may have set the figure.",
    ]
    if any(r.workload == "batch" for r in rows):
        lines += [
            "",
            "mean batch: requests over the batches the model ran during the run; model busy: the "
            "model's own time in its batches over the run's length: above 100 % the server ran "
            "several batches at once (Podium's `batch_busy` has `predict_concurrency` 1: one at "
            "a time).",
        ]
    if flagged:
        lines += ["", "**Flagged:**", *[f"- {f}" for f in flagged]]
    return "\n".join(lines), flagged


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="bench/peers.py",
        description="Podium vs LitServe, BentoML, Ray Serve and MLServer on three workloads.",
    )
    parser.add_argument("--quick", action="store_true", help="1 round, 3 s runs, 1 s warm-up")
    parser.add_argument("--repeat", type=int, default=None, help="rounds (default 3)")
    parser.add_argument("--duration", type=int, default=None, help="seconds per run (default 10)")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up seconds (default 2)")
    parser.add_argument("--connections", type=int, default=64, help="predict (default 64)")
    parser.add_argument("--stream-connections", type=int, default=16)
    parser.add_argument(
        "--idle", type=float, default=None, help="seconds of idle CPU measured (default 2)"
    )
    parser.add_argument("--batch-connections", type=int, default=128)
    parser.add_argument("--only", default=None, help=f"servers, from {','.join(SERVERS)}")
    parser.add_argument("--workloads", default=None, help=f"from {','.join(WORKLOADS)}")
    parser.add_argument("--json", type=Path, default=None, help="also write raw results here")
    args = parser.parse_args(argv)
    args.repeat = args.repeat or (1 if args.quick else 3)
    args.duration = args.duration or (3 if args.quick else 10)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.quick else 2)
    args.idle = args.idle if args.idle is not None else (1 if args.quick else 2)
    if min(args.repeat, args.duration, args.connections, args.stream_connections) < 1:
        parser.error("--repeat, --duration and the connection counts must be at least 1")
    args.servers = args.only.split(",") if args.only else list(SERVERS)
    args.workload_list = args.workloads.split(",") if args.workloads else list(WORKLOADS)
    unknown = (set(args.servers) - set(SERVERS)) | (set(args.workload_list) - set(WORKLOADS))
    if unknown:
        parser.error(f"unknown server or workload: {', '.join(sorted(unknown))}")
    return args


def set_up(args: argparse.Namespace) -> list[str]:
    """Install what the chosen servers need; their versions. A peer that cannot be installed
    is dropped from args.servers and reported as a failure."""
    wrk = ensure_wrk()
    if wrk is None:
        raise BenchError("wrk is needed (apt-get install wrk)")
    args.wrk, args.wrk_version = wrk, tool_version([wrk, "--version"]).split(" Copyright")[0]
    versions = [f"podium {package_version('podium')}"]
    args.setup_failures = []
    for server in list(args.servers):
        try:
            if server == "mlserver":
                ensure_mlserver()
                versions.append(
                    f"mlserver {venv_package_version(venv_python('mlserver'), 'mlserver')}"
                )
            elif server in VENV_SPECS:
                requirements, probe, dist = VENV_SPECS[server]
                python = ensure_venv(server, requirements, probe)
                versions.append(f"{dist} {venv_package_version(python, dist)}")
        except BenchError as exc:
            log(f"{server}: cannot be installed: {exc}")
            args.setup_failures.append(f"{server}: cannot be installed: {str(exc)[:300]}")
            args.servers.remove(server)
    return versions


def _uptime() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    exit_on_signals()
    pin_self(CLIENT_CPU)
    try:
        args.versions = set_up(args)
    except BenchError as exc:
        print(f"bench/peers.py: error: {exc}", file=sys.stderr)
        return 2
    log(f"versions: {', '.join(args.versions)}")
    rows = build_rows(args.servers, args.workload_list)
    loads = [_uptime()]
    for round_no in range(1, args.repeat + 1):
        one_round(rows, args, round_no)
    loads.append(_uptime())
    text, flagged = report(rows, args, loads)
    flagged += args.setup_failures
    if args.setup_failures:
        text += "\n" + "\n".join(f"- **FLAGGED** {f}" for f in args.setup_failures)
    print(text)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        raw = {
            "command": command_line(),
            "versions": args.versions,
            "rows": {
                r.name: {"runs": [asdict(x) for x in r.runs], "failures": r.failures} for r in rows
            },
            "report": text,
        }
        args.json.write_text(json.dumps(raw, indent=1))
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    return 1 if flagged else 0


if __name__ == "__main__":
    sys.exit(main())
