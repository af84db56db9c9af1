"""Soak: mixed traffic on every protocol against one `podium serve` for a set time; does anything
grow?

    .venv/bin/python bench/soak.py [--duration S] [--warmup S] [--interval S] [--clients N]
                                   [--settle S] [--seed N] [--quick] [--json PATH]

One `podium serve` of a copy of examples/ (every bundled example: a process-worker model, batched
models, streams, continuous batching, native and TorchServe stateful sequences, an MLServer
runtime) pinned to CPU 0; --clients simulated clients (asyncio, httpx + grpc.aio, one process
pinned to CPU 1) each run one scenario after another, picked at random by weight from
bench/soak_traffic.py: OIP REST (JSON, the binary extension, SSE generate_stream and
infer_stream), Truss, TorchServe REST, OIP gRPC (ModelInfer, ModelStreamInfer) and TorchServe
gRPC (Predictions, StreamPredictions); clients that leave mid-request and mid-stream; whole
stateful sequences and sequences left open to idle out; bad requests (malformed JSON, wrong
shapes, unknown models, oversize bodies, a wrong method) and models that raise.

Phases: every scenario once (each must give its expected outcome, or the run stops); --warmup s
of load; the load stops and the server settles (no request in any slot or queue, every open
sequence idled out), then the **start** sample; --duration s of load, sampled every --interval s;
the load stops, the server settles, the **end** sample; every scenario once more, which must
still pass. A sample reads the server's RSS, open fds and threads (/proc), its child processes'
RSS, and from the management API's describe output the slots, queues and open sequences of
every model (and the number of series on --metrics-port's /metrics when something answers
there). Reported: start, end, the largest value and the slope under load, and a flag wherever the
end exceeds the start by more than the row's limit; responses by outcome per protocol and per
scenario; the server log's warnings and errors. Exits non-zero when anything is flagged, and
loudly on any 5xx or server-fault gRPC code that no scenario expects.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml
from common import (
    CLIENT_CPU,
    ROOT,
    BenchError,
    Server,
    command_line,
    exit_on_signals,
    free_port,
    log,
    machine_lines,
    package_version,
    pin_self,
    podium_argv,
)
from soak_traffic import BODY_LIMIT, FAILURES, SCENARIOS, Outcome, Protocol, Tally, Traffic

EXAMPLES = ROOT / "examples"

#: Configuration the soak changes in its copy of the examples (merged into the file's keys):
#: - sequences left open idle out in seconds rather than minutes, so that the server can settle
#:   between phases, and there is room for every sequence the clients hold open side by side,
#:   abandoned ones included;
#: - text-stream (0.4 s a stream) and cancellable (0.3 s held by each client that leaves) get
#:   more than one slot, and text-stream's words come faster, so that the clients are not all
#:   waiting in those two models' lines (some waiting still happens: it is part of the test).
OVERRIDES: dict[str, tuple[str, dict[str, Any]]] = {
    "running-total": ("config.yaml", {"sequence_max_idle_ms": 3000, "max_num_sequences": 256}),
    "stateful-sum": ("model-config.yaml", {"sequenceMaxIdleMSec": 3000, "maxNumSequence": 256}),
    "stateful-stream": ("model-config.yaml", {"sequenceMaxIdleMSec": 3000, "maxNumSequence": 64}),
    "text-stream": ("config.yaml", {"predict_concurrency": 4, "model_metadata": {"delay_s": 0.01}}),
    "cancellable": ("config.yaml", {"predict_concurrency": 8}),
}

MIB = 1024 * 1024


@dataclass(frozen=True)
class Row:
    """One resource of the table, and how much the end may exceed the start."""

    label: str
    key: str
    unit: str = ""
    absolute: float = 0.0  # allowed growth, in the row's unit
    relative: float = 0.0  # or this fraction of the start, whichever is larger

    def limit(self, start: float) -> float:
        return max(self.absolute, self.relative * start)


ROWS = (
    Row("server RSS", "rss", "MiB", absolute=16, relative=0.10),
    Row("server open fds", "fds", absolute=2),
    # Thread pools (the model pool of --threads, grpc's) start threads on demand, up to the
    # most ever busy at once, and keep them: a few more after the load than after the warm-up
    # is that; a leak keeps rising (see the second half's slope).
    Row("server threads", "threads", absolute=4),
    Row("worker processes", "children"),
    Row("worker processes' RSS", "children_rss", "MiB", absolute=16, relative=0.10),
    Row("slots in use", "busy"),
    Row("requests waiting for a slot", "waiting"),
    Row("requests queued (batches, sequences)", "queued"),
    Row("requests in a continuous batch", "active"),
    Row("open sequences", "sequences"),
    Row("series on /metrics", "series"),
)

#: describe's `queue` fields that count what is in use now (the rest are sizes or totals).
GAUGES = ("busy", "waiting", "queued", "active", "sequences")


@dataclass
class Sample:
    t: float  # seconds since the start sample
    phase: str  # start, load or end
    rss: float  # MiB
    fds: int
    threads: int
    cpu_s: float  # the server's CPU time so far
    children: int
    children_rss: float  # MiB
    busy: int = 0
    waiting: int = 0
    queued: int = 0
    active: int = 0
    sequences: int = 0
    series: int | None = None
    models: dict[str, dict[str, int]] = field(default_factory=dict)
    thread_names: dict[str, int] = field(default_factory=dict)  # what a growing count is
    fd_kinds: dict[str, int] = field(default_factory=dict)

    def value(self, key: str) -> float | None:
        value = getattr(self, key)
        return None if value is None else float(value)


# --------------------------------------------------------------------------- the server


def make_repository(root: Path) -> Path:
    """A copy of examples/ with OVERRIDES applied; each subdirectory is one model."""
    repo = root / "models"
    shutil.copytree(EXAMPLES, repo, ignore=shutil.ignore_patterns("__pycache__"))
    for model, (name, changes) in OVERRIDES.items():
        path = repo / model / name
        config = (yaml.safe_load(path.read_text()) if path.exists() else None) or {}
        path.write_text(yaml.safe_dump(_merged(config, changes), sort_keys=False))
    return repo


def _merged(config: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    out = dict(config)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            value = _merged(out[key], value)
        out[key] = value
    return out


def option(argv: list[str], name: str) -> int:
    return int(argv[argv.index(name) + 1])


# --------------------------------------------------------------------------- tracemalloc

#: Loaded by every Python process of the server (its folder is put first on their PYTHONPATH):
#: SIGUSR1 makes the process write a tracemalloc snapshot (PYTHONTRACEMALLOC turns tracing on),
#: after a full garbage collection, so that garbage in reference cycles the collector has not
#: reached yet is not taken for memory held.
_SITECUSTOMIZE = """\
import gc, itertools, os, signal, tracemalloc

