"""Podium's gRPC benchmark: OIP `ModelInfer` on the echo model and `ModelStreamInfer` items/s.

    .venv/bin/python bench/grpc_bench.py [--quick] [--repeat N] [--duration S] [--warmup S]
        [--clients C] [--max-streams M] [--loadgen auto|h2load|python]
        [--only NAME,...] [--requests typed,raw] [--echo-variants V,...]
        [--streams N] [--warmup-streams N] [--stream-n N] [--stream-only NAME,...]
        [--no-unary] [--no-stream] [--json PATH] [--base-src OTHER/src]

Unary: each server in turn is started pinned to CPU 0 and loaded from CPU 1 with the same
generator (h2load sending a pre-framed gRPC `ModelInferRequest`, or bench/grpc_loadgen.py when
h2load cannot be had), once with the tensor in typed `contents` and once in
`raw_input_contents`. Servers: Podium (`podium serve examples/echo --grpc-port P`), MLServer's
gRPC (`parallel_workers: 0`) and raw grpcio echo services (bench/grpc_echo.py: grpc.aio on
asyncio, grpc.aio on uvloop, sync grpc.server with 8 threads; identity serializers or full
protobuf parsing). Every load is preceded and followed by one real gRPC call whose response is
checked (gRPC status OK, the echo of [1,2,3,4]); h2load's failed/errored counts and the DATA
bytes it received (a gRPC error carries none) are checked too.

Streaming: one `ModelStreamInfer` request for N items (default 1000) against Podium serving
bench/models/stream1000 and MLServer serving bench/mlserver_stream; time to first item and
items/s, one stream at a time from this process (pinned to CPU 1), medians over the streams.

`--base-src OTHER/src` adds each Podium server again (rows `podium-base`), run from other sources
in the same rounds: before and after a change in one run.

The report (markdown, stdout) gives medians over `--repeat` rounds and the ratios against the
bars of issue 3; see bench/README.md. Exit status 1 when anything was flagged.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import re
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import grpc
from common import (
    BENCH,
    CLIENT_CPU,
    MLSERVER_VENV,
    ROOT,
    BenchError,
    Server,
    command_line,
    ensure_apt_tool,
    ensure_mlserver,
    exit_on_signals,
    free_port,
    log,
    machine_lines,
    median,
    mlserver_version,
    package_version,
    pin_self,
    pinned,
    podium_help,
    repo_bin,
    tool_version,
)
from grpc_messages import (
    MODEL_INFER,
    MODEL_STREAM_INFER,
    SERVER_READY,
    TS_STREAM_PREDICTIONS,
    check_echo,
    framed,
    pb,
    request_variants,
    stream_item_index,
    stream_request,
    torchserve_prediction,
    torchserve_stream_request,
)

#: Load generator CPU share above which a row is marked as possibly limited by the generator.
GEN_BOUND_PCT = 90
#: The bars of issue 3.
BAR_VS_MLSERVER = 1.5
BAR_VS_RAW = 0.80
ECHO_VARIANTS = (
    "aio-bytes",
    "aio-proto",
    "uvloop-bytes",
    "uvloop-proto",
    "sync-bytes",
    "sync-proto",
)
#: Raw streaming references measured by default (bench/grpc_echo.py's ModelStreamInfer).
STREAM_ECHO_VARIANTS = ("aio-bytes", "uvloop-bytes", "sync-bytes")
#: Streaming targets measured by default.
STREAM_TARGETS = (
    "podium",
    "podium-triton",
    "podium-torchserve",
    "mlserver",
    *(f"echo-{v}" for v in STREAM_ECHO_VARIANTS),
)
DEFAULT_SYNC_THREADS = 8
#: Raw echoes built on grpcio internals (requests read by grpc's polling thread).
_INTERNAL_RE = re.compile(r"echo-(?:direct|handoff)")
_ECHO_RE = re.compile(
    r"(aio|uvloop|(?:sync|bridge|relay|inline|direct|handoff)(\d*))-(bytes|proto)"
)
READY_TIMEOUT = 60.0
STREAM_MODEL = "stream1000"


# --------------------------------------------------------------------------- gRPC helpers


def _rpc_error(exc: grpc.RpcError) -> str:
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else str(exc)
    return f"gRPC {code.name if code else '?'}: {details}"


def grpc_server_ready(port: int, timeout: float = 1.0) -> bool:
    """Whether `inference.GRPCInferenceService/ServerReady` on 127.0.0.1:port answers ready."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            raw = channel.unary_unary(SERVER_READY)(b"", timeout=timeout)
        except grpc.RpcError:
            return False
    return bool(pb.ServerReadyResponse.FromString(raw).ready)


def infer_once(port: int, body: bytes, timeout: float = 10.0) -> bytes:
    """One real ModelInfer call; the serialized response. BenchError on any gRPC error."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            return bytes(channel.unary_unary(MODEL_INFER)(body, timeout=timeout))
        except grpc.RpcError as exc:
            raise BenchError(_rpc_error(exc)) from exc


def checked_echo(port: int, body: bytes) -> bytes:
    """Call ModelInfer once and check the echo; the response bytes."""
    raw = infer_once(port, body)
    problem = check_echo(pb.ModelInferResponse.FromString(raw))
    if problem:
        raise BenchError(f"wrong ModelInfer response: {problem}")
    return raw


@dataclass
class GrpcServer(Server):
    """A Server whose readiness is OIP `ServerReady` over gRPC on `port`."""

    ready_timeout: float = READY_TIMEOUT

    def wait_ready(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            code = self.proc.poll()
            if code is not None:
                raise BenchError(
                    f"{self.name} exited with {code} before it was ready:\n{self.log_tail()}"
                )
            if grpc_server_ready(self.port):
                return
            time.sleep(0.1)
        raise BenchError(
            f"{self.name} did not answer gRPC ServerReady on 127.0.0.1:{self.port} within "
            f"{self.ready_timeout:.0f}s:\n{self.log_tail()}"
        )


# --------------------------------------------------------------------------- servers


def podium_grpc_argv(model_dir: Path, grpc_port: int, extra: list[str] | None = None) -> list[str]:
    """`podium serve DIR --host 127.0.0.1 --http-port 0 --grpc-port P`, its other listeners on
    free ports (never the defaults, which another server on this machine may hold)."""
    help_text = podium_help()
    if not help_text:
        raise BenchError("`podium serve --help` does not work (Podium's CLI not available)")
    argv = [str(repo_bin("podium")), "serve", str(model_dir), "--host", "127.0.0.1"]
    argv += ["--http-port", "0", "--grpc-port", str(grpc_port)]
    for option in ("--management-port", "--metrics-port", "--grpc-management-port"):
        if re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", help_text):
            argv += [option, str(free_port())]
    return argv + list(extra or [])


#: Extra `podium serve` arguments for every Podium server (`--podium-args`), for experiments.
PODIUM_ARGS: list[str] = []


def podium_server(
    model_dir: Path, extra: list[str] | None = None, src: Path | None = None
) -> GrpcServer:
    """Podium serving ``model_dir``; ``src``: from those sources (``--base-src``), not this tree's."""
    port = free_port()
    argv = podium_grpc_argv(model_dir, port, [*PODIUM_ARGS, *(extra or [])])
    env = {} if src is None else {"PYTHONPATH": str(src)}
    return GrpcServer(name="podium", argv=argv, port=port, env=env)


