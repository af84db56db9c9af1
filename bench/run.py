"""Podium's benchmark: OIP REST inference on an echo model, against MLServer and raw ASGI.

    .venv/bin/python bench/run.py [--quick] [--repeat N] [--duration S] [--warmup S]
                                  [--podium-http-server NAME[,NAME]] [--loadgen auto|wrk|python]
                                  [--only podium,mlserver,hello-granian,hello-uvicorn] [--json PATH]
    .venv/bin/python bench/run.py --stream [stream.py options]   # the streaming benchmark

One run sets up what it needs (MLServer in bench/.venvs/mlserver, wrk), then, --repeat times,
starts each server in turn pinned to CPU 0, checks one response, loads it from CPU 1 with the
same generator (64 keep-alive connections, a discarded warm-up, then --duration seconds) and
stops it. It prints a markdown report of medians and ratios; see bench/README.md.
"""

from __future__ import annotations

import argparse
import functools
import http.client
import json
import math
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from common import (
    BENCH,
    CLIENT_CPU,
    ROOT,
    BenchError,
    ProcessUsage,
    Server,
    asgi_servers,
    command_line,
    ensure_mlserver,
    ensure_wrk,
    exit_on_signals,
    free_port,
    http_get,
    http_post_json,
    log,
    machine_lines,
    median,
    mlserver_server,
    mlserver_version,
    package_version,
    pin_self,
    pinned,
    podium_argv,
    podium_help,
    podium_http_server,
    run_client,
    tool_version,
)

INFER_BODY = b'{"inputs":[{"name":"input-0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}'
INFER_LUA = BENCH / "infer.lua"
HTTP_SERVERS = ("granian", "uvicorn")
#: Load generator CPU share above which a row is marked as possibly limited by the generator.
GEN_BOUND_PCT = 90


# --------------------------------------------------------------------------- load generators


@dataclass
class LoadResult:
    rps: float
    p50_ms: float
    p99_ms: float
    requests: int
    non_2xx: int
    socket_errors: int
    client_cpu_pct: float = math.nan  # the generator's CPU time / run time
    # the server process over the measured run, per completed request (all its threads):
    server_cpu_us: float = math.nan  # CPU time (user + system), microseconds
    server_vcs: float = math.nan  # voluntary context switches (a thread waited to be woken)
    server_ics: float = math.nan  # involuntary ones (preempted)
    model_busy: float = math.nan  # share of the run the model spent in predict (batch rows)
    batch_mean: float = math.nan  # requests per batch over the run (batch rows)

    @property
    def errors(self) -> int:
        return self.non_2xx + self.socket_errors


_UNIT_MS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3, "h": 3600e3}


def _duration_ms(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s|m|h)", text.strip())
    if not match:
        raise BenchError(f"cannot parse wrk latency {text!r}")
    return float(match.group(1)) * _UNIT_MS[match.group(2)]


def parse_wrk(output: str) -> LoadResult:
    """req/s, p50, p99, non-2xx and socket errors from `wrk --latency` output."""
    rps = re.search(r"Requests/sec:\s+([\d.]+)", output)
    p50 = re.search(r"^\s+50%\s+(\S+)", output, re.M)
    p99 = re.search(r"^\s+99%\s+(\S+)", output, re.M)
    total = re.search(r"(\d+) requests in", output)
    if not (rps and p50 and p99 and total):
        raise BenchError(f"unexpected wrk output:\n{output}")
    non_2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", output)
    sock = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output
    )
    return LoadResult(
        rps=float(rps.group(1)),
        p50_ms=_duration_ms(p50.group(1)),
        p99_ms=_duration_ms(p99.group(1)),
        requests=int(total.group(1)),
        non_2xx=int(non_2xx.group(1)) if non_2xx else 0,
        socket_errors=sum(int(g) for g in sock.groups()) if sock else 0,
    )


class LoadGenerator:
    """Runs one fixed-duration load on a URL from CLIENT_CPU; same for every server in a run."""

    name = ""
    description = ""

    def run(self, url: str, post_json: bytes | None, duration: int, connections: int) -> LoadResult:
        raise NotImplementedError


