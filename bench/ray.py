"""Podium on Ray Serve: replica scaling for a CPU-bound model, and the Ray path's overhead.

    .venv/bin/python bench/ray.py [--repeat N] [--requests N] [--quick]

Needs the `ray` extra (`pip install 'podium[ray]'`; dev.py's .venv has it). One local Ray
instance (2 logical CPUs) for the whole run, Serve's HTTP proxy on a free loopback port.

1. **Scaling**: a CPU-bound model (a pure-Python loop, ~20 ms a request, a sync `predict`: it
   holds the GIL) deployed with one replica, then two (`min_workers` = `max_workers`, each replica
   reserving one CPU), driven by 8 concurrent clients; requests/s and the two/one ratio (2 cores:
   the ceiling is 2x, less what the proxy, the ingress and the clients take from the same cores).
2. **Overhead**: a trivial model (returns a small dict) through Truss's route
   (`POST /v1/models/tiny:predict`), one request at a time, on Ray Serve (proxy → ingress → the
   model's replica, one replica) and on a plain `podium serve` of the same directory; latency
   p50/p99 and what Ray adds at each.

Each round redeploys the application (scaling) or restarts `podium serve` (overhead); every figure
is the median over --repeat rounds. Nothing is pinned: Ray places its own processes.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# This file is bench/ray.py: as a script, its directory comes first on sys.path, where it would
# be `import ray` itself. Ray is the package wanted.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

import httpx  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

CPU_MODEL = """
    class Model:
        def predict(self, inputs):
            # ~20 ms of pure Python: holds the GIL, so one process does one at a time
            total = 0
            for i in range(ROUNDS):
                total += i * i % 7
            return {"total": total}
"""

TINY_MODEL = """
    class Model:
        def predict(self, inputs):
            return {"ok": 1}
"""

_READY = re.compile(r"listening on http-inference (\S+)[ ;]")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def log(message: str) -> None:
    print(f"[ray bench] {message}", file=sys.stderr, flush=True)


def write_model(root: Path, name: str, source: str, config: str) -> Path:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.py").write_text(textwrap.dedent(source))
    (folder / "config.yaml").write_text(config)
    return folder


def calibrate(target_ms: float = 20.0) -> int:
    """Loop rounds that take about ``target_ms`` here."""
    rounds = 200_000
    start = time.perf_counter()
    total = 0
    for i in range(rounds):
        total += i * i % 7
    took = time.perf_counter() - start
    return max(10_000, int(rounds * target_ms / 1000 / took))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def latencies(url: str, count: int, warmup: int = 50) -> list[float]:
    """Milliseconds per request, one at a time on one keep-alive connection."""
    with httpx.Client(base_url=url, timeout=30) as client:
        for _ in range(warmup):
            client.post("/v1/models/tiny:predict", json={}).raise_for_status()
        out = []
        for _ in range(count):
            start = time.perf_counter()
            r = client.post("/v1/models/tiny:predict", json={})
            out.append((time.perf_counter() - start) * 1000)
            r.raise_for_status()
    return out


def throughput(url: str, count: int, clients: int = 8) -> float:
    """Requests/s of ``count`` requests to the CPU-bound model from ``clients`` threads."""
    left = [count]
    lock = threading.Lock()

    def worker() -> None:
        with httpx.Client(base_url=url, timeout=60) as client:
            while True:
                with lock:
                    if left[0] <= 0:
                        return
                    left[0] -= 1
                client.post("/v1/models/burn:predict", json={}).raise_for_status()

    with httpx.Client(base_url=url, timeout=60) as client:  # warm every replica
        for _ in range(2 * clients):
            client.post("/v1/models/burn:predict", json={}).raise_for_status()
    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        for future in [pool.submit(worker) for _ in range(clients)]:
            future.result()
    return count / (time.perf_counter() - start)


class PlainPodium:
    """``podium serve DIR`` on a free loopback port, until the block ends."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def __enter__(self) -> str:
        argv = [sys.executable, "-m", "podium", "serve", str(self.folder), "--host", "127.0.0.1"]
        argv += ["--http-port", "0", "--grpc-port", "0", "--management-port", "0"]
        argv += ["--metrics-port", "0", "--grpc-management-port", "0"]
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert self.proc.stdout is not None
        deadline = time.monotonic() + 60
        for line in self.proc.stdout:
            match = _READY.search(line)
            if match:
                threading.Thread(target=self.proc.stdout.read, daemon=True).start()
                return match.group(1)
            if time.monotonic() > deadline:
                break
        self.proc.kill()
        raise RuntimeError("podium serve did not start")

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--requests", type=int, default=1000, help="overhead: per round")
    parser.add_argument("--burn", type=int, default=200, help="scaling: requests per round")
    parser.add_argument("--quick", action="store_true", help="1 round, fewer requests")
    args = parser.parse_args()
    if args.quick:
        args.repeat, args.requests, args.burn = 1, 200, 60

    import ray
    from ray import serve

    from podium.ray import AppSettings, build

    rounds = calibrate()
    log(f"CPU-bound model: {rounds} loop rounds (~20 ms here)")
    load_before = os.getloadavg()
    started = time.time()
    scaling: dict[int, list[float]] = {1: [], 2: []}
    ray_ms: list[list[float]] = []
    plain_ms: list[list[float]] = []
    with tempfile.TemporaryDirectory(prefix="podium-ray-bench-") as tmp:
        root = Path(tmp)
        tiny = write_model(root / "tiny-only", "tiny", TINY_MODEL, "ray: {num_cpus: 0}\n")
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        try:
            serve.start(http_options={"host": "127.0.0.1", "port": port})
            for round_ in range(args.repeat):
                for replicas in (1, 2):
                    models = root / f"burn-{replicas}"
                    config = f"min_workers: {replicas}\nmax_workers: {replicas}\n"
                    config += "ray: {num_cpus: 1}\n"
                    write_model(models, "burn", CPU_MODEL.replace("ROUNDS", str(rounds)), config)
                    app = build(AppSettings.from_args({"paths": str(models)}))
                    serve.run(app, name="bench", route_prefix="/")
                    rate = throughput(url, args.burn)
                    scaling[replicas].append(rate)
                    log(f"round {round_ + 1}: {replicas} replica(s): {rate:.1f} req/s")
                    serve.delete("bench")
                app = build(AppSettings.from_args({"paths": str(tiny.parent)}))
                serve.run(app, name="bench", route_prefix="/")
                ray_ms.append(latencies(url, args.requests))
                serve.delete("bench")
                with PlainPodium(tiny.parent) as plain:
                    plain_ms.append(latencies(plain, args.requests))
                log(
                    f"round {round_ + 1}: p50 ray {percentile(ray_ms[-1], 0.5):.2f} ms, "
                    f"plain {percentile(plain_ms[-1], 0.5):.2f} ms"
                )
        finally:
            serve.shutdown()
            ray.shutdown()
    load_after = os.getloadavg()
    print(report(args, rounds, scaling, ray_ms, plain_ms, load_before, load_after, started))
    return 0


