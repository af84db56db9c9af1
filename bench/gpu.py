"""Podium on a GPU (issue 24, docs/devices.md): one prepared run of a few minutes.

    .venv/bin/python bench/gpu.py [--dry-run] [--duration S] [--clients 1,16,64]
                                  [--only answers,batching,litserve,memory,oom,sharing,scaling]

Sections (each prints a markdown table or lines; aims end in `met` or `NOT MET`):

1. **answers**: examples/minilm-embeddings served by one Podium on `cuda` (`devices: [0]`) and
   on the CPU (`devices: cpu`): the embeddings of a few sentences agree within 1e-4.
2. **batching**: the example on the GPU, dynamic batching (`batch_size` 32, 5 ms) against none
   (`batch_size` 1), at 1, 16 and 64 clients: sentences/s, p50, p99 and the GPU's utilisation
   sampled through NVML every 50 ms during each run. Aims: GPU busy >= 90 % at 64 clients,
   batched >= 5x unbatched.
3. **litserve**: the same `Embedder` on LitServe (bench/litserve_minilm.py,
   `MINILM_ACCELERATOR=cuda`, `max_batch_size` 32, 5 ms) at the same clients. Aims: Podium's
   throughput >= LitServe's and its p99 lower, at 64 clients.
4. **memory**: GPU memory before registering the model (management API), loaded and used, and
   after unregistering it: a worker process's returns entirely; a thread worker's leaves the
   server's CUDA context behind (reported).
5. **oom**: a model allocating what each request asks; a request for twice the GPU's memory
   gets 507, the next small one 200, from the same worker.
6. **sharing**: two copies of the example on GPU 0 at 16 clients each, at once: both answer,
   memory used stays under the GPU's.
7. **scaling**: examples/cpu-heavy (~2 ms of pure Python per request) with 1, 2 and 8 worker
   processes, 16 clients, the server on every core. Aims: 2 workers >= 1.8x one, 8 >= 6x.

`--dry-run` needs no GPU: a server that believes it has four GPUs (`PODIUM_FAKE_GPUS=4`)
serves a thread model on each and a process model on two; the script checks what each worker
was told, describe, `/metrics`, its own GPU sampling and load generator, that every model copy
it would serve passes `podium check`, and that LitServe's script compiles. The report of a real
run goes to bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import py_compile
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import yaml
from common import ROOT, BenchError, command_line, exit_on_signals, free_port, log, machine_lines
from common import repo_bin as _repo_bin
from embeddings import CHECK_SENTENCES, Run, ensure_litserve, load
from workers import Unpinned

sys.path.insert(0, str(ROOT / "src"))
from podium.runtime.devices import Inventory, discover  # noqa: E402

BENCH = Path(__file__).resolve().parent
MINILM = ROOT / "examples" / "minilm-embeddings"
CPU_HEAVY = ROOT / "examples" / "cpu-heavy"
TOLERANCE = 1e-4
BATCH_SIZE = 32
BATCH_DELAY_MS = 5
SAMPLE_EVERY_S = 0.05

OOM_MODEL = '''\
"""Allocates on its GPU what each request asks ({"gib": x}) and frees it (bench/gpu.py)."""
import podium, torch

class Model:
    def __init__(self):
        self.device = podium.device()

    def predict(self, inputs):
        size = int(float(inputs["gib"]) * (1 << 30))
        block = torch.empty(size, dtype=torch.uint8, device=self.device)
        block.fill_(1)
        torch.cuda.synchronize()
        return {"bytes": int(block.numel()), "device": self.device}
'''

DRY_THREAD = """
import os, podium

class Model:
    def __init__(self):
        self.built = podium.device()

    def predict(self, inputs):
        return {"built": self.built, "now": podium.device(), "pid": os.getpid()}
"""

DRY_PROCESS = """
import os, podium

class Model:
    def predict(self, inputs):
        return {"visible": os.environ["CUDA_VISIBLE_DEVICES"], "now": podium.device()}
"""


# --------------------------------------------------------------------------- servers


def copy_model(scratch: Path, name: str, source: Path, **config: Any) -> Path:
    """``source``'s files as model ``name`` under ``scratch``, its config.yaml updated."""
    import shutil

    folder = scratch / name
    shutil.copytree(source, folder, ignore=shutil.ignore_patterns("__pycache__"))
    path = folder / "config.yaml"
    data = yaml.safe_load(path.read_text()) if path.exists() else {}
    data.update(config)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return folder


def write_model(scratch: Path, name: str, code: str, **config: Any) -> Path:
    folder = scratch / name
    folder.mkdir(parents=True)
    (folder / "model.py").write_text(textwrap.dedent(code))
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    return folder