def mlserver_grpc_server(mlserver: Path, folder: Path) -> GrpcServer:
    """MLServer serving `folder` with its gRPC server on a free port.

    The ports come from MLSERVER_* environment variables (settings.json would override them,
    and a fixed port there could collide with another server on the machine); settings.json
    has `parallel_workers: 0`, `debug: false` (no gRPC logging interceptor) and
    `metrics_endpoint: null` (no Prometheus interceptor).
    """
    grpc_port = free_port()
    env = {
        "MLSERVER_HOST": "127.0.0.1",
        "MLSERVER_HTTP_PORT": str(free_port()),
        "MLSERVER_GRPC_PORT": str(grpc_port),
        "MLSERVER_METRICS_PORT": str(free_port()),
        "PYTHONUNBUFFERED": "1",
    }
    return GrpcServer(
        name="mlserver",
        argv=[str(mlserver), "start", str(folder)],
        port=grpc_port,
        cwd=folder,
        env=env,
    )


def echo_argv(variant: str, port: int) -> list[str]:
    match = _ECHO_RE.fullmatch(variant)
    if not match:
        raise BenchError(f"unknown echo variant {variant!r} (e.g. aio-bytes, sync16-proto)")
    kind, threads, parse = match.group(1), match.group(2), match.group(3)
    argv = [sys.executable, str(BENCH / "grpc_echo.py"), "--port", str(port), "--parse", parse]
    if kind.startswith(("sync", "bridge", "relay", "inline", "direct", "handoff")):
        server = kind.rstrip("0123456789")
        argv += ["--server", server, "--threads", threads or str(DEFAULT_SYNC_THREADS)]
    else:
        argv += ["--server", kind]
    return argv


def echo_label(variant: str) -> str:
    match = _ECHO_RE.fullmatch(variant)
    assert match
    kind, threads, parse = match.group(1), match.group(2), match.group(3)
    how = "bytes, prebuilt response" if parse == "bytes" else "protobuf parse + build"
    pool = f"grpc.server ({threads or DEFAULT_SYNC_THREADS} threads)"
    base = kind.rstrip("0123456789")
    text = {
        "aio": "raw echo: grpc.aio (asyncio)",
        "uvloop": "raw echo: grpc.aio (uvloop)",
        "sync": f"raw echo: {pool}",
        "direct": "raw echo: grpc.server, answered by its polling thread (grpc internals)",
        "handoff": "raw echo: grpc.server, polling thread → answering thread (grpc internals)",
        "bridge": f"design probe: {pool} → coroutine on a uvloop thread, waited for",
        "relay": f"design probe: {pool} → coroutine on a uvloop thread, which answers",
        "inline": "design probe: polling thread → coroutine on a uvloop thread → answering "
        "thread (grpc internals)",
    }[base]
    return f"{text}, {how}"


def echo_server(variant: str) -> GrpcServer:
    port = free_port()
    return GrpcServer(name=f"echo-{variant}", argv=echo_argv(variant, port), port=port, cwd=BENCH)


# --------------------------------------------------------------------------- load generators


@dataclass
class LoadResult:
    rps: float
    p50_ms: float
    p99_ms: float
    requests: int
    failed: int  # h2load failed + errored + timeout, or gRPC errors (python generator)
    non_2xx: int  # HTTP status other than 2xx (h2load)
    bad_data: int  # responses whose body was missing or wrong
    client_cpu_pct: float = math.nan

    @property
    def errors(self) -> int:
        return self.failed + self.non_2xx + self.bad_data


class LoadGenerator:
    name = ""
    description = ""

    def run(
        self, port: int, message: bytes, expect: bytes, duration: int, args: argparse.Namespace
    ) -> LoadResult:
        raise NotImplementedError


def _run_client(argv: list[str], timeout: float) -> tuple[str, float]:
    """Run the generator pinned to CLIENT_CPU; its stdout and the share of one CPU it used
    over its run (CPU time / wall time)."""
    argv = pinned(argv, CLIENT_CPU)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise BenchError(f"load generator did not finish: {shlex.join(argv)}") from exc
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        tail = (done.stdout + done.stderr)[-2000:]
        raise BenchError(f"{shlex.join(argv)} exited {done.returncode}:\n{tail}")
    wall = time.perf_counter() - start
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return done.stdout, 100 * cpu / wall


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return math.nan
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