_numbers = itertools.count()


def _snapshot(signum, frame):
    gc.collect()
    path = os.path.join(os.environ["PODIUM_SOAK_SNAPSHOTS"], f"snapshot-{next(_numbers)}")
    tracemalloc.take_snapshot().dump(path + ".tmp")
    os.replace(path + ".tmp", path)


signal.signal(signal.SIGUSR1, _snapshot)
"""


def tracing_env(root: Path) -> dict[str, str]:
    """Environment for a server that traces its Python allocations (8 frames each)."""
    hook = root / "tracing"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    (root / "snapshots").mkdir()
    path = os.pathsep.join(p for p in (str(hook), os.environ.get("PYTHONPATH", "")) if p)
    return {
        "PYTHONPATH": path,
        "PYTHONTRACEMALLOC": "8",
        "PODIUM_SOAK_SNAPSHOTS": str(root / "snapshots"),
    }


async def take_snapshot(pid: int, folder: Path, number: int) -> None:
    """Have the server write tracemalloc snapshot `number`, and wait for it."""
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + 300
    while not (folder / f"snapshot-{number}").exists():
        if time.monotonic() > deadline:
            raise BenchError(f"the server wrote no tracemalloc snapshot {number} in 300 s")
        await asyncio.sleep(0.5)


def allocation_growth(folder: Path, top: int = 10) -> list[str]:
    """Where the Python memory held at the end and not at the start was allocated: the lines
    that allocated it, then the call paths (the allocating line last) that grew most."""
    import tracemalloc

    ignore = [
        tracemalloc.Filter(False, tracemalloc.__file__),
        tracemalloc.Filter(False, "<frozen *>"),
    ]
    first = tracemalloc.Snapshot.load(str(folder / "snapshot-0")).filter_traces(ignore)
    last = tracemalloc.Snapshot.load(str(folder / "snapshot-1")).filter_traces(ignore)
    total = sum(t.size for t in last.traces) - sum(t.size for t in first.traces)
    lines = [f"traced Python memory, end − start: {total / 1024:+,.0f} KiB"]
    for group in ("lineno", "traceback"):
        stats = [s for s in last.compare_to(first, group) if s.size_diff > 0]
        stats.sort(key=lambda s: s.size_diff, reverse=True)
        grown = sum(s.size_diff for s in stats)
        lines.append(f"grown, by {group} ({grown / 1024:+,.0f} KiB in all; the largest):")
        for stat in stats[:top]:
            frames = " → ".join(f"{_short(f.filename)}:{f.lineno}" for f in stat.traceback)
            lines.append(
                f"  {stat.size_diff / 1024:+,.1f} KiB, {stat.count_diff:+,} blocks "
                f"(now {stat.size / 1024:,.1f} KiB): `{frames}`"
            )
    return lines


def _short(filename: str) -> str:
    return re.sub(r"^.*?/(site-packages|src|lib/python3\.\d+|bench)/", "", filename)


# --------------------------------------------------------------------------- sampling


def _status(pid: int) -> dict[str, str]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        out[key] = value.strip()
    return out


def _rss_mib(pid: int) -> float:
    return int(_status(pid).get("VmRSS", "0 kB").split()[0]) / 1024


def _descendants(pid: int) -> list[int]:
    """Every process below `pid` (worker processes and anything they start)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
            parents.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _thread_names(pid: int) -> dict[str, int]:
    names: Counter[str] = Counter()
    for task in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):
            names[
                re.sub(r"\d+$", "N", Path(f"/proc/{pid}/task/{task}/comm").read_text().strip())
            ] += 1
    return dict(sorted(names.items()))