@dataclass
class Podium:
    """``podium serve`` of ``paths`` on every core, with its management and metrics listeners."""

    name: str
    paths: list[Path]
    env: dict[str, str] = field(default_factory=dict)
    store: Path | None = None
    port: int = field(default_factory=free_port)
    management: int = field(default_factory=free_port)
    metrics: int = field(default_factory=free_port)

    @contextlib.contextmanager
    def running(self) -> Iterator[Unpinned]:
        argv = [str(_repo_bin("podium")), "serve", *map(str, self.paths), "--host", "127.0.0.1"]
        argv += ["--http-port", str(self.port), "--management-port", str(self.management)]
        argv += ["--metrics-port", str(self.metrics), "--grpc-port", str(free_port())]
        argv += ["--grpc-management-port", str(free_port()), "--no-auth"]
        if self.store is not None:
            argv += ["--model-store", str(self.store)]
        env = {"HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1", **self.env}
        server = Unpinned(name=self.name, argv=argv, port=self.port, env=env)
        server.ready_timeout = 300
        with server:
            yield server

    def url(self, model: str) -> str:
        return f"http://127.0.0.1:{self.port}/v1/models/{model}:predict"

    def describe(self, model: str) -> dict[str, Any]:
        answer = httpx.get(f"http://127.0.0.1:{self.management}/models/{model}", timeout=60)
        if answer.status_code != 200:
            raise BenchError(f"describe {model}: {answer.status_code} {answer.text[:300]}")
        return dict(answer.json()[0])

    def scrape(self) -> str:
        return httpx.get(f"http://127.0.0.1:{self.metrics}/metrics", timeout=60).text


class GpuWatch:
    """Samples GPU ``index`` through Podium's own inventory every SAMPLE_EVERY_S in a thread:
    utilisation (mean over the window) and the most memory used."""

    def __init__(self, found: Inventory, index: int = 0) -> None:
        self.found, self.index = found, index
        self.utilization: list[float] = []
        self.peak_used = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_EVERY_S):
            for sample in self.found.sample():
                if sample.gpu.index == self.index:
                    if sample.utilization is not None:
                        self.utilization.append(sample.utilization)
                    self.peak_used = max(self.peak_used, sample.memory_used or 0)

    def __enter__(self) -> GpuWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def mean(self) -> float:
        return float(np.mean(self.utilization)) if self.utilization else float("nan")


def used_memory(found: Inventory, index: int = 0) -> int:
    return next(s.memory_used or 0 for s in found.sample() if s.gpu.index == index)


def run_load(url: str, clients: int, seconds: float) -> Run:
    return asyncio.run(load(url, clients, seconds))


def embeddings(url: str) -> np.ndarray:
    rows = []
    for sentence in CHECK_SENTENCES:
        answer = httpx.post(url, json={"text": sentence}, timeout=120)
        if answer.status_code != 200:
            raise BenchError(f"{url}: {answer.status_code} {answer.text[:300]}")
        rows.append(np.asarray(answer.json()["embedding"], dtype=np.float32))
    return np.concatenate(rows)


def aim(ok: bool, text: str, flags: list[str]) -> str:
    if not ok:
        flags.append(text)
    return f"- {text}: {'met' if ok else '**NOT MET**'}"


def row(name: str, clients: int, run: Run, util: float) -> str:
    return (
        f"| {name} | {clients} | {run.per_s:.0f} | {run.percentile_ms(0.5):.1f} | "
        f"{run.percentile_ms(0.99):.1f} | {util:.0f} | {run.errors} |"
    )


TABLE = [
    "| server | clients | sentences/s | p50 ms | p99 ms | GPU busy % | errors |",
    "|---|---:|---:|---:|---:|---:|---:|",
]


# --------------------------------------------------------------------------- sections


def section_answers(scratch: Path, found: Inventory, args: Any, flags: list[str]) -> list[str]:
    gpu = copy_model(scratch, "minilm-gpu", MINILM, devices=[0])
    cpu = copy_model(scratch, "minilm-cpu", MINILM, devices="cpu")
    server = Podium("answers", [gpu, cpu])
    with server.running():
        on_gpu, on_cpu = embeddings(server.url("minilm-gpu")), embeddings(server.url("minilm-cpu"))
        devices = [w["device"] for w in server.describe("minilm-gpu")["workers"]]
    difference = float(np.abs(on_gpu - on_cpu).max())
    return [
        "### MiniLM on CUDA against the CPU",
        "",
        f"- workers of minilm-gpu: {devices}; largest difference over "
        f"{len(CHECK_SENTENCES)} sentences x 384: {difference:.2e}",
        aim(difference <= TOLERANCE, f"CUDA answers equal the CPU's within {TOLERANCE:g}", flags),
    ]