class H2load(LoadGenerator):
    """h2load posting one pre-framed gRPC message (5-byte prefix + the serialized request)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.name = "h2load"
        self.description = tool_version([path, "--version"])

    def invoke(
        self, port: int, method: str, message: bytes, options: list[str], timeout: float
    ) -> tuple[str, float, list[float]]:
        """Run h2load on one gRPC method; its output, its CPU share and the sorted
        per-request times (ms) of the successful requests from its --log-file."""
        with tempfile.TemporaryDirectory(prefix="bench-h2load-") as tmp:
            body = Path(tmp) / "request.grpc"
            body.write_bytes(framed(message))
            log_file = Path(tmp) / "requests.tsv"
            argv = [
                self.path,
                *options,
                "-t",
                "1",
                "-H",
                "content-type: application/grpc",
                "-H",
                "te: trailers",
                "-d",
                str(body),
                "--log-file",
                str(log_file),
                f"http://127.0.0.1:{port}{method}",
            ]
            out, cpu = _run_client(argv, timeout)
            return out, cpu, _h2load_latencies(log_file)

    def run(
        self, port: int, message: bytes, expect: bytes, duration: int, args: argparse.Namespace
    ) -> LoadResult:
        options = ["-D", str(duration), "-c", str(args.clients), "-m", str(args.max_streams)]
        out, cpu, latencies = self.invoke(port, MODEL_INFER, message, options, duration + 60)
        result = parse_h2load(out, len(framed(expect)), args.clients * args.max_streams)
        result.p50_ms = _percentile(latencies, 0.50)
        result.p99_ms = _percentile(latencies, 0.99)
        result.client_cpu_pct = cpu
        return result


def _h2load_latencies(path: Path) -> list[float]:
    """Sorted latencies (ms) of the successful requests in an h2load --log-file."""
    out: list[float] = []
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            parts = line.split("\t")
            if len(parts) >= 3 and parts[1].startswith("2"):
                out.append(int(parts[2]) / 1e3)
    out.sort()
    return out


def h2load_counts(output: str) -> dict[str, float]:
    """req/s, request counts, non-2xx responses and DATA bytes from h2load's summary."""
    rps = re.search(r"finished in [\d.]+\w*, ([\d.]+) req/s", output)
    reqs = re.search(
        r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, "
        r"(\d+) errored, (\d+) timeout",
        output,
    )
    codes = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", output)
    data = re.search(r"traffic: .*?\((\d+)\) data", output)
    if not (rps and reqs and codes and data):
        raise BenchError(f"unexpected h2load output:\n{output[-3000:]}")
    return {
        "rps": float(rps.group(1)),
        "done": int(reqs.group(3)),
        "succeeded": int(reqs.group(4)),
        "failed": int(reqs.group(5)) + int(reqs.group(6)) + int(reqs.group(7)),
        "non_2xx": int(codes.group(2)) + int(codes.group(3)) + int(codes.group(4)),
        "data": int(data.group(1)),
    }