class Wrk(LoadGenerator):
    def __init__(self, path: str) -> None:
        self.path = path
        self.name = "wrk"
        self.description = tool_version([path, "--version"]).split(" Copyright")[0]

    def run(self, url: str, post_json: bytes | None, duration: int, connections: int) -> LoadResult:
        argv = [self.path, "-t1", f"-c{connections}", f"-d{duration}s", "--latency"]
        if post_json is not None:
            if post_json != INFER_BODY:
                raise BenchError("infer.lua only sends the standard infer body")
            argv += ["-s", str(INFER_LUA)]
        argv.append(url)
        out, cpu = run_client(pinned(argv, CLIENT_CPU), duration)
        result = parse_wrk(out)
        result.client_cpu_pct = cpu
        return result


class PyLoadgen(LoadGenerator):
    def __init__(self) -> None:
        self.name = "python"
        self.description = "bench/loadgen.py (asyncio + uvloop, no wrk available)"

    def run(self, url: str, post_json: bytes | None, duration: int, connections: int) -> LoadResult:
        argv = [sys.executable, str(BENCH / "loadgen.py"), url, "-c", str(connections)]
        argv += ["-d", str(duration), "--json"]
        if post_json is not None:
            argv += [
                "-m",
                "POST",
                "--body",
                post_json.decode(),
                "-H",
                "Content-Type: application/json",
            ]
        out, cpu = run_client(pinned(argv, CLIENT_CPU), duration)
        data = json.loads(out.strip().splitlines()[-1])
        return LoadResult(
            rps=data["rps"],
            p50_ms=data["p50_ms"],
            p99_ms=data["p99_ms"],
            requests=data["requests"],
            non_2xx=data["non_2xx"],
            socket_errors=data["errors"],
            client_cpu_pct=cpu,
        )


def pick_loadgen(choice: str) -> LoadGenerator:
    if choice in ("auto", "wrk"):
        path = ensure_wrk()
        if path:
            return Wrk(path)
        if choice == "wrk":
            raise BenchError("wrk requested but not available")
        log("wrk not available: falling back to bench/loadgen.py for every server")
    return PyLoadgen()


# --------------------------------------------------------------------------- targets


@dataclass
class Target:
    name: str
    label: str
    method: str
    path: str
    make_server: Callable[[], Server]
    check: Callable[[int, bytes], str | None]
    available: str | None = None  # None when usable, else why not
    http_server: str | None = None  # Podium only: the --http-server it is given, if any
    runs: list[LoadResult] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    note: str = ""
    connections: int | None = None  # None: --connections
    busy_probe: bool = False  # the model reports its busy time in its answers' parameters

    @property
    def post_json(self) -> bytes | None:
        return INFER_BODY if self.method == "POST" else None


def _flatten(value: object) -> list[object]:
    if isinstance(value, list):
        return [x for item in value for x in _flatten(item)]
    return [value]


def check_truss(status: int, body: bytes) -> str | None:
    """The Truss echo answers the request's own JSON body."""
    if status != 200:
        return f"HTTP {status}: {body[:300]!r}"
    if json.loads(body) != json.loads(INFER_BODY):
        return f"the Truss echo answered another body: {body[:300]!r}"
    return None


def check_echo(status: int, body: bytes) -> str | None:
    if status != 200:
        return f"HTTP {status}: {body[:300]!r}"
    try:
        outputs = json.loads(body)["outputs"]
        data = [float(x) for x in _flatten(outputs[0]["data"])]  # type: ignore[arg-type]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        return f"not an OIP response ({exc}): {body[:300]!r}"
    if data != [1.0, 2.0, 3.0, 4.0]:
        return f"echo returned {data}, expected [1, 2, 3, 4]"
    return None


def check_hello(status: int, body: bytes) -> str | None:
    if status != 200 or body != b"hello":
        return f"HTTP {status}: {body[:100]!r}"
    return None