def section_batching(
    scratch: Path, found: Inventory, args: Any, flags: list[str], results: dict[str, Any]
) -> list[str]:
    batched = copy_model(scratch, "minilm-batched", MINILM, devices=[0], batch_size=BATCH_SIZE)
    single = copy_model(scratch, "minilm-single", MINILM, devices=[0], batch_size=1)
    lines = ["### Dynamic batching on the GPU", "", *TABLE]
    for name, folder in (("podium-batched", batched), ("podium-unbatched", single)):
        server = Podium(name, [folder])
        with server.running():
            run_load(server.url(folder.name), 4, 2.0)  # warm-up: CUDA kernels, allocator
            for clients in args.clients:
                with GpuWatch(found) as watch:
                    run = run_load(server.url(folder.name), clients, args.duration)
                results[(name, clients)] = (run, watch.mean)
                lines.append(row(name, clients, run, watch.mean))
    top = max(args.clients)
    (b, util), (u, _) = results[("podium-batched", top)], results[("podium-unbatched", top)]
    lines += [
        "",
        aim(util >= 90, f"GPU busy >= 90 % batched at {top} clients ({util:.0f} %)", flags),
        aim(
            b.per_s >= 5 * u.per_s,
            f"batched >= 5x unbatched at {top} clients ({b.per_s / max(u.per_s, 1e-9):.1f}x)",
            flags,
        ),
    ]
    return lines


def section_litserve(
    scratch: Path, found: Inventory, args: Any, flags: list[str], results: dict[str, Any]
) -> list[str]:
    from common import Server

    python = ensure_litserve()
    port = free_port()
    argv = [str(python), str(BENCH / "litserve_minilm.py"), str(port), str(BATCH_SIZE)]
    argv.append(str(BATCH_DELAY_MS / 1000))
    env = {"MINILM_ACCELERATOR": "cuda", "HF_HUB_OFFLINE": "1"}
    server = Server(name="litserve", argv=argv, port=port, env=env, ready_path="/health")
    server.ready_timeout = 300
    lines = ["### LitServe beside it (same Embedder, same GPU, batch 32, 5 ms)", "", *TABLE]
    with server:
        url = f"http://127.0.0.1:{port}/predict"
        run_load(url, 4, 2.0)
        for clients in args.clients:
            with GpuWatch(found) as watch:
                run = run_load(url, clients, args.duration)
            results[("litserve-batched", clients)] = (run, watch.mean)
            lines.append(row("litserve-batched", clients, run, watch.mean))
    top = max(args.clients)
    ours = results.get(("podium-batched", top))
    if ours is None:
        return [*lines, "", "- (run `batching` too for the comparison)"]
    theirs = results[("litserve-batched", top)][0]
    p, q = ours[0], theirs
    return [
        *lines,
        "",
        aim(p.per_s >= q.per_s, f"Podium >= LitServe at {top} clients", flags),
        aim(
            p.percentile_ms(0.99) < q.percentile_ms(0.99),
            f"Podium's p99 < LitServe's at {top} clients",
            flags,
        ),
    ]


def section_memory(scratch: Path, found: Inventory, args: Any, flags: list[str]) -> list[str]:
    store = scratch / "store"
    store.mkdir()
    lines = ["### Memory after unload", "", "| worker | before MiB | loaded MiB | after MiB |"]
    lines.append("|---|---:|---:|---:|")
    for kind in ("process", "thread"):
        name = f"minilm-{kind}"
        copy_model(store, name, MINILM, devices=[0], workers=kind)
        server = Podium(f"memory-{kind}", [], store=store)
        with server.running():
            before = used_memory(found)
            manage = f"http://127.0.0.1:{server.management}/models"
            answer = httpx.post(manage, params={"url": name}, timeout=300)
            if answer.status_code != 200:
                raise BenchError(f"register {name}: {answer.status_code} {answer.text[:300]}")
            run_load(server.url(name), 16, 2.0)
            loaded = used_memory(found)
            httpx.delete(f"{manage}/{name}", timeout=120).raise_for_status()
            deadline = time.monotonic() + 30
            after = used_memory(found)
            while after > before + (32 << 20) and time.monotonic() < deadline:
                time.sleep(0.5)
                after = used_memory(found)
        lines.append(f"| {kind} | {before >> 20} | {loaded >> 20} | {after >> 20} |")
        if kind == "process":
            lines.append(
                aim(after <= before + (32 << 20), "a worker process's GPU memory returns", flags)
            )
    return lines


