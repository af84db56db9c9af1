"""perf_analyzer, Triton's own load tool, against Podium and the real Triton, side by side.

    .venv/bin/python bench/perf_analyzer.py [--quick] [--repeat N] [--concurrency 1,8,32]
                                            [--protocols http,grpc] [--window MS]
                                            [--stability PCT] [--elements N] [--only NAME,...]
                                            [--floor] [--floor-grpc handoff|sync|uvloop]
                                            [--json PATH] [--base-src DIR/src]
    .venv/bin/python bench/perf_analyzer.py --setup    # install only; print perf_analyzer's path

**perf_analyzer.** PyPI's ``perf-analyzer`` 2.60 is not installable here (the mirror has a 0.1.0
placeholder), but ``tritonclient``'s manylinux x86_64 wheels up to 2.52 bundle the
``perf_analyzer`` binary (``bin/perf_analyzer``): 2.51.0 is taken, the release of the Triton it
is compared with. It links ``libb64.so.0d`` and ``libcudart.so.12`` (built with CUDA for its
CUDA shared memory option; on a machine without a GPU the library loads and is never called);
both lie, under hashed names, in ``nvidia-pytriton``'s bundled libraries, which the Triton side
needs anyway. So one venv, ``bench/.venvs/perf_analyzer`` (git-ignored, made once, kept while
its requirements stay the same), holds ``nvidia-pytriton==0.7.0`` (Triton 2.51's
``tritonserver`` with its python backend) and ``tritonclient[http,grpc]==2.51.0``
(``perf_analyzer``), and ``bin/perf-analyzer`` in it is a wrapper that runs the binary with
those two libraries on ``LD_LIBRARY_PATH`` (links in ``pa-libs/``).

**Servers**, each pinned to CPU 0, one at a time, fresh for each round:

- Triton 2.51 (``tritonserver`` laid out as the conformance harness does,
  ``tests/conformance/harness/triton_layout.py``), serving ``identity_fp32`` of
  ``tests/conformance/models/triton/scenarios``: python backend, ``max_batch_size: 0``, one
  ``KIND_CPU`` instance, ``OUTPUT0 = INPUT0``;
- Podium from this checkout, serving its twin (``tests/conformance/models/podium/scenarios``): a
  model that takes the request and passes the tensor through, one worker (the default);
- with ``--base-src``, "podium-base": the same, from another tree's sources (before and after
  in one run);
- with ``--floor`` (or ``floor`` in ``--only``), "floor": the least any Python server on
  Podium's stack can do per call, answering only what perf_analyzer asks of ``identity_fp32``:
  ``bench/pa_floor_http.py`` (raw ASGI on uvicorn, uvloop, httptools, no access log) and
  ``bench/pa_floor_grpc.py`` (raw grpcio, ``--floor-grpc``'s shape), both pinned to CPU 0,
  without statistics. The report adds floor / Triton and Podium / floor (bench/README.md).

**Load.** perf_analyzer, pinned to CPU 1, with its defaults but for the windows
(synchronous calls, one thread per concurrent request, random FP32 data in binary tensors):
``-m identity_fp32 -i http|grpc --shape INPUT0:N --concurrency-range C -p WINDOW -s 1000 -r 3
-f CSV``: three windows, whose average it reports. perf_analyzer's own stability test (windows
until three in a row agree within ``-s`` %, 10 % by default) fails often on a machine shared
with other work, so by default a run is a fixed three windows, as the other benchmarks here run
for a fixed time, and rounds and medians take care of the noise; ``--stability PCT`` restores
the test (``-s PCT -r 10``; a run that does not stabilise is flagged). Any failed request flags
the row. Each server first gets one discarded warm-up run per protocol. Rounds alternate the
servers' order (as ``--only`` lists them in odd rounds, reversed in even ones); every figure
is the median over rounds.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import platform
import re
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from common import (
    BENCH,
    CLIENT_CPU,
    ROOT,
    VENVS,
    BenchError,
    Server,
    asgi_servers,
    can_pin,
    command_line,
    exit_on_signals,
    free_port,
    http_get,
    http_post_json,
    log,
    machine_lines,
    median,
    package_version,
    pinned,
    podium_help,
    repo_bin,
)

sys.path.insert(0, str(ROOT / "tests" / "conformance"))
from harness.triton_layout import lay_out, triton_argv  # noqa: E402

PA_VENV = VENVS / "perf_analyzer"
PA_REQUIREMENTS = ("nvidia-pytriton==0.7.0", "tritonclient[http,grpc]==2.51.0")
#: The wrapper that runs perf_analyzer with its two libraries found.
PA_WRAPPER = PA_VENV / "bin" / "perf-analyzer"
_STAMP = PA_VENV / ".bench-stamp"

MODEL = "identity_fp32"
TRITON_REPOSITORY = ROOT / "tests" / "conformance" / "models" / "triton" / "scenarios"
PODIUM_MODEL = ROOT / "tests" / "conformance" / "models" / "podium" / "scenarios" / MODEL
SERVERS = ("podium", "triton")
FLOOR = "floor"
#: bench/pa_floor_grpc.py's shapes; the first is the default.
FLOOR_GRPC_SHAPES = ("handoff", "sync", "uvloop")


# --------------------------------------------------------------------------- set-up


def _pa_python() -> Path:
    return PA_VENV / "bin" / "python"


def perf_analyzer_version() -> str:
    """What the wrapper's ``--version`` says, or '' when it does not run."""
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        done = subprocess.run(
            [str(PA_WRAPPER), "--version"], capture_output=True, text=True, timeout=60
        )
        said = (done.stdout + done.stderr).strip()  # 2.51 writes it on stderr
        if done.returncode == 0 and said.startswith("Perf Analyzer Version"):
            return said.splitlines()[0]
    return ""