def build_targets(args: argparse.Namespace) -> list[Target]:
    wanted = set(args.only.split(",")) if args.only else None
    targets: list[Target] = []

    podium_dir = (ROOT / args.podium_model).resolve()
    podium_name = args.podium_model_name or podium_dir.name
    unavailable = None
    if not podium_help():
        unavailable = "`podium serve --help` fails: Podium's CLI is not available yet"
    elif not podium_dir.is_dir():
        unavailable = f"model directory {podium_dir} does not exist"
    choices: list[str | None] = (
        list(args.podium_http_server.split(",")) if args.podium_http_server else [None]
    )
    # the same echo with a plain `def predict` (bench/models/echo_sync): what the hand-off to
    # a thread and back costs; --base-src adds each Podium row again, run from other sources
    sources: list[tuple[str, str, dict[str, str]]] = [("", "", {})]
    if args.base_src is not None:
        base_env = {"PYTHONPATH": str(Path(args.base_src).resolve() / "src")}
        sources.append(("-base", f" [base: {args.base_src}]", base_env))
    sync_dir = BENCH / "models" / "echo_sync"  # and echo_sync_untimed: response_timeout 0
    for suffix, tag, env in sources:
        for http_server in choices:
            stem = f"podium-{http_server}" if len(choices) > 1 else "podium"
            targets.append(
                Target(
                    name=stem + suffix,
                    label="Podium" + tag,
                    method="POST",
                    path=f"/v2/models/{podium_name}/infer",
                    make_server=functools.partial(_podium_server, podium_dir, http_server, env),
                    check=check_echo,
                    available=unavailable,
                    http_server=http_server,
                )
            )
        for sync_name, sync_label, folder in (
            ("podium-sync", "Podium, sync `def predict`", "echo_sync"),
            (
                "podium-sync-untimed",
                "Podium, sync `def predict`, response_timeout 0",
                "echo_sync_untimed",
            ),
        ):
            if args.no_sync:
                break
            targets.append(
                Target(
                    name=sync_name + suffix,
                    label=sync_label + tag,
                    method="POST",
                    path=f"/v2/models/{folder}/infer",
                    make_server=functools.partial(
                        _podium_server, sync_dir.parent / folder, choices[0], env
                    ),
                    check=check_echo,
                    available=unavailable,
                    http_server=choices[0],
                )
            )

    if args.plain:
        # issue 14's item 4: the plain path, with the access log (on by default) and without
        truss_dir = BENCH / "models" / "truss_echo"
        for suffix, tag, env in sources:
            for name, label, model_dir, path, extra in (
                (
                    "podium-truss",
                    "Podium, Truss route, async echo of the JSON body",
                    truss_dir,
                    "/v1/models/truss_echo:predict",
                    (),
                ),
                (
                    "podium-truss-nolog",
                    "Podium, Truss route, `--no-access-log`",
                    truss_dir,
                    "/v1/models/truss_echo:predict",
                    ("--no-access-log",),
                ),
                (
                    "podium-nolog",
                    "Podium, `--no-access-log`",
                    podium_dir,
                    f"/v2/models/{podium_name}/infer",
                    ("--no-access-log",),
                ),
            ):
                targets.append(
                    Target(
                        name=name + suffix,
                        label=label + tag,
                        method="POST",
                        path=path,
                        make_server=functools.partial(
                            _podium_server, model_dir, choices[0], env, extra
                        ),
                        check=check_echo if model_dir == podium_dir else check_truss,
                        available=unavailable,
                        http_server=choices[0],
                    )
                )

    if args.batch:
        # issue 14's batching workload: 1 ms + 0.05 ms per request, batch_size 32, 128
        # connections; the model reports how busy it was (bench/models/batch_busy; with
        # --batch-model batch_busy_sync, its wait a blocking call on the model's thread)
        batch_dir = BENCH / "models" / args.batch_model
        for suffix, tag, env in sources:
            targets.append(
                Target(
                    name="podium-batch" + suffix,
                    label="Podium, dynamic batching 32, 1 ms + 0.05 ms/item" + tag,
                    method="POST",
                    path=f"/v2/models/{args.batch_model}/infer",
                    make_server=functools.partial(_podium_server, batch_dir, choices[0], env),
                    check=check_echo,
                    available=unavailable,
                    http_server=choices[0],
                    connections=args.batch_connections,
                    busy_probe=True,
                )
            )

    # Podium's own app under granian: the HTTP-server choice measured on Podium's request path.
    targets.append(
        Target(
            name="podium-app-granian",
            label="Podium's app on granian",
            method="POST",
            path="/v2/models/echo/infer",
            make_server=lambda: asgi_servers(
                ["granian"], app="podium_app:make_app", prefix="podium-app", factory=True
            )[0],
            check=check_echo,
        )
    )

    ml_folder = BENCH / "mlserver_echo"
    mlserver = Target(
        name="mlserver",
        label="MLServer",
        method="POST",
        path="/v2/models/echo/infer",
        make_server=lambda: mlserver_server(args.mlserver_bin, ml_folder, free_port()),
        check=check_echo,
    )
    if args.mlserver_bin is None:
        mlserver.available = args.mlserver_error
    targets.append(mlserver)

    for http_server in HTTP_SERVERS:
        targets.append(
            Target(
                name=f"hello-{http_server}",
                label=f"raw ASGI hello on {http_server}",
                method="GET",
                path="/",
                make_server=functools.partial(_hello_server, http_server),
                check=check_hello,
            )
        )
    if args.plain:
        # the floor of a POST echo: read the body, answer it (no parsing) on bare uvicorn
        targets.append(
            Target(
                name="hello-echo-uvicorn",
                label="raw ASGI echo of the body on uvicorn",
                method="POST",
                path="/v1/models/truss_echo:predict",
                make_server=lambda: asgi_servers(
                    ["uvicorn"], app="hello_app:echo_app", prefix="hello-echo"
                )[0],
                check=check_truss,
            )
        )
    if wanted is not None:

        def picked(t: Target) -> bool:
            return (
                t.name in wanted
                or t.name.removesuffix("-base") in wanted
                or (t.name.startswith("podium-") and "podium" in wanted)
            )

        names = {t.name for t in targets} | {"podium"}
        unknown = wanted - names
        if unknown:
            raise BenchError(f"unknown --only names: {', '.join(sorted(unknown))}")
        targets = [t for t in targets if picked(t)]
    return targets