def section_oom(scratch: Path, found: Inventory, args: Any, flags: list[str]) -> list[str]:
    total = found.gpus()[0].memory_total
    folder = write_model(scratch, "oom", OOM_MODEL, devices=[0])
    server = Podium("oom", [folder])
    with server.running():
        url = server.url("oom")
        big = httpx.post(url, json={"gib": 2 * total / (1 << 30)}, timeout=120)
        small = httpx.post(url, json={"gib": 0.25}, timeout=120)
        workers = server.describe("oom")["workers"]
        metric = [
            line for line in server.scrape().splitlines() if "device_out_of_memory_total{" in line
        ]
    return [
        "### An out-of-memory request fails alone",
        "",
        f"- twice the GPU's memory: {big.status_code} {big.text[:160]!r}",
        f"- 0.25 GiB next: {small.status_code}; workers: {[w['pid'] for w in workers]}",
        f"- metric: {metric}",
        aim(big.status_code == 507 and small.status_code == 200, "507 alone, then 200", flags),
    ]


def section_sharing(scratch: Path, found: Inventory, args: Any, flags: list[str]) -> list[str]:
    a = copy_model(scratch, "minilm-a", MINILM, devices=[0])
    b = copy_model(scratch, "minilm-b", MINILM, devices=[0])
    server = Podium("sharing", [a, b])
    with server.running(), GpuWatch(found) as watch:

        async def both() -> list[Run]:
            return list(
                await asyncio.gather(
                    load(server.url("minilm-a"), 16, args.duration),
                    load(server.url("minilm-b"), 16, args.duration),
                )
            )

        runs = asyncio.run(both())
    total = found.gpus()[0].memory_total
    lines = ["### Two models sharing GPU 0 (16 clients each, at once)", "", *TABLE]
    lines += [
        row(n, 16, r, watch.mean) for n, r in zip(("minilm-a", "minilm-b"), runs, strict=True)
    ]
    ok = all(r.requests and not r.errors for r in runs) and watch.peak_used < total
    return [
        *lines,
        "",
        f"- peak memory used: {watch.peak_used >> 20} MiB of {total >> 20} MiB",
        aim(ok, "both serve without errors, within the GPU's memory", flags),
    ]


def section_scaling(scratch: Path, found: Inventory, args: Any, flags: list[str]) -> list[str]:
    lines = ["### Process workers of a CPU-bound model (examples/cpu-heavy, 16 clients)", ""]
    lines += ["| workers | requests/s | p50 ms | p99 ms | x one |", "|---:|---:|---:|---:|---:|"]
    rates: dict[int, float] = {}
    for n in (1, 2, 8):
        folder = copy_model(scratch, f"heavy{n}", CPU_HEAVY, min_workers=n, max_workers=n)
        server = Podium(f"heavy{n}", [folder])
        with server.running():
            run_load(server.url(folder.name), 16, 1.0)
            run = run_load(server.url(folder.name), 16, args.duration)
        rates[n] = run.per_s
        lines.append(
            f"| {n} | {run.per_s:.0f} | {run.percentile_ms(0.5):.1f} | "
            f"{run.percentile_ms(0.99):.1f} | {run.per_s / max(rates[1], 1e-9):.2f} |"
        )
    return [
        *lines,
        "",
        aim(rates[2] >= 1.8 * rates[1], "2 workers >= 1.8x one", flags),
        aim(rates[8] >= 6 * rates[1], "8 workers >= 6x one", flags),
    ]


# --------------------------------------------------------------------------- dry run