def ensure_perf_analyzer() -> Path:
    """The perf_analyzer wrapper, installing ``bench/.venvs/perf_analyzer`` first when it is
    missing, broken or made for other requirements. ``BenchError`` says why it cannot be had."""
    if (platform.system(), platform.machine()) != ("Linux", "x86_64"):
        raise BenchError(
            "perf_analyzer exists only as a Linux x86_64 binary (tritonclient<=2.52 manylinux "
            f"wheels); this machine is {platform.system()} {platform.machine()}"
        )
    wanted = "\n".join(PA_REQUIREMENTS)
    if _STAMP.is_file() and _STAMP.read_text() == wanted and perf_analyzer_version():
        return PA_WRAPPER
    log(f"installing {' '.join(PA_REQUIREMENTS)} into {PA_VENV}")
    VENVS.mkdir(parents=True, exist_ok=True)
    if not _pa_python().exists():
        _checked([sys.executable, "-m", "venv", str(PA_VENV)], timeout=300)
    _checked(
        [
            str(_pa_python()),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            *PA_REQUIREMENTS,
        ],
        timeout=1800,
    )
    binary = PA_VENV / "bin" / "perf_analyzer"
    if not binary.is_file():
        raise BenchError(f"tritonclient 2.51.0 installed no {binary}")
    found = sorted(PA_VENV.glob("lib/python*/site-packages/nvidia_pytriton.libs"))
    if not found:
        raise BenchError(f"nvidia-pytriton's bundled libraries are not in {PA_VENV}")
    libs = PA_VENV / "pa-libs"
    libs.mkdir(exist_ok=True)
    for name, pattern in (("libb64.so.0d", "libb64-*.so.0d"), ("libcudart.so.12", "libcudart-*")):
        matches = sorted(found[0].glob(pattern))
        if not matches:
            raise BenchError(f"no {pattern} in {found[0]} (perf_analyzer needs {name})")
        link = libs / name
        link.unlink(missing_ok=True)
        link.symlink_to(matches[0])
    PA_WRAPPER.write_text(
        "#!/bin/sh\n"
        "# perf_analyzer (tritonclient 2.51.0) with the libraries it links, from nvidia-pytriton.\n"
        f'LD_LIBRARY_PATH="{libs}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}" '
        f'exec "{binary}" "$@"\n'
    )
    PA_WRAPPER.chmod(0o755)
    version = perf_analyzer_version()
    if not version:
        done = subprocess.run(
            [str(PA_WRAPPER), "--version"], capture_output=True, text=True, timeout=60
        )
        raise BenchError(f"perf_analyzer does not run here:\n{done.stdout}{done.stderr}")
    _STAMP.write_text(wanted)
    log(f"{version} installed")
    return PA_WRAPPER