def parse_h2load(output: str, response_len: int, in_flight: int) -> LoadResult:
    """calls/s, counts and the DATA-bytes check from h2load's summary.

    h2load sees only HTTP, where a gRPC error is still a 200 whose trailers carry the status,
    but such a response has no DATA frame: every successful echo carries exactly
    `response_len` bytes of DATA (gRPC prefix + message). So DATA bytes below
    succeeded × response_len mean missing responses; above it by more than the responses
    that may be in flight when h2load stops (counted in DATA but not done), wrong ones.
    """
    counts = h2load_counts(output)
    succeeded, data_bytes = int(counts["succeeded"]), int(counts["data"])
    expected = succeeded * response_len
    bad = 0
    if data_bytes < expected:
        bad = max(1, (expected - data_bytes) // max(response_len, 1))
    elif data_bytes > expected + in_flight * response_len:
        bad = max(1, (data_bytes - expected) // max(response_len, 1) - in_flight)
    return LoadResult(
        rps=counts["rps"],
        p50_ms=math.nan,
        p99_ms=math.nan,
        requests=int(counts["done"]),
        failed=int(counts["failed"]),
        non_2xx=int(counts["non_2xx"]),
        bad_data=bad,
    )


class PyLoadgen(LoadGenerator):
    def __init__(self) -> None:
        self.name = "python"
        self.description = "bench/grpc_loadgen.py (grpc.aio on uvloop; h2load not available)"

    def run(
        self, port: int, message: bytes, expect: bytes, duration: int, args: argparse.Namespace
    ) -> LoadResult:
        with tempfile.TemporaryDirectory(prefix="bench-grpc-loadgen-") as tmp:
            body, expected = Path(tmp) / "request.bin", Path(tmp) / "response.bin"
            body.write_bytes(message)
            expected.write_bytes(expect)
            argv = [
                sys.executable,
                str(BENCH / "grpc_loadgen.py"),
                f"127.0.0.1:{port}",
                "--method",
                MODEL_INFER,
                "--body",
                str(body),
                "--expect",
                str(expected),
                "-c",
                str(args.clients * args.max_streams),
                "--channels",
                str(args.clients),
                "-d",
                str(duration),
                "--json",
            ]
            out, cpu = _run_client(argv, duration + 60)
        data = json.loads(out.strip().splitlines()[-1])
        codes: dict[str, int] = data["error_codes"]
        wrong = codes.get("WRONG_RESPONSE", 0)
        return LoadResult(
            rps=data["rps"],
            p50_ms=data["p50_ms"],
            p99_ms=data["p99_ms"],
            requests=data["requests"],
            failed=data["errors"] - wrong,
            non_2xx=0,
            bad_data=wrong,
            client_cpu_pct=cpu,
        )


def pick_loadgen(choice: str) -> LoadGenerator:
    if choice in ("auto", "h2load"):
        path = ensure_apt_tool("h2load", "nghttp2-client")
        if path:
            return H2load(path)
        if choice == "h2load":
            raise BenchError("h2load requested but not available")
        log("h2load not available: falling back to bench/grpc_loadgen.py for every server")
    return PyLoadgen()


# --------------------------------------------------------------------------- unary targets


@dataclass
class Target:
    name: str
    label: str
    kind: str  # podium | mlserver | echo
    model: str
    make_server: Callable[[], GrpcServer]
    available: str | None = None
    runs: dict[str, list[LoadResult]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)


def build_targets(args: argparse.Namespace) -> list[Target]:
    targets: list[Target] = []
    podium_dir = (ROOT / args.podium_model).resolve()
    unavailable = None
    help_text = podium_help()
    if not help_text:
        unavailable = "`podium serve --help` fails: Podium's CLI is not available"
    elif "--grpc-port" not in help_text:
        unavailable = "`podium serve` has no --grpc-port option"
    elif not podium_dir.is_dir():
        unavailable = f"model directory {podium_dir} does not exist"
    targets.append(
        Target(
            name="podium",
            label="Podium",
            kind="podium",
            model=podium_dir.name,
            make_server=functools.partial(podium_server, podium_dir),
            available=unavailable,
        )
    )
    # The same server with its gRPC front end on grpc.aio (`--grpc-aio`), for comparison.
    targets.append(
        Target(
            name="podium-aio",
            label="Podium, `--grpc-aio` (grpc.aio)",
            kind="podium",
            model=podium_dir.name,
            make_server=functools.partial(podium_server, podium_dir, ["--grpc-aio"]),
            available=unavailable
            or (None if "--grpc-aio" in help_text else "`podium serve` has no --grpc-aio"),
        )
    )
    if args.base_src is not None:  # the same server from other sources, in the same rounds
        targets.append(
            Target(
                name="podium-base",
                label=f"Podium [base: {args.base_src}]",
                kind="podium",
                model=podium_dir.name,
                make_server=functools.partial(podium_server, podium_dir, None, args.base_src),
                available=unavailable,
            )
        )
    mlserver = Target(
        name="mlserver",
        label="MLServer",
        kind="mlserver",
        model="echo",
        make_server=lambda: mlserver_grpc_server(args.mlserver_bin, BENCH / "mlserver_echo"),
        available=args.mlserver_error,
    )
    targets.append(mlserver)
    variants = list(args.echo_variants)
    for name in args.only or []:  # an echo-VARIANT named in --only need not be repeated
        if name.startswith("echo-") and name.removeprefix("echo-") not in variants:
            variants.append(name.removeprefix("echo-"))
    for variant in variants:
        echo_argv(variant, 0)  # validates the name
        targets.append(
            Target(
                name=f"echo-{variant}",
                label=echo_label(variant),
                kind="probe" if variant.startswith(("bridge", "relay", "inline")) else "echo",
                model="echo",
                make_server=functools.partial(echo_server, variant),
            )
        )
    if args.only:
        wanted = set(args.only)
        unknown = wanted - {t.name for t in targets}
        if unknown:
            raise BenchError(f"unknown --only names: {', '.join(sorted(unknown))}")
        targets = [t for t in targets if t.name in wanted]
    return targets


def one_round(
    targets: list[Target], gen: LoadGenerator, args: argparse.Namespace, round_no: int
) -> None:
    for target in targets:
        if target.available is not None:
            continue
        tag = f"round {round_no}/{args.repeat} {target.name}"
        try:
            with target.make_server() as srv:
                for form in args.requests:
                    message = request_variants(target.model)[form].SerializeToString()
                    try:
                        expect = checked_echo(srv.port, message)
                        if args.warmup > 0:
                            warm = gen.run(srv.port, message, expect, args.warmup, args)
                            log(f"{tag} {form}: warm-up {warm.rps:,.0f} calls/s (discarded)")
                        result = gen.run(srv.port, message, expect, args.duration, args)
                        after = checked_echo(srv.port, message)
                        if after != expect:
                            result.bad_data += 1
                            log(f"{tag} {form}: the response after the load differs from before")
                    except (BenchError, OSError) as exc:
                        log(f"{tag} {form}: FAILED: {exc}")
                        target.failures.append(
                            f"round {round_no} {form}: {str(exc).splitlines()[0]}"
                        )
                        continue
                    target.runs.setdefault(form, []).append(result)
                    flag = (
                        f"  ERRORS: {result.failed} failed, {result.non_2xx} non-2xx, "
                        f"{result.bad_data} bad responses"
                    ) * (result.errors > 0)
                    log(
                        f"{tag} {form}: {result.rps:,.0f} calls/s  p50 {result.p50_ms:.2f} ms  "
                        f"p99 {result.p99_ms:.2f} ms  load gen CPU "
                        f"{result.client_cpu_pct:.0f}%{flag}"
                    )
        except (BenchError, OSError) as exc:
            log(f"{tag}: FAILED: {exc}")
            target.failures.append(f"round {round_no}: {str(exc).splitlines()[0]}")
            if "did not answer gRPC ServerReady" in str(exc) or "before it was ready" in str(exc):
                target.available = f"did not start in round {round_no}: {str(exc).splitlines()[0]}"


# --------------------------------------------------------------------------- streaming


@dataclass
class StreamResult:
    """One stream read by the Python client."""

    ttfi_ms: float
    total_ms: float
    items: int
    client_cpu_ms: float
    data_bytes: int  # gRPC-framed bytes of all items (what h2load counts as DATA)

    @property
    def items_per_s(self) -> float:
        return self.items / (self.total_ms / 1e3) if self.total_ms > 0 else math.nan


@dataclass
class StreamTarget:
    name: str
    label: str
    api: str  # oip | torchserve
    make_server: Callable[[], GrpcServer]
    available: str | None = None
    framing: str = "?"
    results: list[StreamResult] = field(default_factory=list)  # Python client
    h2_ms: list[float] = field(default_factory=list)  # h2load: whole-stream times
    h2_cpu: list[float] = field(default_factory=list)  # h2load: CPU share, per run
    problems: list[str] = field(default_factory=list)

    @property
    def method(self) -> str:
        return TS_STREAM_PREDICTIONS if self.api == "torchserve" else MODEL_STREAM_INFER

    def body(self, n: int) -> bytes:
        if self.api == "torchserve":
            return torchserve_stream_request(STREAM_MODEL, n)
        return bytes(stream_request(STREAM_MODEL, n).SerializeToString())


def _open_stream(channel: grpc.Channel, target: StreamTarget, body: bytes) -> Iterator[bytes]:
    if target.api == "torchserve":
        return iter(channel.unary_stream(target.method)(body, timeout=60))
    return iter(channel.stream_stream(target.method)(iter((body,)), timeout=60))


def detect_framing(item: bytes) -> str:
    """`mlserver` when an item is a bare ModelInferResponse, else `triton`."""
    with contextlib.suppress(Exception):
        if pb.ModelInferResponse.FromString(item).outputs:
            return "mlserver"
    return "triton"


def one_stream(channel: grpc.Channel, target: StreamTarget, n: int) -> StreamResult:
    """One stream of n items read with grpcio, timed; checked after the clock stops."""
    body = target.body(n)
    items: list[bytes] = []
    first = math.nan
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    try:
        for item in _open_stream(channel, target, body):
            if not items:
                first = time.perf_counter()
            items.append(item)
    except grpc.RpcError as exc:
        raise BenchError(f"stream failed after {len(items)} items: {_rpc_error(exc)}") from exc
    t1 = time.perf_counter()
    cpu = time.process_time() - cpu0
    if len(items) != n:
        raise BenchError(f"stream had {len(items)} items, expected {n}")
    if target.api == "torchserve":
        for index in sorted({0, n // 2, n - 1}):
            prediction = torchserve_prediction(items[index])
            try:
                value = json.loads(prediction)["output"]
            except (ValueError, KeyError, TypeError) as exc:
                raise BenchError(f"item {index}: prediction {prediction[:100]!r}") from exc
            if value != index:
                raise BenchError(f"item {index} carries {value}")
    else:
        if target.framing == "?":
            target.framing = detect_framing(items[0])
        for index in sorted({0, n // 2, n - 1}):
            try:
                got = stream_item_index(items[index], target.framing)
            except ValueError as exc:
                raise BenchError(f"item {index}: {exc}") from exc
            if got != index:
                raise BenchError(f"item {index} carries {got}")
    return StreamResult(
        ttfi_ms=(first - t0) * 1e3,
        total_ms=(t1 - t0) * 1e3,
        items=len(items),
        client_cpu_ms=cpu * 1e3,
        data_bytes=sum(len(item) + 5 for item in items),
    )


def h2load_streams(
    h2: H2load, port: int, target: StreamTarget, n: int, count: int, data_bytes: int
) -> tuple[list[float], float]:
    """`count` streams one after another on one connection, read by h2load: each stream's
    time (ms) and h2load's CPU share. BenchError unless every stream succeeded and the DATA
    received is exactly `count` × the stream's framed bytes (as read by grpcio)."""
    out, cpu, times = h2.invoke(
        port, target.method, target.body(n), ["-n", str(count), "-c", "1", "-m", "1"], 60 + count
    )
    counts = h2load_counts(out)
    if counts["succeeded"] != count or counts["failed"] or counts["non_2xx"]:
        raise BenchError(f"h2load: {counts['succeeded']}/{count} streams succeeded: {counts}")
    if counts["data"] != count * data_bytes:
        raise BenchError(
            f"h2load received {counts['data']} DATA bytes, expected {count} × {data_bytes}"
        )
    return times, cpu


def _stream_server(variant: str) -> GrpcServer:
    return echo_server(variant)


def build_stream_targets(args: argparse.Namespace) -> list[StreamTarget]:
    model_dir = BENCH / "models" / STREAM_MODEL
    unavailable = None
    help_text = podium_help()
    if not help_text:
        unavailable = "`podium serve --help` fails: Podium's CLI is not available"
    elif "--grpc-port" not in help_text:
        unavailable = "`podium serve` has no --grpc-port option"
    targets = [
        StreamTarget(
            name="podium",
            label="Podium, ModelStreamInfer (default framing)",
            api="oip",
            make_server=functools.partial(podium_server, model_dir),
            available=unavailable,
        )
    ]
    if args.base_src is not None:
        targets.append(
            StreamTarget(
                name="podium-base",
                label=f"Podium, ModelStreamInfer (default framing) [base: {args.base_src}]",
                api="oip",
                make_server=functools.partial(podium_server, model_dir, None, args.base_src),
                available=unavailable,
            )
        )
    for framing in ("mlserver", "triton"):
        missing = "--grpc-stream-format" not in help_text
        targets.append(
            StreamTarget(
                name=f"podium-{framing}",
                label=f"Podium, ModelStreamInfer, `--grpc-stream-format {framing}`",
                api="oip",
                make_server=functools.partial(
                    podium_server, model_dir, ["--grpc-stream-format", framing]
                ),
                available=unavailable
                or ("`podium serve` has no --grpc-stream-format option" if missing else None),
            )
        )
    targets += [
        StreamTarget(
            name="mlserver",
            label="MLServer, ModelStreamInfer",
            api="oip",
            make_server=lambda: mlserver_grpc_server(args.mlserver_bin, BENCH / "mlserver_stream"),
            available=args.mlserver_error,
        ),
        # TorchServe's StreamPredictions (server streaming) on Podium's gRPC port, the same
        # model; each prediction is the item as JSON, {"output": i}.
        StreamTarget(
            name="podium-torchserve",
            label="Podium, TorchServe StreamPredictions",
            api="torchserve",
            framing="TorchServe",
            make_server=functools.partial(podium_server, model_dir),
            available=unavailable,
        ),
    ]
    for name in args.stream_only:
        if name.startswith("echo-"):
            variant = name.removeprefix("echo-")
            echo_argv(variant, 0)  # validates the name
            targets.append(
                StreamTarget(
                    name=name,
                    label=echo_label(variant).replace("raw echo", "raw stream"),
                    api="oip",
                    make_server=functools.partial(_stream_server, variant),
                )
            )
    wanted = set(args.stream_only) | ({"podium-base"} if args.base_src is not None else set())
    unknown = wanted - {t.name for t in targets}
    if unknown:
        raise BenchError(f"unknown --stream-only names: {', '.join(sorted(unknown))}")
    return [t for t in targets if t.name in wanted]


def stream_round(
    targets: list[StreamTarget], gen: LoadGenerator | None, args: argparse.Namespace, round_no: int
) -> None:
    h2 = gen if isinstance(gen, H2load) else None
    n = args.stream_n
    for target in targets:
        if target.available is not None:
            continue
        tag = f"stream round {round_no}/{args.repeat} {target.name}"
        got: list[StreamResult] = []
        h2_ms: list[float] = []
        try:
            with (
                target.make_server() as srv,
                grpc.insecure_channel(f"127.0.0.1:{srv.port}") as channel,
            ):
                first = one_stream(channel, target, n)  # checked; its bytes check h2load's
                for _ in range(args.warmup_streams):
                    one_stream(channel, target, n)
                if h2 is not None:
                    if args.warmup_streams:
                        h2load_streams(
                            h2, srv.port, target, n, args.warmup_streams, first.data_bytes
                        )
                    h2_ms, cpu = h2load_streams(
                        h2, srv.port, target, n, args.streams, first.data_bytes
                    )
                    target.h2_ms += h2_ms
                    target.h2_cpu.append(cpu)
                for i in range(args.streams):
                    try:
                        got.append(one_stream(channel, target, n))
                    except BenchError as exc:
                        target.problems.append(f"round {round_no} stream {i}: {exc}")
                target.results += got
        except (BenchError, OSError) as exc:
            log(f"{tag}: FAILED: {exc}")
            target.problems.append(f"round {round_no}: {str(exc).splitlines()[0]}")
            if "did not answer gRPC ServerReady" in str(exc) or "before it was ready" in str(exc):
                target.available = f"did not start in round {round_no}: {str(exc).splitlines()[0]}"
            continue
        h2_text = (
            f"h2load {median([n / (ms / 1e3) for ms in h2_ms]):,.0f} items/s; " if h2_ms else ""
        )
        if got:
            log(
                f"{tag}: {h2_text}Python client {median([r.items_per_s for r in got]):,.0f} "
                f"items/s, first item {median([r.ttfi_ms for r in got]):.2f} ms "
                f"({target.framing} framing)"
            )


# --------------------------------------------------------------------------- report


def _fmt(value: float, spec: str = ",.0f") -> str:
    return "—" if math.isnan(value) else format(value, spec)


def _ratio(a: float, b: float) -> float:
    if math.isnan(a) or math.isnan(b) or b == 0:
        return math.nan
    return a / b


def _verdict(value: float, bar: float) -> str:
    if math.isnan(value):
        return "not measured"
    return "**meets**" if value >= bar else "**misses**"


def _head_lines(args: argparse.Namespace, gen: LoadGenerator | None) -> list[str]:
    lines = machine_lines(command_line())
    versions = [
        f"podium {package_version('podium')}",
        f"grpcio {package_version('grpcio')}",
        f"protobuf {package_version('protobuf')}",
        f"uvloop {package_version('uvloop')}",
        f"tritonclient {package_version('tritonclient')} (messages for the raw echo and clients)",
    ]
    if args.mlserver_bin is not None:
        versions.append(f"mlserver {mlserver_version()} (grpcio {_mlserver_grpcio_version()})")
    if gen is not None:
        versions.append(gen.description)
    lines.append(f"- versions: {', '.join(versions)}")
    return lines


def _mlserver_grpcio_version() -> str:
    python = MLSERVER_VENV / "bin" / "python"
    return tool_version([str(python), "-c", "import grpc; print(grpc.__version__)"])


def unary_report(targets: list[Target], gen: LoadGenerator, args: argparse.Namespace) -> str:
    in_flight = args.clients * args.max_streams
    lines = [
        f"### OIP gRPC ModelInfer: echo model, {args.clients} connections × "
        f"{args.max_streams} streams",
        "",
        *_head_lines(args, gen),
        f"- load: {gen.name}, 1 thread, {args.clients} HTTP/2 connections × {args.max_streams} "
        f"concurrent streams = {in_flight} calls in flight, {args.warmup} s warm-up (discarded) "
        f"then {args.duration} s, {args.repeat} round(s); figures are medians over rounds",
        "- request: `ModelInferRequest` for model `echo`, FP32 `input-0` shape [1,4] data "
        "[1,2,3,4]: *typed* in `contents.fp32_contents`, *raw* in `raw_input_contents` (as "
        "tritonclient sends); checked before and after each load with a real gRPC call",
        "",
        "| server | request | calls/s | p50 ms | p99 ms | calls/s min–max | load gen CPU "
        "| rounds | errors |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    med: dict[tuple[str, str], tuple[float, float, float]] = {}
    flagged: list[str] = []
    gen_bound = False
    for t in targets:
        if t.available is not None and not t.runs:
            lines.append(f"| {t.label} | — | — | — | — | — | — | 0 | n/a: {t.available} |")
            flagged.append(f"{t.name}: not measured: {t.available}")
            continue
        for form in args.requests:
            runs = t.runs.get(form, [])
            rps = median([r.rps for r in runs])
            p50 = median([r.p50_ms for r in runs])
            p99 = median([r.p99_ms for r in runs])
            med[(t.name, form)] = (rps, p50, p99)
            spread = (
                f"{min(r.rps for r in runs):,.0f}–{max(r.rps for r in runs):,.0f}" if runs else "—"
            )
            failed = sum(r.failed for r in runs)
            non_2xx = sum(r.non_2xx for r in runs)
            bad = sum(r.bad_data for r in runs)
            err = "none"
            if failed or non_2xx or bad:
                err = f"**FLAGGED** {failed} failed, {non_2xx} non-2xx, {bad} bad responses"
                flagged.append(f"{t.name} {form}: {err}")
            missing = args.repeat - len(runs)
            if missing:
                err += f"; {missing} round(s) not measured"
            gen_cpu = median([r.client_cpu_pct for r in runs])
            gen_text = _fmt(gen_cpu, ".0f") + ("%" if not math.isnan(gen_cpu) else "")
            if gen_cpu >= GEN_BOUND_PCT:
                gen_text += " †"
                gen_bound = True
            lines.append(
                f"| {t.label} | {form} | {_fmt(rps)} | {_fmt(p50, '.2f')} | {_fmt(p99, '.2f')} "
                f"| {spread} | {gen_text} | {len(runs)}/{args.repeat} | {err} |"
            )
        flagged += [f"{t.name}: {f}" for f in t.failures]
    if gen_bound:
        lines += [
            "",
            f"† the load generator used ≥ {GEN_BOUND_PCT}% of its CPU: it, not the server, may "
            "set this figure.",
        ]

    nan3 = (math.nan, math.nan, math.nan)
    echo_names = [t.name for t in targets if t.kind == "echo"]
    lines += ["", "| comparison | value | bar |", "|---|---:|---|"]
    for form in args.requests:
        pod = med.get(("podium", form), nan3)
        mls = med.get(("mlserver", form), nan3)
        best_name, best = "", nan3
        for name in echo_names:
            value = med.get((name, form), nan3)
            if not math.isnan(value[0]) and (math.isnan(best[0]) or value[0] > best[0]):
                best_name, best = name, value
        best_label = best_name.removeprefix("echo-") or "—"
        r_ml = _ratio(pod[0], mls[0])
        r_raw = _ratio(pod[0], best[0])
        lines += [
            f"| {form}: Podium / MLServer, calls/s | {_fmt(r_ml, '.2f')}× "
            f"| ≥ {BAR_VS_MLSERVER}×: {_verdict(r_ml, BAR_VS_MLSERVER)} |",
            f"| {form}: Podium / best raw echo ({best_label}, {_fmt(best[0])} calls/s) "
            f"| {_fmt(100 * r_raw, '.0f')} % | ≥ {100 * BAR_VS_RAW:.0f} %: "
            f"{_verdict(r_raw, BAR_VS_RAW)} |",
        ]
        # The same against narrower references: echoes that parse and build the protobuf
        # messages (the least an OIP server does), and echoes on grpcio's public API only.
        for text, keep in (
            ("best raw echo that parses the messages", lambda n: n.endswith("-proto")),
            ("best raw echo on grpcio's public API", lambda n: not _INTERNAL_RE.match(n)),
        ):
            cands = [
                n for n in echo_names if keep(n) and not math.isnan(med.get((n, form), nan3)[0])
            ]
            if cands and len(cands) < len(echo_names):
                ref = max(cands, key=lambda n: med[(n, form)][0])
                value = med[(ref, form)][0]
                lines.append(
                    f"| {form}: Podium / {text} ({ref.removeprefix('echo-')}, {_fmt(value)} "
                    f"calls/s) | {_fmt(100 * _ratio(pod[0], value), '.0f')} % | |"
                )
        lines += [
            f"| {form}: p99 MLServer / Podium (above 1: Podium's tail is shorter) "
            f"| {_fmt(_ratio(mls[2], pod[2]), '.2f')}× | |",
            f"| {form}: MLServer / best raw echo, calls/s | {_fmt(100 * _ratio(mls[0], best[0]), '.0f')} % | |",
        ]
        # What the server options are worth, on the raw echo.
        pairs = [
            ("uvloop-bytes", "aio-bytes", "grpc.aio: uvloop / asyncio loop (bytes)"),
            ("uvloop-proto", "aio-proto", "grpc.aio: uvloop / asyncio loop (protobuf)"),
            ("sync-bytes", "aio-bytes", "sync grpc.server 8 threads / grpc.aio asyncio (bytes)"),
            ("sync-proto", "aio-proto", "sync grpc.server 8 threads / grpc.aio asyncio (protobuf)"),
            ("aio-proto", "aio-bytes", "protobuf parse / bytes, grpc.aio asyncio"),
            ("uvloop-proto", "uvloop-bytes", "protobuf parse / bytes, grpc.aio uvloop"),
            ("sync-proto", "sync-bytes", "protobuf parse / bytes, sync grpc.server"),
        ]
        for a, b, text in pairs:
            ratio = _ratio(
                med.get((f"echo-{a}", form), nan3)[0], med.get((f"echo-{b}", form), nan3)[0]
            )
            if not math.isnan(ratio):
                lines.append(f"| {form}: {text}, calls/s | {ratio:.2f}× | |")
    if flagged:
        lines += ["", "**Flagged:**", *[f"- {f}" for f in flagged]]
    return "\n".join(lines)


def stream_report(
    targets: list[StreamTarget], gen: LoadGenerator | None, args: argparse.Namespace
) -> str:
    n = args.stream_n
    h2 = isinstance(gen, H2load)
    lines = [
        f"### gRPC streaming: one request, {n} responses",
        "",
        *_head_lines(args, gen if h2 else None),
        f"- request: one `ModelInferRequest` for `{STREAM_MODEL}` with INT64 `n` = {n} on "
        "`ModelStreamInfer` (sent, then half-closed); TorchServe's `StreamPredictions`: one "
        f"`PredictionsRequest` with input `n` = b'{n}'; Podium serves bench/models/stream1000 "
        "(async generator), MLServer bench/mlserver_stream (`predict_stream`), the raw streams "
        "bench/grpc_echo.py (prebuilt items)",
        f"- per round and server: {args.warmup_streams} warm-up streams (discarded), then "
        f"{args.streams} streams read by h2load (`-n {args.streams} -c 1 -m 1`: one after "
        f"another on one connection, per-stream time from its log) and {args.streams} read "
        "by a sync grpcio client in the benchmark's process; both pinned to CPU "
        f"{CLIENT_CPU}; {args.repeat} round(s); medians over all measured streams",
        "- checks: every grpcio stream has exactly N items and items 0, N/2, N−1 carry their "
        'index (TorchServe: prediction `{"output": i}`); h2load\'s streams all succeed and carry exactly the DATA bytes of a checked stream',
        "",
        "| server | framing | items/s (h2load) | whole stream ms (h2load) "
        "| items/s min–max (h2load) | h2load CPU | first item ms (grpcio) | items/s (grpcio) "
        "| grpcio client CPU | streams | problems |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    med: dict[str, tuple[float, float, float]] = {}
    bound = False
    for t in targets:
        if t.available is not None and not t.results:
            lines.append(f"| {t.label} | — | — | — | — | — | — | — | — | 0 | n/a: {t.available} |")
            continue
        rs = t.results
        h2_rates = [n / (ms / 1e3) for ms in t.h2_ms if ms > 0]
        h2_ips = median(h2_rates)
        py_ips = median([r.items_per_s for r in rs])
        ttfi = median([r.ttfi_ms for r in rs])
        med[t.name] = (h2_ips, py_ips, ttfi)
        spread = f"{min(h2_rates):,.0f}–{max(h2_rates):,.0f}" if h2_rates else "—"
        h2_cpu = median(t.h2_cpu)
        py_cpu = median([100 * r.client_cpu_ms / r.total_ms for r in rs if r.total_ms > 0])
        h2_cpu_text = _fmt(h2_cpu, ".0f") + ("%" if not math.isnan(h2_cpu) else "")
        py_cpu_text = _fmt(py_cpu, ".0f") + ("%" if not math.isnan(py_cpu) else "")
        if h2_cpu >= GEN_BOUND_PCT:
            h2_cpu_text += " †"
            bound = True
        if py_cpu >= GEN_BOUND_PCT:
            py_cpu_text += " †"
            bound = True
        problem_text = f"**FLAGGED** {len(t.problems)}" if t.problems else "none"
        framing = t.framing
        count = f"{len(t.h2_ms)}+{len(rs)}" if h2 else f"{len(rs)}"
        lines.append(
            f"| {t.label} | {framing} | {_fmt(h2_ips)} | {_fmt(median(t.h2_ms), '.1f')} "
            f"| {spread} | {h2_cpu_text} | {_fmt(ttfi, '.2f')} | {_fmt(py_ips)} | {py_cpu_text} "
            f"| {count} | {problem_text} |"
        )
    if bound:
        lines += [
            "",
            f"† the client was busy ≥ {GEN_BOUND_PCT}% of the time: it, not the server, may set "
            "this figure.",
        ]
    nan3 = (math.nan, math.nan, math.nan)
    pod, mls = med.get("podium", nan3), med.get("mlserver", nan3)
    best_name, best = "", nan3
    for name, value in med.items():
        if (
            name.startswith("echo-")
            and not name.startswith(("echo-bridge", "echo-relay", "echo-inline"))
            and (math.isnan(best[0]) or value[0] > best[0])
        ):
            best_name, best = name, value
    lines += [
        "",
        "| comparison | value |",
        "|---|---:|",
        f"| Podium / MLServer, items/s (h2load) | {_fmt(_ratio(pod[0], mls[0]), '.2f')}× |",
        f"| Podium / MLServer, items/s (grpcio client) | {_fmt(_ratio(pod[1], mls[1]), '.2f')}× |",
        f"| time to first item: MLServer / Podium | {_fmt(_ratio(mls[2], pod[2]), '.2f')}× |",
    ]
    if best_name:
        label = best_name.removeprefix("echo-")
        for t in targets:
            if t.name in med and not t.name.startswith("echo-"):
                who = t.label.replace(", ModelStreamInfer", "")
                lines.append(
                    f"| {who} / best raw stream ({label}), items/s (h2load) "
                    f"| {_fmt(100 * _ratio(med[t.name][0], best[0]), '.0f')} % |"
                )
    problems = [f"{t.name}: {p}" for t in targets for p in t.problems]
    problems += [
        f"{t.name}: not measured: {t.available}" for t in targets if t.available and not t.results
    ]
    if problems:
        lines += ["", "**Flagged:**", *[f"- {p}" for p in problems[:20]]]
    return "\n".join(lines)


# --------------------------------------------------------------------------- main


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="bench/grpc_bench.py",
        description="OIP gRPC: Podium vs MLServer vs raw grpcio echo; ModelStreamInfer items/s.",
    )
    parser.add_argument("--quick", action="store_true", help="1 round, 3 s runs, 1 s warm-up")
    parser.add_argument("--repeat", type=int, default=None, help="rounds (default 3)")
    parser.add_argument("--duration", type=int, default=None, help="seconds per run (default 10)")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up seconds (default 3)")
    parser.add_argument("--clients", type=int, default=4, help="HTTP/2 connections (default 4)")
    parser.add_argument(
        "--max-streams", type=int, default=16, help="concurrent calls per connection (default 16)"
    )
    parser.add_argument("--loadgen", choices=("auto", "h2load", "python"), default="auto")
    parser.add_argument(
        "--only",
        type=_csv,
        default=None,
        help="unary servers: podium, mlserver, echo-VARIANT (default: all)",
    )
    parser.add_argument(
        "--requests", type=_csv, default=["typed", "raw"], help="typed,raw (default both)"
    )
    parser.add_argument(
        "--echo-variants",
        type=_csv,
        default=list(ECHO_VARIANTS),
        help="raw echo servers: {aio,uvloop,sync[N],bridge[N]}-{bytes,proto} "
        f"(default {','.join(ECHO_VARIANTS)}; sync = {DEFAULT_SYNC_THREADS} threads)",
    )
    parser.add_argument("--podium-model", default="examples/echo", help="model dir (from root)")
    parser.add_argument("--streams", type=int, default=None, help="measured streams per round")
    parser.add_argument("--warmup-streams", type=int, default=3)
    parser.add_argument("--stream-n", type=int, default=1000, help="items per stream")
    parser.add_argument(
        "--stream-only",
        type=_csv,
        default=list(STREAM_TARGETS),
        help="podium (its default framing), podium-mlserver, podium-triton, mlserver, "
        "podium-torchserve, echo-VARIANT (raw stream); "
        f"default {','.join(STREAM_TARGETS)}",
    )
    parser.add_argument("--no-unary", action="store_true", help="skip the ModelInfer benchmark")
    parser.add_argument("--no-stream", action="store_true", help="skip the streaming benchmark")
    parser.add_argument("--json", type=Path, default=None, help="also write raw results here")
    parser.add_argument(
        "--podium-args",
        default="",
        help="extra `podium serve` arguments for every Podium server, e.g. '--grpc-aio'",
    )
    parser.add_argument(
        "--base-src",
        type=Path,
        default=None,
        help="also run each Podium server (rows *-base) from this tree's src/ (e.g. an older "
        "checkout's), in the same rounds: before and after in one run",
    )
    args = parser.parse_args(argv)
    if args.base_src is not None:
        args.base_src = args.base_src.resolve()
        if not (args.base_src / "podium" / "__init__.py").is_file():
            parser.error(f"--base-src {args.base_src}: no podium package there")
    PODIUM_ARGS[:] = args.podium_args.split()
    args.repeat = args.repeat or (1 if args.quick else 3)
    args.duration = args.duration or (3 if args.quick else 10)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.quick else 3)
    args.streams = args.streams or (5 if args.quick else 20)
    if min(args.repeat, args.duration, args.clients, args.max_streams, args.streams) < 1:
        parser.error("--repeat, --duration, --clients, --max-streams, --streams must be ≥ 1")
    bad = set(args.requests) - {"typed", "raw"}
    if bad or not args.requests:
        parser.error(f"--requests takes typed and/or raw, not {','.join(sorted(bad))}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    exit_on_signals()
    pin_self(CLIENT_CPU)
    args.mlserver_bin, args.mlserver_error = None, None
    try:
        args.mlserver_bin = ensure_mlserver()
    except BenchError as exc:
        args.mlserver_error = f"MLServer could not be installed: {str(exc).splitlines()[0]}"
        log(args.mlserver_error)

    sections: list[str] = []
    raw: dict[str, Any] = {"command": command_line()}
    bad = False
    try:
        gen = pick_loadgen(args.loadgen)
    except BenchError as exc:
        print(f"bench/grpc_bench.py: error: {exc}", file=sys.stderr)
        return 2
    log(f"load generator: {gen.description}")
    if not args.no_unary:
        try:
            targets = build_targets(args)
        except BenchError as exc:
            print(f"bench/grpc_bench.py: error: {exc}", file=sys.stderr)
            return 2
        for t in targets:
            if t.available is not None:
                log(f"{t.name}: skipped: {t.available}")
        for round_no in range(1, args.repeat + 1):
            one_round(targets, gen, args, round_no)
        sections.append(unary_report(targets, gen, args))
        raw["unary"] = {
            t.name: {
                "available": t.available,
                "runs": {form: [asdict(r) for r in rs] for form, rs in t.runs.items()},
                "failures": t.failures,
            }
            for t in targets
        }
        bad |= any(
            t.failures or t.available or any(r.errors for rs in t.runs.values() for r in rs)
            for t in targets
        )
    if not args.no_stream:
        try:
            stargets = build_stream_targets(args)
        except BenchError as exc:
            print(f"bench/grpc_bench.py: error: {exc}", file=sys.stderr)
            return 2
        for round_no in range(1, args.repeat + 1):
            stream_round(stargets, gen, args, round_no)
        sections.append(stream_report(stargets, gen, args))
        raw["stream"] = {
            t.name: {
                "available": t.available,
                "framing": t.framing,
                "grpcio_streams": [asdict(r) for r in t.results],
                "h2load_stream_ms": t.h2_ms,
                "problems": t.problems,
            }
            for t in stargets
        }
        bad |= any(t.problems or t.available for t in stargets)

    text = "\n\n".join(sections)
    print(text)
    if args.json is not None:
        raw["report"] = text
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(raw, indent=2))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