def _hello_server(http_server: str) -> Server:
    return asgi_servers([http_server])[0]


def _podium_server(
    model_dir: Path,
    http_server: str | None,
    env: dict[str, str] | None = None,
    extra: Sequence[str] = (),
) -> Server:
    port = free_port()
    argv = [*podium_argv(model_dir, port, http_server), *extra]
    return Server(name="podium", argv=argv, port=port, env=env or {})


# --------------------------------------------------------------------------- running


def one_round(
    targets: list[Target], gen: LoadGenerator, args: argparse.Namespace, round_no: int
) -> None:
    for target in targets:
        if target.available is not None:
            continue
        tag = f"round {round_no}/{args.repeat} {target.name}"
        try:
            with target.make_server() as srv:
                if target.name.startswith("podium") and not target.note:
                    target.note = podium_http_server(target.http_server, srv) or "?"
                url = srv.url + target.path
                if target.method == "POST":
                    status, _, body = http_post_json(srv.port, target.path, INFER_BODY)
                else:
                    status, _, body = http_get(srv.port, target.path, timeout=10)
                problem = target.check(status, body)
                if problem:
                    raise BenchError(f"wrong response from {url}: {problem}")
                if args.warmup > 0:
                    warm = gen.run(
                        url, target.post_json, args.warmup, target.connections or args.connections
                    )
                    log(f"{tag}: warm-up {warm.rps:,.0f} req/s (discarded)")
                connections = target.connections or args.connections
                busy_before = _busy(srv.port, target) if target.busy_probe else None
                before = srv.usage()
                result = gen.run(url, target.post_json, args.duration, connections)
                note_usage(result, srv.usage() - before)
                if busy_before is not None:
                    busy_after = _busy(srv.port, target)
                    result.model_busy = (busy_after[0] - busy_before[0]) / (
                        busy_after[1] - busy_before[1]
                    )
                    batches = busy_after[2] - busy_before[2] - 1  # the probe's own
                    result.batch_mean = result.requests / batches if batches > 0 else math.nan
        except (BenchError, OSError, http.client.HTTPException) as exc:
            log(f"{tag}: FAILED: {exc}")
            target.failures.append(f"round {round_no}: {str(exc).splitlines()[0]}")
            continue
        target.runs.append(result)
        flag = f"  ERRORS: {result.non_2xx} non-2xx, {result.socket_errors} socket" * (
            result.errors > 0
        )
        log(
            f"{tag}: {result.rps:,.0f} req/s  p50 {result.p50_ms:.2f} ms  "
            f"p99 {result.p99_ms:.2f} ms{flag}"
        )