def report(
    args: argparse.Namespace,
    rounds: int,
    scaling: dict[int, list[float]],
    ray_ms: list[list[float]],
    plain_ms: list[list[float]],
    load_before: tuple[float, float, float],
    load_after: tuple[float, float, float],
    started: float,
) -> str:
    from importlib.metadata import version

    med = statistics.median
    one, two = med(scaling[1]), med(scaling[2])

    def at(samples: list[list[float]], q: float) -> float:
        return med([percentile(s, q) for s in samples])

    command = " ".join(["python", "bench/ray.py", *sys.argv[1:]])
    lines = [
        "### Podium on Ray Serve (bench/ray.py)",
        "",
        f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(started))}",
        f"- machine: `{platform.machine()}`, {os.cpu_count()} logical CPUs, "
        f"{platform.system()} {platform.release()}; Ray local instance with 2 logical CPUs",
        f"- python {platform.python_version()}, ray {version('ray')}, podium {version('podium')}",
        f"- command: `{command}`; {args.repeat} round(s), medians over rounds",
        f"- load average (1, 5, 15 min) before: {', '.join(f'{x:.2f}' for x in load_before)}; "
        f"after: {', '.join(f'{x:.2f}' for x in load_after)}",
        "",
        f"**Scaling**: CPU-bound model (~20 ms pure Python, {rounds} rounds), 8 clients, "
        f"{args.burn} requests a round",
        "",
        "| replicas | req/s (median) | req/s per round |",
        "|---:|---:|---|",
        f"| 1 | {one:.1f} | {', '.join(f'{x:.1f}' for x in scaling[1])} |",
        f"| 2 | {two:.1f} | {', '.join(f'{x:.1f}' for x in scaling[2])} |",
        "",
        f"two replicas / one: **{two / one:.2f}x**",
        "",
        f"**Overhead**: trivial model, Truss route, 1 request at a time, {args.requests} "
        "requests a round (after 50 discarded)",
        "",
        "| path | p50 ms | p99 ms |",
        "|---|---:|---:|",
        f"| plain `podium serve` | {at(plain_ms, 0.5):.2f} | {at(plain_ms, 0.99):.2f} |",
        f"| Ray Serve (proxy → ingress → replica) | {at(ray_ms, 0.5):.2f} | "
        f"{at(ray_ms, 0.99):.2f} |",
        f"| Ray adds | {at(ray_ms, 0.5) - at(plain_ms, 0.5):.2f} | "
        f"{at(ray_ms, 0.99) - at(plain_ms, 0.99):.2f} |",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