def _checked(argv: list[str], timeout: float) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BenchError(f"{shlex.join(argv)} failed: {exc}") from exc
    if done.returncode != 0:
        raise BenchError(
            f"{shlex.join(argv)} exited {done.returncode}:\n{(done.stdout + done.stderr)[-3000:]}"
        )


# --------------------------------------------------------------------------- servers


@dataclass
class Running:
    """A started server and its two inference ports."""

    name: str
    server: Server
    ports: dict[str, int]
    #: The process serving a protocol where it is not ``server`` (the floor's gRPC echo).
    by_protocol: dict[str, Server] = field(default_factory=dict)

    def serving(self, protocol: str) -> Server:
        """The process that answers ``protocol``: the one whose CPU time its runs count."""
        return self.by_protocol.get(protocol, self.server)

    def processes(self) -> list[Server]:
        return [self.server, *self.by_protocol.values()]


def podium_server(workdir: Path, src: Path | None = None, name: str = "podium") -> Running:
    """Podium serving the twin; ``src``: another tree's ``src`` (``--base-src``) in place of
    this checkout's."""
    http, grpc = free_port(), free_port()
    help_text = podium_help()
    if not help_text:
        raise BenchError("`podium serve --help` does not work (Podium's CLI not available)")
    argv = [str(repo_bin("podium")), "serve", str(PODIUM_MODEL), "--host", "127.0.0.1"]
    argv += ["--http-port", str(http), "--grpc-port", str(grpc)]
    for option in ("--management-port", "--grpc-management-port", "--metrics-port"):
        if re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", help_text):
            argv += [option, str(free_port())]
    # Podium's own sources: the checkout this script is in, whatever podium's venv points at.
    source = str(src or ROOT / "src")
    pythonpath = os.pathsep.join(p for p in (source, os.environ.get("PYTHONPATH")) if p)
    server = Server(name, argv, http, cwd=workdir, env={"PYTHONPATH": pythonpath})
    return Running(name, server, {"http": http, "grpc": grpc})


def triton_server(workdir: Path) -> Running:
    http, grpc = free_port(), free_port()
    install = lay_out(_pa_python(), workdir)
    argv = triton_argv(install, [TRITON_REPOSITORY], http, grpc, load=MODEL)
    server = Server("triton", argv, http, cwd=workdir, env=install.env, ready_timeout=240)
    return Running("triton", server, {"http": http, "grpc": grpc})


def floor_server(_workdir: Path, grpc_shape: str) -> Running:
    """The floor: bench/pa_floor_http.py on uvicorn (uvloop, httptools, no access log) and
    bench/pa_floor_grpc.py in ``grpc_shape``, two processes."""
    from grpc_bench import GrpcServer  # imports grpc: only where a floor is asked for

    (http,) = asgi_servers(["uvicorn"], app="pa_floor_http:app", prefix=FLOOR)
    port = free_port()
    argv = [sys.executable, str(BENCH / "pa_floor_grpc.py"), "--port", str(port)]
    grpc = GrpcServer(f"{FLOOR}-grpc", [*argv, "--server", grpc_shape], port, cwd=BENCH)
    return Running(FLOOR, http, {"http": http.port, "grpc": port}, {"grpc": grpc})