def _fd_kinds(pid: int) -> tuple[int, dict[str, int]]:
    """Open fds, and how many of each kind (socket, pipe, anon_inode:[eventpoll], a file)."""
    kinds: Counter[str] = Counter()
    fds = os.listdir(f"/proc/{pid}/fd")
    for fd in fds:
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            kinds[re.sub(r":\[\d+\]$", "", target)] += 1
    return len(fds), dict(sorted(kinds.items()))


def _cpu_seconds(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Probe:
    """Reads the server's resources: /proc for the process, the management API for its models."""

    def __init__(self, pid: int, management_port: int, metrics_port: int, key: str) -> None:
        self.pid = pid
        self.management = f"http://127.0.0.1:{management_port}"
        self.metrics = f"http://127.0.0.1:{metrics_port}/metrics"
        self.headers = {"Authorization": f"Bearer {key}"}
        self.t0 = time.monotonic()

    async def __aenter__(self) -> Probe:
        # One connection for the whole run: it is one constant fd in the server's count.
        self.client = httpx.AsyncClient(headers=self.headers, timeout=30.0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.client.aclose()

    async def queues(self) -> dict[str, dict[str, int]]:
        """Each model version's describe `queue`, keyed `model` or `model:version`."""
        listing = await self.client.get(f"{self.management}/models", params={"limit": 1000})
        listing.raise_for_status()
        out: dict[str, dict[str, int]] = {}
        for entry in listing.json()["models"]:
            name = entry["modelName"]
            resp = await self.client.get(f"{self.management}/models/{name}/all")
            resp.raise_for_status()
            for version in resp.json():
                key = name + (f":{version['modelVersion']}" if version.get("modelVersion") else "")
                out[key] = {k: int(v) for k, v in (version.get("queue") or {}).items()}
        return out

    async def series(self) -> int | None:
        """Series on /metrics, or None where nothing serves it."""
        try:
            resp = await self.client.get(self.metrics, timeout=10.0)
        except httpx.TransportError:
            return None
        if resp.status_code != 200:
            return None
        return sum(1 for line in resp.text.splitlines() if line and not line.startswith("#"))

    async def sample(self, phase: str) -> Sample:
        status = _status(self.pid)
        fds, fd_kinds = _fd_kinds(self.pid)
        children = _descendants(self.pid)
        rss = 0.0
        for child in children:
            with contextlib.suppress(OSError):
                rss += _rss_mib(child)
        sample = Sample(
            t=time.monotonic() - self.t0,
            phase=phase,
            rss=int(status["VmRSS"].split()[0]) / 1024,
            fds=fds,
            threads=int(status["Threads"]),
            cpu_s=_cpu_seconds(self.pid),
            children=len(children),
            children_rss=rss,
            thread_names=_thread_names(self.pid),
            fd_kinds=fd_kinds,
        )
        sample.models = await self.queues()
        for gauge in GAUGES:
            setattr(sample, gauge, sum(q.get(gauge, 0) for q in sample.models.values()))
        sample.series = await self.series()
        return sample

    async def settle(self, limit: float) -> str | None:
        """Wait until nothing is in any slot or queue and every sequence has ended; None, or
        what is still in use after `limit` seconds."""
        deadline = time.monotonic() + limit
        while True:
            queues = await self.queues()
            busy = {
                f"{model} {gauge}={q[gauge]}"
                for model, q in queues.items()
                for gauge in GAUGES
                if q.get(gauge)
            }
            if not busy:
                await asyncio.sleep(2.0)  # closed connections leave the server's fd table
                return None
            if time.monotonic() > deadline:
                return ", ".join(sorted(busy))
            await asyncio.sleep(0.5)


# --------------------------------------------------------------------------- load


async def run_each(traffic_args: tuple[int, int], rng: random.Random) -> Tally:
    """Every scenario once, one after another."""
    tally = Tally()
    async with Traffic(*traffic_args, rng) as traffic:
        for scenario in SCENARIOS:
            await traffic.run(scenario, tally)
    return tally


async def load(
    duration: float, clients: int, traffic_args: tuple[int, int], rng: random.Random
) -> Tally:
    """`clients` clients, each running scenarios picked by weight, for `duration` seconds."""
    tally = Tally()
    weights = [s.weight for s in SCENARIOS]
    loop = asyncio.get_running_loop()
    stop = loop.time() + duration
    async with Traffic(*traffic_args, rng) as traffic:

        async def client() -> None:
            while loop.time() < stop:
                await traffic.run(rng.choices(SCENARIOS, weights)[0], tally)

        await asyncio.gather(*(client() for _ in range(clients)))
    return tally


@dataclass
class Result:
    samples: list[Sample]
    smoke: Tally
    warmup: Tally
    measured: Tally
    after: Tally
    measured_s: float
    loadgen_cpu: float  # share of one core the load generator used while measured
    settle_problems: list[str]
    flags: list[str] = field(default_factory=list)
    log_summary: dict[str, Any] = field(default_factory=dict)
    allocations: list[str] = field(default_factory=list)  # with --tracemalloc


async def soak(
    srv: Server, ports: dict[str, int], key: str, args: argparse.Namespace, snapshots: Path
) -> Result:
    assert srv.proc is not None
    rng = random.Random(args.seed)
    traffic_args = (srv.port, ports["--grpc-port"])
    settle_problems: list[str] = []
    async with Probe(
        srv.proc.pid, ports["--management-port"], ports["--metrics-port"], key
    ) as probe:
        log("every scenario once")
        smoke = await run_each(traffic_args, rng)
        if smoke.failed():
            raise BenchError(f"scenarios failed before any load: {smoke.failures}")
        log(f"warm-up: {args.warmup} s, {args.clients} clients")
        warmup = await load(args.warmup, args.clients, traffic_args, rng)
        log("settling")
        if problem := await probe.settle(args.settle):
            settle_problems.append(f"after the warm-up: {problem}")
        probe.t0 = time.monotonic()
        samples = [await probe.sample("start")]
        log(f"start: {brief(samples[0])}")
        if args.tracemalloc:
            log("tracemalloc snapshot")
            await take_snapshot(probe.pid, snapshots, 0)

        async def sample_every() -> None:
            while True:
                await asyncio.sleep(args.interval)
                samples.append(await probe.sample("load"))
                log(f"{samples[-1].t:5.0f} s: {brief(samples[-1])}")

        log(
            f"measured: {args.duration} s, {args.clients} clients, a sample every {args.interval} s"
        )
        sampler = asyncio.create_task(sample_every())
        cpu0, wall0 = time.process_time(), time.monotonic()
        try:
            measured = await load(args.duration, args.clients, traffic_args, rng)
        finally:
            sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampler
        measured_s = time.monotonic() - wall0
        loadgen_cpu = (time.process_time() - cpu0) / measured_s
        log("settling")
        if problem := await probe.settle(args.settle):
            settle_problems.append(f"after the measured load: {problem}")
        samples.append(await probe.sample("end"))
        log(f"end: {brief(samples[-1])}")
        if args.tracemalloc:
            log("tracemalloc snapshot")
            await take_snapshot(probe.pid, snapshots, 1)
        log("every scenario once more")
        after = await run_each(traffic_args, rng)
    return Result(samples, smoke, warmup, measured, after, measured_s, loadgen_cpu, settle_problems)


def brief(s: Sample) -> str:
    return (
        f"rss {s.rss:.1f} MiB, fds {s.fds}, threads {s.threads}, workers {s.children} "
        f"({s.children_rss:.1f} MiB), busy {s.busy}, waiting {s.waiting}, queued {s.queued}, "
        f"sequences {s.sequences}" + (f", series {s.series}" if s.series is not None else "")
    )


# --------------------------------------------------------------------------- analysis


def slope_per_minute(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) points, per minute."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    if var == 0:
        return 0.0
    return 60.0 * sum((t - mean_t) * (v - mean_v) for t, v in points) / var


@dataclass
class Growth:
    row: Row
    start: float | None
    end: float | None
    peak: float | None
    slope: float  # per minute, under load
    late_slope: float  # per minute, over the second half of the load
    limit: float
    grows: bool


def growth(samples: list[Sample]) -> list[Growth]:
    start, end = samples[0], samples[-1]
    out = []
    for row in ROWS:
        a, b = start.value(row.key), end.value(row.key)
        values = [v for s in samples if (v := s.value(row.key)) is not None]
        under_load = [
            (s.t, v) for s in samples if s.phase == "load" and (v := s.value(row.key)) is not None
        ]
        half = (under_load[0][0] + under_load[-1][0]) / 2 if under_load else 0.0
        late = [(t, v) for t, v in under_load if t >= half]
        limit = row.limit(a or 0.0)
        grows = a is not None and b is not None and b - a > limit
        out.append(
            Growth(
                row,
                a,
                b,
                max(values) if values else None,
                slope_per_minute(under_load),
                slope_per_minute(late),
                limit,
                grows,
            )
        )
    return out


_LOG_LEVEL = re.compile(r"^\S+ \S+ (WARNING|ERROR|CRITICAL) (.*?): (.*)$")


def summarise_log(text: str) -> dict[str, Any]:
    """Warnings, errors and tracebacks in the server's log, with the most frequent messages
    (numbers and ids blanked so that repeats group)."""
    levels: Counter[str] = Counter()
    messages: Counter[str] = Counter()
    for line in text.splitlines():
        if line.startswith("Traceback"):
            levels["traceback"] += 1
        match = _LOG_LEVEL.match(line)
        if match:
            levels[match.group(1)] += 1
            message = re.sub(
                r"[0-9a-f]{32}|\d+(\.\d+)?", "N", f"{match.group(2)}: {match.group(3)}"
            )
            messages[f"{match.group(1)} {message[:160]}"] += 1
    return {"levels": dict(levels), "top": messages.most_common(8), "lines": len(text.splitlines())}


def judge(result: Result) -> None:
    flags = result.flags
    start, end = result.samples[0], result.samples[-1]
    for g in growth(result.samples):
        if g.grows:
            detail = ""
            if g.row.key in KINDS:
                detail = f"; by kind: {kinds_changed(start, end, KINDS[g.row.key])}"
            flags.append(
                f"{g.row.label} grew from {fmt(g.start)} to {fmt(g.end)} {g.row.unit} "
                f"(limit +{fmt(g.limit)}){detail}"
            )
    flags += [f"the server did not settle {p}" for p in result.settle_problems]
    for name, tally in (
        ("warm-up", result.warmup),
        ("measured", result.measured),
        ("after", result.after),
    ):
        if tally.server_errors():
            flags.append(
                f"SERVER ERRORS ({name}): {tally.server_errors()} responses were a 5xx or a "
                "server-fault gRPC code that no scenario expects"
            )
        if tally.failed():
            flags.append(f"{name}: {tally.failed()} failed responses: {tally.failures}")
    if result.after.failed():
        flags.append("a scenario that passed before the soak fails after it")


#: The rows whose samples say what each counted thing is.
KINDS = {"threads": "thread_names", "fds": "fd_kinds"}


def kinds_changed(start: Sample, end: Sample, attr: str) -> str:
    """What changed between two samples' counts by kind, e.g. `socket +2, grpc_global_tim -1`."""
    a, b = getattr(start, attr), getattr(end, attr)
    changes = {k: b.get(k, 0) - a.get(k, 0) for k in sorted(set(a) | set(b))}
    return ", ".join(f"{k} {v:+d}" for k, v in changes.items() if v) or "none"


def fmt(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.1f}" if value != int(value) or abs(value) >= 1000 else f"{value:.0f}"


# --------------------------------------------------------------------------- report


def report(result: Result, args: argparse.Namespace, argv: list[str]) -> str:
    start, end = result.samples[0], result.samples[-1]
    load = [s for s in result.samples if s.phase == "load"]
    cpu = (
        (load[-1].cpu_s - start.cpu_s) / (load[-1].t - start.t)
        if load and load[-1].t > start.t
        else float("nan")
    )
    total = result.measured.total()
    lines = [f"### Soak: mixed traffic on every protocol, {args.duration} s", ""]
    lines += machine_lines(command_line())
    options = f"--max-request-size {BODY_LIMIT} --grpc-max-message-size {BODY_LIMIT}"
    lines += [
        f"- versions: podium {package_version('podium')}, httpx {package_version('httpx')}, "
        f"grpcio {package_version('grpcio')}",
        f"- server: `podium serve` of a copy of examples/ ({len(end.models)} model versions), "
        f"its listeners on free loopback ports, `{options}` (the oversize bodies' limit; management API with its "
        "default token auth; the soak reads the key file); changed in the copy (OVERRIDES in "
        "bench/soak.py): sequences idle out after 3 s, with room for 256 / 256 / 64 open "
        "(running-total, stateful-sum, stateful-stream), text-stream has 4 slots and 10 ms "
        "between words, cancellable 8 slots",
        f"- load: {args.clients} clients (asyncio: httpx + grpc.aio in one process), "
        f"{len(SCENARIOS)} scenarios on {len(Protocol)} protocols (bench/soak_traffic.py), "
        f"seed {args.seed}; {args.warmup} s warm-up, then {result.measured_s:.0f} s measured: "
        f"{total:,} responses ({total / result.measured_s:,.0f}/s); server CPU "
        f"{cpu:.0%} of a core; load generator CPU {result.loadgen_cpu:.0%}"
        + (" †" if result.loadgen_cpu >= 0.9 else ""),
        *(
            [
                "- **--tracemalloc**: the server traced its allocations; its RSS includes "
                "tracemalloc's own tables and what the snapshots left: compare RSS only between "
                "untraced runs"
            ]
            if args.tracemalloc
            else []
        ),
        f"- sequences left open to idle out: {result.measured.abandoned:,}; samples every "
        f"{args.interval} s under load; start and end are taken with no load, once nothing is in "
        "any slot or queue and every sequence has ended",
        "",
        "| resource | start | end | change | max | slope /min | slope /min, 2nd half | limit | |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for g in growth(result.samples):
        change = g.end - g.start if g.start is not None and g.end is not None else None
        unit = f" {g.row.unit}" if g.row.unit else ""
        lines.append(
            f"| {g.row.label}{unit} | {fmt(g.start)} | {fmt(g.end)} | "
            f"{'' if change is None or change < 0 else '+'}{fmt(change)} | {fmt(g.peak)} | "
            f"{g.slope:+.2f} | {g.late_slope:+.2f} | +{fmt(g.limit)} | "
            f"{'**GROWS**' if g.grows else 'ok'} |"
        )
    lines.append("")
    for key, attr in KINDS.items():
        lines.append(f"- {key} changed by kind, start → end: {kinds_changed(start, end, attr)}")
    lines += ["", *outcome_table(result.measured, by="protocol")]
    lines += ["", "<details><summary>responses by scenario</summary>", ""]
    lines += outcome_table(result.measured, by="scenario")
    lines += ["", "</details>", ""]
    levels = result.log_summary.get("levels", {})
    lines.append(
        f"- server log: {result.log_summary.get('lines', 0):,} lines; "
        + (", ".join(f"{k} {v:,}" for k, v in sorted(levels.items())) or "no warnings or errors")
    )
    for message, count in result.log_summary.get("top", []):
        lines.append(f"  - {count:,} × `{message}`")
    if result.allocations:
        lines += ["", "tracemalloc (the server's Python allocations, start → end):", ""]
        lines += [
            f"  - {line.strip()}" if line.startswith(" ") else f"- {line}"
            for line in result.allocations
        ]
    lines.append("")
    if result.flags:
        lines.append("**FLAGGED:**")
        lines += [f"- {flag}" for flag in result.flags]
    else:
        lines.append(
            "**Verdict: nothing grows**: every resource is back within its limit at the end, no "
            "slot, queue or sequence is left in use, and no response was a failure."
        )
    return "\n".join(lines)


def outcome_table(tally: Tally, by: str) -> list[str]:
    outcomes = list(Outcome)
    rows: dict[tuple[str, str], Counter[str]] = {}
    for (protocol, scenario, outcome), n in tally.counts.items():
        key = (protocol, scenario) if by == "scenario" else (protocol, "")
        rows.setdefault(key, Counter())[outcome] += n
    head = "| protocol | " + ("scenario | " if by == "scenario" else "") + "responses | "
    lines = [
        head + " | ".join(o.value for o in outcomes) + " |",
        "|---|" + ("---|" if by == "scenario" else "") + "---:|" * (len(outcomes) + 1),
    ]
    order = {p.value: i for i, p in enumerate(Protocol)}
    for (protocol, scenario), counts in sorted(
        rows.items(), key=lambda kv: (order[kv[0][0]], kv[0][1])
    ):
        cells = [
            (
                f"**{counts[o.value]:,}**"
                if o in FAILURES and counts[o.value]
                else f"{counts[o.value]:,}"
            )
            for o in outcomes
        ]
        name = f"{scenario} | " if by == "scenario" else ""
        lines.append(f"| {protocol} | {name}{sum(counts.values()):,} | " + " | ".join(cells) + " |")
    if by == "protocol":
        all_counts: Counter[str] = Counter()
        for counts in rows.values():
            all_counts.update(counts)
        lines.append(
            f"| all | {sum(all_counts.values()):,} | "
            + " | ".join(f"{all_counts[o.value]:,}" for o in outcomes)
            + " |"
        )
    return lines


def tally_json(tally: Tally) -> dict[str, Any]:
    return {
        "counts": [
            {"protocol": p, "scenario": s, "outcome": o, "n": n}
            for (p, s, o), n in sorted(tally.counts.items())
        ],
        "failures": tally.failures,
        "abandoned": tally.abandoned,
    }


# --------------------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=int, default=600, help="seconds of measured load [600]")
    parser.add_argument(
        "--warmup", type=int, default=60, help="seconds of load before the start sample [60]"
    )
    parser.add_argument("--interval", type=int, default=10, help="seconds between samples [10]")
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients [16]")
    parser.add_argument(
        "--settle", type=float, default=60.0, help="seconds the server may take to settle [60]"
    )
    parser.add_argument("--seed", type=int, default=13, help="the scenario mix's random seed [13]")
    parser.add_argument("--quick", action="store_true", help="60 s, 10 s warm-up: a smoke test")
    parser.add_argument("--json", type=Path, help="also write every sample and count here")
    parser.add_argument("--server-log", type=Path, help="keep a copy of the server's log here")
    parser.add_argument(
        "--only",
        metavar="REGEX",
        help="only the scenarios whose 'protocol name' this matches (to find what grows)",
    )
    parser.add_argument(
        "--tracemalloc",
        action="store_true",
        help="the server traces Python allocations (slower); the report lists where the memory "
        "held at the end and not at the start was allocated",
    )
    args = parser.parse_args()
    if args.quick:
        args.duration, args.warmup, args.interval = 60, 10, 5
    if args.only:
        chosen = [sc for sc in SCENARIOS if re.search(args.only, f"{sc.protocol} {sc.name}")]
        if not chosen:
            parser.error(f"--only {args.only!r} matches no scenario")
        SCENARIOS[:] = chosen
    exit_on_signals()
    pin_self(CLIENT_CPU)
    root = Path(tempfile.mkdtemp(prefix="podium-bench-soak-"))
    try:
        repo = make_repository(root)
        env = tracing_env(root) if args.tracemalloc else {}
        port = free_port()
        key_file = root / "key_file.json"
        argv = podium_argv(repo, port, None) + [
            "--key-file",
            str(key_file),
            "--max-request-size",
            str(BODY_LIMIT),
            "--grpc-max-message-size",
            str(BODY_LIMIT),
        ]
        ports = {
            name: option(argv, name)
            for name in ("--grpc-port", "--management-port", "--metrics-port")
        }
        with Server(name="podium-soak", argv=argv, port=port, cwd=root, env=env) as srv:
            key = json.loads(key_file.read_text())["management"]["key"]
            result = asyncio.run(soak(srv, ports, key, args, root / "snapshots"))
            assert srv.log_path is not None
            server_log = srv.log_path.read_text(errors="replace")
            result.log_summary = summarise_log(server_log)
            if args.server_log:
                args.server_log.write_text(server_log)
        if args.tracemalloc:
            result.allocations = allocation_growth(root / "snapshots")
            if args.json:  # kept for a closer look: tracemalloc.Snapshot.load(PATH)
                for n in (0, 1):
                    shutil.copy(root / "snapshots" / f"snapshot-{n}", f"{args.json}.snapshot-{n}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    judge(result)
    text = report(result, args, argv)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "args": {k: str(v) for k, v in vars(args).items()},
                    "samples": [asdict(s) for s in result.samples],
                    "growth": [{**asdict(g), "row": g.row.label} for g in growth(result.samples)],
                    "measured": tally_json(result.measured),
                    "warmup": tally_json(result.warmup),
                    "after": tally_json(result.after),
                    "log": result.log_summary,
                    "allocations": result.allocations,
                    "flags": result.flags,
                },
                indent=1,
            )
        )
    if result.measured.server_errors():
        log(f"SERVER ERRORS: {result.measured.server_errors()} unexpected 5xx / server-fault codes")
    return 1 if result.flags else 0


if __name__ == "__main__":
    sys.exit(main())