def dry_run(scratch: Path, args: Any) -> list[str]:
    """What the real run sets up, checked without a GPU (four fake ones)."""
    problems: list[str] = []
    fake = discover({"PODIUM_FAKE_GPUS": "4"})
    copies = [
        copy_model(scratch, "minilm-gpu", MINILM, devices=[0]),
        copy_model(scratch, "minilm-cpu", MINILM, devices="cpu"),
        copy_model(scratch, "minilm-single", MINILM, devices=[0], batch_size=1),
        copy_model(scratch, "minilm-thread", MINILM, devices=[0], workers="thread"),
        write_model(scratch, "oom", OOM_MODEL, devices=[0]),
        *(
            copy_model(scratch, f"heavy{n}", CPU_HEAVY, min_workers=n, max_workers=n)
            for n in (1, 8)
        ),
    ]
    for folder in copies:
        done = subprocess.run(
            [str(_repo_bin("podium")), "check", str(folder)],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "PODIUM_FAKE_GPUS": "4"},
        )
        if done.returncode != 0:
            problems.append(f"podium check {folder.name}: {(done.stdout + done.stderr)[-300:]}")
    py_compile.compile(str(BENCH / "litserve_minilm.py"), doraise=True)
    thread = write_model(scratch, "on-each", DRY_THREAD, min_workers=4)
    process = write_model(
        scratch, "on-two", DRY_PROCESS, workers="process", devices=[0, 2], min_workers=2
    )
    server = Podium("dry-run", [thread, process], env={"PODIUM_FAKE_GPUS": "4"})
    with server.running():
        with GpuWatch(fake) as watch:
            run = run_load(server.url("on-each"), 4, 1.0)
        told = {(a["built"], a["now"]) for a in _answers(server.url("on-each"), 64)}
        visible = {a["visible"] for a in _answers(server.url("on-two"), 64)}
        devices = [w["device"] for w in server.describe("on-each")["workers"]]
        metrics = server.scrape()
    if told - {(f"cuda:{i}", f"cuda:{i}") for i in range(4)}:
        problems.append(f"thread workers were told {sorted(told)}")
    if devices != [f"cuda:{i}" for i in range(4)]:
        problems.append(f"describe shows the thread workers on {devices}")
    if visible != {"0", "2"}:
        problems.append(f"worker processes saw CUDA_VISIBLE_DEVICES {sorted(visible)}")
    if metrics.count("nv_gpu_memory_total_bytes{") != 4:
        problems.append("/metrics lacks nv_gpu_memory_total_bytes for four GPUs")
    if not run.requests or run.errors or not watch.utilization:
        problems.append(f"load: {run.requests} answers, {run.errors} errors; sampled {watch.mean}")
    lines = [
        "## bench/gpu.py --dry-run",
        "",
        *machine_lines(command_line()),
        f"- {len(copies)} model copies pass `podium check`; LitServe's script compiles",
        f"- four fake GPUs: thread workers on {devices}, told {sorted(told)}; worker processes "
        f"saw CUDA_VISIBLE_DEVICES {sorted(visible)}",
        f"- load generator: {run.requests} answers in 1 s at 4 clients; GPU sampled "
        f"{len(watch.utilization)} times",
    ]
    lines += [f"- **PROBLEM**: {p}" for p in problems] or ["- set-up: OK"]
    if problems:
        raise BenchError("\n".join(lines))
    return lines


def _answers(url: str, n: int) -> list[dict[str, Any]]:
    """``n`` answers, all asked at once (so that every worker answers some)."""

    async def ask() -> list[dict[str, Any]]:
        async with httpx.AsyncClient(timeout=60) as client:
            answers = await asyncio.gather(
                *(client.post(url, json={"text": "x"}) for _ in range(n))
            )
        return [a.json() for a in answers]

    return asyncio.run(ask())


SECTIONS: dict[str, Callable[..., list[str]]] = {
    "answers": section_answers,
    "batching": section_batching,
    "litserve": section_litserve,
    "memory": section_memory,
    "oom": section_oom,
    "sharing": section_sharing,
    "scaling": section_scaling,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="check the set-up; no GPU needed")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per measured point")
    parser.add_argument("--clients", default="1,16,64", help="client counts (batching, litserve)")
    parser.add_argument("--only", default=",".join(SECTIONS), help="sections to run")
    args = parser.parse_args()
    args.clients = [int(c) for c in args.clients.split(",")]
    exit_on_signals()
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as tmp:
        scratch = Path(tmp)
        if args.dry_run:
            print("\n".join(dry_run(scratch, args)))
            return 0
        found = discover()
        if not found.gpus():
            raise BenchError(f"no GPU here ({getattr(found, 'reason', '')}): try --dry-run")
        gpu = found.gpus()[0]
        lines = ["## Podium on a GPU (bench/gpu.py)", "", *machine_lines(command_line())]
        lines += [f"- GPU 0: {gpu.name}, {gpu.memory_total >> 20} MiB ({len(found.gpus())} GPUs)"]
        lines += [f"- {args.duration:g} s per point, clients {args.clients}", ""]
        flags: list[str] = []
        results: dict[Any, Any] = {}
        for name in args.only.split(","):
            log(f"section {name}")
            section = SECTIONS[name]
            try:
                if name in ("batching", "litserve"):
                    lines += section(scratch, found, args, flags, results)
                else:
                    lines += section(scratch, found, args, flags)
            except BenchError as exc:
                flags.append(f"{name}: {exc}")
                lines.append(f"- **{name} FAILED**: {str(exc)[:500]}")
            lines.append("")
        print("\n".join(lines))
        return 1 if flags else 0


if __name__ == "__main__":
    sys.exit(main())