def check_identity(running: Running) -> None:
    """One JSON request: the identity must answer its input."""
    body = json.dumps(
        {"inputs": [{"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
    ).encode()
    status, _, answer = http_post_json(running.ports["http"], f"/v2/models/{MODEL}/infer", body)
    outputs = json.loads(answer).get("outputs", []) if status == 200 else []
    if not outputs or outputs[0].get("data") != [1, 2, 3, 4]:
        raise BenchError(f"{running.name} answered {status} {answer[:300]!r}, not the identity")


def server_extensions(running: Running) -> list[str]:
    status, _, body = http_get(running.ports["http"], "/v2")
    return list(json.loads(body).get("extensions", [])) if status == 200 else []


# --------------------------------------------------------------------------- load


@dataclass
class Measured:
    """One perf_analyzer run: what its CSV says, its CPU share, and whether it failed."""

    throughput: float = float("nan")
    p50_us: float = float("nan")
    p99_us: float = float("nan")
    server_us: float | None = None  # queue + compute, from the statistics extension
    client_cpu: float = float("nan")
    server_cpu: float = float("nan")  # the server's CPU time over the run's wall time
    switches: float = float("nan")  # the server's thread switches per request (all threads)
    error: str = ""
    row: dict[str, str] = field(default_factory=dict)


def _stability(percent: int | None) -> list[str]:
    """perf_analyzer's stability options: a fixed three windows (None), or its own test."""
    return ["-s", "1000", "-r", "3"] if percent is None else ["-s", str(percent), "-r", "10"]


def run_perf_analyzer(
    wrapper: Path,
    port: int,
    protocol: str,
    concurrency: int,
    args: argparse.Namespace,
    *,
    window: int | None = None,
    stability: int | None = None,
    server: Server | None = None,
) -> Measured:
    """One perf_analyzer run; ``server``: the one it loads, whose CPU time and thread switches
    over the run are counted (its whole process tree: Triton's python backend runs the model in
    a process of its own)."""
    with tempfile.TemporaryDirectory(prefix="bench-pa-") as tmp:
        report = Path(tmp) / "report.csv"
        argv = [
            str(wrapper),
            "-m",
            MODEL,
            "-u",
            f"127.0.0.1:{port}",
            "-i",
            protocol,
            "--shape",
            f"INPUT0:{args.elements}",
            "--concurrency-range",
            str(concurrency),
            "-p",
            str(window or args.window),
            *_stability(stability or args.stability),
            "-f",
            str(report),
        ]
        argv = pinned(argv, CLIENT_CPU)
        limit = (window or args.window) / 1000 * 1.2 * 10 + 120
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        server_before = None if server is None else server.tree_usage().usage
        start = time.monotonic()
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=limit)
        except subprocess.TimeoutExpired:
            return Measured(error=f"perf_analyzer ran past {limit:.0f} s")
        wall = time.monotonic() - start
        server_after = None if server is None else server.tree_usage().usage
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        output = done.stdout + done.stderr
        if done.returncode != 0 or not report.is_file():
            lines = [line for line in output.splitlines() if line.strip()]
            return Measured(error=f"exit {done.returncode}: " + " / ".join(lines[-3:]))
        with report.open() as f:
            rows = list(csv.DictReader(f))
    if not rows:
        return Measured(error="perf_analyzer wrote an empty report")
    row = rows[0]
    server_parts = ("Server Queue", "Server Compute Input", "Server Compute Infer")
    server_us = None
    if all(part in row for part in server_parts):
        server_us = sum(float(row[p]) for p in (*server_parts, "Server Compute Output") if p in row)
    throughput = float(row["Inferences/Second"])
    server_cpu = switches = float("nan")
    if server_before is not None and server_after is not None and wall > 0:
        used = server_after - server_before
        server_cpu = used.cpu_s / wall
        if throughput > 0:  # requests over the whole run, at the windows' rate
            switches = (used.voluntary + used.involuntary) / (throughput * wall)
    return Measured(
        throughput=throughput,
        server_cpu=server_cpu,
        switches=switches,
        p50_us=float(row["p50 latency"]),
        p99_us=float(row["p99 latency"]),
        server_us=server_us,
        client_cpu=cpu / wall if wall > 0 else float("nan"),
        row=row,
    )


# --------------------------------------------------------------------------- report


def _ms(us: float) -> str:
    return "—" if us != us else f"{us / 1000:.2f}"


def _num(value: float) -> str:
    return "—" if value != value else f"{value:,.0f}"


def _ratios(
    medians: dict[tuple[str, str, int], tuple[float, float, float]],
    args: argparse.Namespace,
    other: str,
    title: str,
    mine: str = "podium",
) -> list[str]:
    """The table of ``mine``'s medians against ``other``'s, per protocol and concurrency."""
    lines = [
        "",
        f"| protocol | concurrency | {title}, infer/s | p50: {other} / {mine} | "
        f"p99: {other} / {mine} |",
        "|---|---:|---:|---:|---:|",
    ]
    for protocol in args.protocols:
        for concurrency in args.concurrency:
            pt, p50p, p99p = medians[(mine, protocol, concurrency)]
            ot, p50o, p99o = medians[(other, protocol, concurrency)]
            lines.append(
                f"| {protocol} | {concurrency} | {pt / ot:.2f}× | {p50o / p50p:.2f}× | "
                f"{p99o / p99p:.2f}× |"
            )
    return lines


def report(
    results: dict[tuple[str, str, int], list[Measured]],
    args: argparse.Namespace,
    versions: dict[str, str],
    stats: dict[str, bool],
    loads: list[str],
) -> tuple[str, bool]:
    flagged = False
    lines = [
        f"### perf_analyzer: identity FP32 [{args.elements}], Podium vs Triton"
        + (", with the floor" if FLOOR in args.only else "")
        + ", "
        f"concurrency {', '.join(map(str, args.concurrency))}",
        "",
        *machine_lines(command_line()),
        f"- machine load (1-minute load average, `uptime`): {'; '.join(loads)}",
        f"- load: {versions['perf_analyzer']} (tritonclient 2.51.0's binary), pinned to CPU "
        f"{CLIENT_CPU}; synchronous calls (one thread per concurrent request), random FP32 data "
        f"[{args.elements}] as binary tensors; "
        + (
            f"3 windows of {args.window} ms per run (`-s 1000 -r 3`)"
            if args.stability is None
            else f"windows of {args.window} ms until 3 agree within {args.stability} %"
        )
        + "; one discarded warm-up run per server and protocol; "
        f"{args.repeat} round(s), servers alternating order; figures are medians over rounds",
        f"- versions: Triton {versions['triton']} (the `tritonserver` of nvidia-pytriton 0.7.0, "
        f"python backend, one KIND_CPU instance), podium {versions['podium']} (one worker)"
        + (
            f"; floor: uvicorn {versions['uvicorn']}, grpcio {versions['grpcio']} "
            f"(`--floor-grpc {args.floor_grpc}`)"
            if FLOOR in args.only
            else ""
        ),
        "- server-side statistics read by perf_analyzer: "
        + ", ".join(f"{name} {'yes' if on else 'no'}" for name, on in stats.items()),
        "",
        "| server | protocol | concurrency | infer/s | p50 ms | p99 ms | server µs | "
        "server CPU | switches / request | infer/s min–max | perf_analyzer CPU | rounds | errors |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    medians: dict[tuple[str, str, int], tuple[float, float, float]] = {}
    for protocol in args.protocols:
        for concurrency in args.concurrency:
            for name in args.only:
                runs = results.get((name, protocol, concurrency), [])
                good = [m for m in runs if not m.error]
                errors = [m.error for m in runs if m.error]
                tput = median([m.throughput for m in good])
                p50 = median([m.p50_us for m in good])
                p99 = median([m.p99_us for m in good])
                medians[(name, protocol, concurrency)] = (tput, p50, p99)
                server_us = [m.server_us for m in good if m.server_us is not None]
                cpu = median([m.client_cpu for m in good])
                server_cpu = median([m.server_cpu for m in good])
                switches = median([m.switches for m in good])
                spread = (
                    f"{min(m.throughput for m in good):,.0f}–{max(m.throughput for m in good):,.0f}"
                    if good
                    else "—"
                )
                mark = " †" if cpu == cpu and cpu >= 0.9 else ""
                if errors or len(good) < args.repeat:
                    flagged = True
                lines.append(
                    f"| {name} | {protocol} | {concurrency} | {_num(tput)} | {_ms(p50)} | "
                    f"{_ms(p99)} | {_num(median(server_us)) if server_us else '—'} | "
                    f"{'—' if server_cpu != server_cpu else f'{server_cpu:.0%}'} | "
                    f"{'—' if switches != switches else f'{switches:.2f}'} | {spread} | "
                    f"{'—' if cpu != cpu else f'{cpu:.0%}'}{mark} | {len(good)}/{args.repeat} | "
                    + ("none" if not errors else "**FLAGGED** " + "; ".join(sorted(set(errors))))
                    + " |"
                )
    if {"podium", "podium-base"} <= set(args.only):
        lines += _ratios(medians, args, "podium-base", f"this tree / base ({args.base_src})")
    if set(SERVERS) <= set(args.only):
        lines += _ratios(medians, args, "triton", "Podium / Triton")
    if {FLOOR, "triton"} <= set(args.only):
        lines += _ratios(medians, args, "triton", "floor / Triton", mine=FLOOR)
    if {"podium", FLOOR} <= set(args.only):
        lines += _ratios(medians, args, FLOOR, "Podium / floor")
    lines += [
        "",
        "server µs: the server's own time per request (queue + compute) from its statistics "
        "extension, as perf_analyzer reports it; server CPU: the server's whole process tree's "
        "CPU time over the run's wall time (100 %: its core saturated); switches / request: its "
        "threads' context switches (voluntary and not) over the run, per request at the run's "
        "rate; **†**: perf_analyzer used 90 % or more of its core, so it may have set the figure.",
    ]
    return "\n".join(lines) + "\n", flagged


# --------------------------------------------------------------------------- main


def _load_average() -> str:
    one, five, _ = os.getloadavg()
    return f"{time.strftime('%H:%M')} {one:.2f} (5-min {five:.2f})"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--setup", action="store_true", help="install only; print the wrapper")
    parser.add_argument("--quick", action="store_true", help="1 round, 1 s windows")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--protocols", default="http,grpc")
    parser.add_argument("--window", type=int, default=4000, help="measurement window, ms")
    parser.add_argument(
        "--stability",
        type=int,
        default=None,
        help="perf_analyzer's -s %% with up to 10 windows (default: a fixed three windows)",
    )
    parser.add_argument("--elements", type=int, default=16, help="INPUT0's FP32 elements")
    parser.add_argument(
        "--only", default=",".join(SERVERS), help=f"servers: podium, triton, {FLOOR}, podium-base"
    )
    parser.add_argument("--floor", action="store_true", help="add the floor (see above)")
    parser.add_argument("--floor-grpc", choices=FLOOR_GRPC_SHAPES, default=FLOOR_GRPC_SHAPES[0])
    parser.add_argument(
        "--base-src",
        type=Path,
        default=None,
        help="another tree's src/ (e.g. main's): a podium-base server beside the others",
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    exit_on_signals()
    try:
        wrapper = ensure_perf_analyzer()
    except BenchError as exc:
        print(f"perf_analyzer cannot be had: {exc}", file=sys.stderr)
        return 2
    if args.setup:
        print(wrapper)
        return 0
    if args.quick:
        args.repeat, args.window = 1, 1000
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    args.protocols = [p for p in args.protocols.split(",") if p]
    args.only = [s for s in args.only.split(",") if s]
    if args.base_src is not None and "podium-base" not in args.only:
        args.only.append("podium-base")
    if args.floor and FLOOR not in args.only:
        args.only.append(FLOOR)
    known = {*SERVERS, FLOOR, "podium-base"}
    if unknown := [name for name in args.only if name not in known]:
        parser.error(f"--only: unknown server(s) {', '.join(unknown)}; known: {sorted(known)}")
    if not can_pin():
        log("cannot pin (taskset missing or fewer than 2 CPUs): figures are not comparable")

    versions = {
        "perf_analyzer": perf_analyzer_version(),
        "podium": package_version("podium"),
        "triton": "?",
        "uvicorn": package_version("uvicorn"),
        "grpcio": package_version("grpcio"),
    }
    stats: dict[str, bool] = {}
    loads = [f"at start {_load_average()}"]
    results: dict[tuple[str, str, int], list[Measured]] = {}
    starters = {
        "podium": podium_server,
        "triton": triton_server,
        "podium-base": lambda tmp: podium_server(tmp, args.base_src, "podium-base"),
        FLOOR: lambda tmp: floor_server(tmp, args.floor_grpc),
    }
    for round_no in range(args.repeat):
        order = args.only if round_no % 2 == 0 else list(reversed(args.only))
        for name in order:
            with tempfile.TemporaryDirectory(prefix=f"bench-{name}-") as tmp:
                log(f"round {round_no + 1}/{args.repeat}: {name}")
                try:
                    running = starters[name](Path(tmp))
                    with contextlib.ExitStack() as stack:
                        for process in running.processes():
                            stack.enter_context(process)
                        check_identity(running)
                        extensions = server_extensions(running)
                        stats[name] = "statistics" in extensions
                        if name == "triton":
                            _, _, meta = http_get(running.ports["http"], "/v2")
                            versions["triton"] = json.loads(meta).get("version", "?")
                        for protocol in args.protocols:
                            port = running.ports[protocol]
                            warm = run_perf_analyzer(
                                wrapper,
                                port,
                                protocol,
                                max(args.concurrency),
                                args,
                                window=1000,
                            )
                            if warm.error:
                                log(f"{name} {protocol} warm-up: {warm.error}")
                            for concurrency in args.concurrency:
                                m = run_perf_analyzer(
                                    wrapper,
                                    port,
                                    protocol,
                                    concurrency,
                                    args,
                                    server=running.serving(protocol),
                                )
                                log(
                                    f"{name} {protocol} c={concurrency}: "
                                    + (
                                        m.error
                                        or f"{m.throughput:,.0f} infer/s, p50 "
                                        f"{m.p50_us:.0f} µs, p99 {m.p99_us:.0f} µs"
                                    )
                                )
                                results.setdefault((name, protocol, concurrency), []).append(m)
                except BenchError as exc:
                    log(f"{name} failed this round: {exc}")
                    for protocol in args.protocols:
                        for concurrency in args.concurrency:
                            results.setdefault((name, protocol, concurrency), []).append(
                                Measured(error=str(exc).splitlines()[0])
                            )
    loads.append(f"at end {_load_average()}")
    text, flagged = report(results, args, versions, stats, loads)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        raw = {f"{n}/{p}/{c}": [asdict(m) for m in runs] for (n, p, c), runs in results.items()}
        args.json.write_text(json.dumps({"versions": versions, "runs": raw}, indent=1))
    return 1 if flagged else 0


if __name__ == "__main__":
    sys.exit(main())