def _busy(port: int, target: Target) -> tuple[float, float, int]:
    """The model's busy seconds, its clock and its batches, from one answer's parameters."""
    status, _, body = http_post_json(port, target.path, INFER_BODY)
    params = json.loads(body).get("parameters") or {}
    if status != 200 or "busy_s" not in params:
        raise BenchError(f"no busy figures in {target.name}'s answer: {body[:200]!r}")
    return float(params["busy_s"]), float(params["at_s"]), int(params["batches"])


def note_usage(result: LoadResult, used: ProcessUsage) -> None:
    """The server's CPU time and context switches over a run, per completed request."""
    if result.requests > 0 and used.cpu_s > 0:
        result.server_cpu_us = 1e6 * used.cpu_s / result.requests
        result.server_vcs = used.voluntary / result.requests
        result.server_ics = used.involuntary / result.requests


# --------------------------------------------------------------------------- report


def _fmt_ms(value: float) -> str:
    return "—" if math.isnan(value) else f"{value:.2f}"


def _fmt_num(value: float, digits: int) -> str:
    return "—" if math.isnan(value) else f"{value:,.{digits}f}"


def _ratio(a: float, b: float) -> str:
    if math.isnan(a) or math.isnan(b) or b == 0:
        return "—"
    return f"{a / b:.2f}×"


def report(targets: list[Target], gen: LoadGenerator, args: argparse.Namespace) -> str:
    lines = ["## OIP REST infer: echo model, 64 connections", ""]
    lines += machine_lines(command_line())
    lines.append(
        f"- load: {gen.description}, 1 thread, {args.connections} keep-alive connections, "
        f"{args.warmup} s warm-up (discarded) then {args.duration} s, "
        f"{args.repeat} round(s); figures are medians over rounds"
    )
    versions = [
        f"podium {package_version('podium')}",
        f"granian {package_version('granian')}",
        f"uvicorn {package_version('uvicorn')}",
    ]
    if args.mlserver_bin is not None:
        versions.append(f"mlserver {mlserver_version()} (uvicorn + uvloop + httptools)")
    lines.append(f"- versions: {', '.join(versions)}")
    lines.append("")
    lines.append(
        "| server | request | req/s | p50 ms | p99 ms | req/s min–max | server CPU µs/req "
        "| server cs/req (vol.+invol.) | load gen CPU | rounds | errors |"
    )
    lines.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    gen_bound = False
    med: dict[str, tuple[float, float, float]] = {}
    cpu_us: dict[str, float] = {}
    busy: dict[str, float] = {}
    fill: dict[str, float] = {}
    flagged: list[str] = []
    for t in targets:
        label = t.label
        if t.name.startswith("podium") and (t.note or t.http_server):
            label += f" (on {t.note or t.http_server})"
        if t.available is not None:
            lines.append(
                f"| {label} | {t.method} {t.path} | — | — | — | — | — | — | — | 0 "
                f"| n/a: {t.available} |"
            )
            continue
        rps = median([r.rps for r in t.runs])
        p50 = median([r.p50_ms for r in t.runs])
        p99 = median([r.p99_ms for r in t.runs])
        med[t.name] = (rps, p50, p99)
        cpu_us[t.name] = median(
            [r.server_cpu_us for r in t.runs if not math.isnan(r.server_cpu_us)]
        )
        busy[t.name] = median([r.model_busy for r in t.runs if not math.isnan(r.model_busy)])
        fill[t.name] = median([r.batch_mean for r in t.runs if not math.isnan(r.batch_mean)])
        vcs = median([r.server_vcs for r in t.runs if not math.isnan(r.server_vcs)])
        ics = median([r.server_ics for r in t.runs if not math.isnan(r.server_ics)])
        errors = sum(r.errors for r in t.runs)
        spread = (
            f"{min(r.rps for r in t.runs):,.0f}–{max(r.rps for r in t.runs):,.0f}"
            if t.runs
            else "—"
        )
        err_text = "none"
        if errors:
            non2xx = sum(r.non_2xx for r in t.runs)
            sock = sum(r.socket_errors for r in t.runs)
            err_text = f"**FLAGGED** {non2xx} non-2xx, {sock} socket"
            flagged.append(f"{t.name}: {err_text}")
        if t.failures:
            err_text += f"; {len(t.failures)} failed round(s)"
            flagged += [f"{t.name}: {f}" for f in t.failures]
        rps_text = "—" if math.isnan(rps) else f"{rps:,.0f}"
        gen_cpu = median([r.client_cpu_pct for r in t.runs])
        gen_text = "—" if math.isnan(gen_cpu) else f"{gen_cpu:.0f}%"
        if gen_cpu >= GEN_BOUND_PCT:
            gen_text += " †"
            gen_bound = True
        lines.append(
            f"| {label} | {t.method} {t.path} | {rps_text} | {_fmt_ms(p50)} | {_fmt_ms(p99)} "
            f"| {spread} | {_fmt_num(cpu_us[t.name], 1)} | {_fmt_num(vcs, 2)}+{_fmt_num(ics, 2)} "
            f"| {gen_text} | {len(t.runs)}/{args.repeat} | {err_text} |"
        )

    if gen_bound:
        lines += [
            "",
            f"† the load generator used ≥ {GEN_BOUND_PCT}% of its CPU: it, not the server, may "
            "set this figure.",
        ]
    lines += ["", "| comparison | value |", "|---|---:|"]
    nan3 = (math.nan, math.nan, math.nan)
    mls = med.get("mlserver", nan3)
    hellos = {h: med.get(f"hello-{h}", nan3) for h in HTTP_SERVERS}
    for pt in (
        t
        for t in targets
        if t.name.startswith("podium")
        and not any(word in t.name for word in ("sync", "base", "batch", "truss", "nolog"))
    ):
        pod = med.get(pt.name, nan3)
        on = pt.http_server or pt.note
        who = f"Podium on {on}" if on and on != "?" else "Podium"
        lines.append(f"| {who} / MLServer, req/s | {_ratio(pod[0], mls[0])} |")
        for h in HTTP_SERVERS:
            mark = " (same HTTP server)" if on == h else ""
            lines.append(
                f"| {who} / raw hello on {h}{mark}, req/s | {_ratio(pod[0], hellos[h][0])} |"
            )
        lines.append(
            f"| p99: MLServer / {who} (above 1: Podium's tail is shorter) "
            f"| {_ratio(mls[2], pod[2])} |"
        )
        for h in HTTP_SERVERS:
            lines.append(f"| p99: {who} / raw hello on {h} | {_ratio(pod[2], hellos[h][2])} |")
    for suffix, tag in (("", ""), ("-base", " [base]")):
        async_cpu = cpu_us.get("podium" + suffix)
        for sync_name, what in (("podium-sync", ""), ("podium-sync-untimed", ", no timeout")):
            sync_cpu = cpu_us.get(sync_name + suffix)
            if sync_cpu is None or async_cpu is None:
                continue
            ratio = sync_cpu / async_cpu if async_cpu else math.nan
            verdict = "meets" if ratio <= 1.5 else "**misses**"
            lines.append(
                f"| Podium{tag}: sync{what} / async `predict`, server CPU per request "
                f"(aim ≤ 1.5×: {verdict}) | {_ratio(sync_cpu, async_cpu)} |"
            )
    for suffix, tag in (("", ""), ("-base", " [base]")):
        share = busy.get("podium-batch" + suffix)
        if share is not None and not math.isnan(share):
            verdict = "meets" if share >= 0.9 else "**misses**"
            p99 = med["podium-batch" + suffix][2]
            lines.append(
                f"| Podium{tag}: dynamic batching, model busy under saturation "
                f"(aim ≥ 90 %: {verdict}; p99 {p99:.2f} ms; "
                f"{fill['podium-batch' + suffix]:.1f} requests per batch) | {100 * share:.0f} % |"
            )
    if "podium-batch" in med and "podium-batch-base" in med:
        lines.append(
            "| dynamic batching p99: this checkout / base (aim ≤ 1) "
            f"| {_ratio(med['podium-batch'][2], med['podium-batch-base'][2])} |"
        )
    hello = hellos["uvicorn"]
    hello_cpu = cpu_us.get("hello-uvicorn")
    echo = med.get("hello-echo-uvicorn")
    if echo is not None:
        lines.append(
            "| raw ASGI echo of the body / raw hello on uvicorn, req/s (the floor of a POST "
            f"echo; by server CPU per request {_ratio(hello_cpu or math.nan, cpu_us.get('hello-echo-uvicorn', math.nan))}) "
            f"| {_ratio(echo[0], hello[0])} |"
        )
        for name in ("podium-truss", "podium-truss-nolog"):
            if name in cpu_us and "hello-echo-uvicorn" in cpu_us:
                lines.append(
                    f"| {name}: server CPU per request above the raw echo's "
                    f"| {cpu_us[name] - cpu_us['hello-echo-uvicorn']:.1f} µs |"
                )
    # Issue 26's aims, with the defaults on: server CPU per request at most 1.5x the raw ASGI echo
    # of the body on the same uvicorn, and OIP REST at least 6.5x MLServer's req/s.
    echo_cpu = cpu_us.get("hello-echo-uvicorn")
    for suffix, tag in (("", ""), ("-base", " [base]")):
        for name, what in (
            ("podium-truss", "Truss route, access log on"),
            ("podium-truss-nolog", "Truss route, access log off"),
            ("podium", "OIP infer, access log on"),
            ("podium-nolog", "OIP infer, access log off"),
        ):
            cpu = cpu_us.get(name + suffix)
            if not cpu or not echo_cpu:
                continue
            verdict = "meets" if cpu / echo_cpu <= 1.5 else "**misses**"
            lines.append(
                f"| Podium{tag}, {what}: server CPU per request / the raw echo's "
                f"(aim ≤ 1.5×: {verdict}) | {_ratio(cpu, echo_cpu)} |"
            )
        pod = med.get("podium" + suffix)
        if pod is not None and not math.isnan(mls[0]):
            verdict = "meets" if pod[0] / mls[0] >= 6.5 else "**misses**"
            lines.append(
                f"| Podium{tag}, OIP infer / MLServer, req/s (aim ≥ 6.5×: {verdict}) "
                f"| {_ratio(pod[0], mls[0])} |"
            )
    for name in (
        "podium",
        "podium-sync",
        "podium-sync-untimed",
        "podium-truss",
        "podium-truss-nolog",
        "podium-nolog",
    ):
        if name in cpu_us and name + "-base" in cpu_us:
            lines.append(
                f"| {name}: server CPU per request, this checkout / base "
                f"| {_ratio(cpu_us[name], cpu_us[name + '-base'])} |"
            )
    lines.append(
        "| MLServer / raw hello on uvicorn (its HTTP server), req/s "
        f"| {_ratio(mls[0], hellos['uvicorn'][0])} |"
    )
    if flagged:
        lines += ["", "**Flagged:**", *[f"- {f}" for f in flagged]]
    return "\n".join(lines)


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="bench/run.py", description="Podium vs MLServer vs raw ASGI, OIP REST infer."
    )
    parser.add_argument("--quick", action="store_true", help="1 round, 3 s runs, 1 s warm-up")
    parser.add_argument("--repeat", type=int, default=None, help="rounds (default 3)")
    parser.add_argument("--duration", type=int, default=None, help="seconds per run (default 10)")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up seconds (default 3)")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument(
        "--podium-http-server",
        default=None,
        metavar="NAME[,NAME]",
        help="pass `--http-server NAME` to podium; a comma list benchmarks Podium on each",
    )
    parser.add_argument("--podium-model", default="examples/echo", help="model dir (from root)")
    parser.add_argument("--podium-model-name", default=None, help="default: the dir's name")
    parser.add_argument(
        "--base-src",
        default=None,
        metavar="DIR",
        help="also run each Podium row from the checkout DIR (PYTHONPATH=DIR/src): the 'before'",
    )
    parser.add_argument(
        "--batch",
        action="store_true",
        help="add the dynamic-batching row (bench/models/batch_busy: model-busy share, p99)",
    )
    parser.add_argument("--batch-connections", type=int, default=128)
    parser.add_argument(
        "--batch-model",
        choices=("batch_busy", "batch_busy_sync", "batch_busy_sync2"),
        default="batch_busy",
        help="the batching row's model (bench/models): batch_busy_sync waits on its thread, "
        "batch_busy_sync2 on two (predict_concurrency 2, each batch twice as long)",
    )
    parser.add_argument(
        "--plain",
        action="store_true",
        help="add the plain-path rows (issue 14 item 4): podium-truss (the Truss route on an "
        "async echo of the JSON body), podium-truss-nolog and podium-nolog (--no-access-log)",
    )
    parser.add_argument(
        "--no-sync", action="store_true", help="leave out the sync `def predict` echo row"
    )
    parser.add_argument("--loadgen", choices=("auto", "wrk", "python"), default="auto")
    parser.add_argument("--only", default=None, help="comma-separated subset of servers")
    parser.add_argument("--json", type=Path, default=None, help="also write raw results here")
    args = parser.parse_args(argv)
    args.repeat = args.repeat or (1 if args.quick else 3)
    args.duration = args.duration or (3 if args.quick else 10)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.quick else 3)
    if args.repeat < 1 or args.duration < 1 or args.connections < 1:
        parser.error("--repeat, --duration and --connections must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--stream" in argv:
        import stream

        argv.remove("--stream")
        return stream.main(argv)
    args = parse_args(argv)
    exit_on_signals()
    pin_self(CLIENT_CPU)

    try:
        gen = pick_loadgen(args.loadgen)
    except BenchError as exc:
        print(f"bench/run.py: error: {exc}", file=sys.stderr)
        return 2
    log(f"load generator: {gen.description}")
    args.mlserver_bin, args.mlserver_error = None, None
    if args.only is None or "mlserver" in args.only.split(","):
        try:
            args.mlserver_bin = ensure_mlserver()
        except BenchError as exc:
            args.mlserver_error = f"MLServer could not be installed: {str(exc).splitlines()[0]}"
            log(args.mlserver_error)
    try:
        targets = build_targets(args)
    except BenchError as exc:
        print(f"bench/run.py: error: {exc}", file=sys.stderr)
        return 2
    for t in targets:
        if t.available is not None:
            log(f"{t.name}: skipped: {t.available}")

    for round_no in range(1, args.repeat + 1):
        one_round(targets, gen, args, round_no)

    text = report(targets, gen, args)
    print(text)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        raw = {
            "command": command_line(),
            "loadgen": gen.description,
            "targets": {
                t.name: {
                    "available": t.available,
                    "note": t.note,
                    "runs": [asdict(r) for r in t.runs],
                    "failures": t.failures,
                }
                for t in targets
            },
            "report": text,
        }
        args.json.write_text(json.dumps(raw, indent=2))
    bad = any(t.failures or any(r.errors for r in t.runs) or t.available for t in targets)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
