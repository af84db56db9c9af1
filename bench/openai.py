"""Concurrent streaming chats on examples/chat-gpt2-tiny: Podium's OpenAI route beside LitServe's
OpenAI spec serving the same model code, at 1, 16 and 64 concurrent clients.

    .venv/bin/python bench/openai.py [--quick] [--clients 1,16,64] [--duration S]
                                     [--max-tokens N] [--only NAME,...] [--json PATH]

Servers, each started fresh for each row, pinned to CPU 0 (the load runs on CPU 1: this
process, asyncio + httpx, one keep-alive connection per client):

- ``podium``: ``podium serve examples/chat-gpt2-tiny`` as it is (continuous batching,
  ``batch_size`` 64: a request joins the running batch at the next step);
- ``litserve-batched``: ``bench/litserve_gpt2.py``, LitServe's ``OpenAISpec`` around the same
  ``Engine`` with ``max_batch_size`` 64 and ``batch_timeout`` 5 ms (LitServe's batched streaming:
  a static batch runs to its end while new requests wait);
- ``litserve-unbatched``: the same with ``max_batch_size`` 1 (a request at a time, as LitServe's
  OpenAI examples serve a model).

Every client sends ``POST /v1/chat/completions`` with ``stream: true``, one short user message
(its own, per client and request), ``max_tokens`` (64), ``temperature`` 1 and ``ignore_eos``
(LitServe's request type drops it; its peer ignores EOS by itself), one request after another.
Reported per row: output tokens/s (``max_tokens`` per stream that finished inside the window, so
a stream cut by its end counts nothing), time to first token (request sent → first non-empty
content delta) and inter-token latency (gap between a stream's successive non-empty deltas),
p50 and p99. Podium's streams ask for ``include_usage``; one whose ``completion_tokens`` is not
``max_tokens`` is counted as bad. LitServe goes into bench/.venvs/litserve (as for
bench/embeddings.py). See bench/README.md and bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
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
from embeddings import LITSERVE_REQUIREMENTS, LITSERVE_VENV, VENVS

BENCH = Path(__file__).resolve().parent
EXAMPLE = ROOT / "examples" / "chat-gpt2-tiny"
MODEL = EXAMPLE.name
SERVERS = ("podium", "litserve-batched", "litserve-unbatched")
BATCH_SIZE = 64
BATCH_DELAY_S = 0.005
#: a stream still open this long after the window closed is abandoned (its tokens not counted)
GRACE_S = 5.0

TOPICS = [
    "the weather tomorrow",
    "a good book to read",
    "how trains work",
    "the history of tea",
    "learning a language",
    "baking bread at home",
    "why the sky is blue",
    "a walk in the park",
]


@dataclass
class Run:
    """One row's load: what finished inside the window, and the timings seen."""

    streams: int = 0
    bad: int = 0
    errors: int = 0
    first_problem: str = ""
    seconds: float = 0.0
    ttft_s: list[float] = field(default_factory=list)
    itl_s: list[float] = field(default_factory=list)


@dataclass
class Row:
    server: str
    clients: int
    tokens_per_s: float = math.nan
    ttft_p50_ms: float = math.nan
    ttft_p99_ms: float = math.nan
    itl_p50_ms: float = math.nan
    itl_p99_ms: float = math.nan
    streams: int = 0
    bad: int = 0
    errors: int = 0
    problem: str = ""


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) * 1000 if values else math.nan


# --------------------------------------------------------------------------- servers


def litserve_python() -> Path:
    """LitServe with the example's libraries in bench/.venvs/litserve; installed when missing."""
    python = LITSERVE_VENV / "bin" / "python"
    probe = "import litserve, torch, transformers, tokenizers, uvloop"
    if python.exists() and _imports(python, probe):
        return python
    log(f"installing {' '.join(LITSERVE_REQUIREMENTS)} into {LITSERVE_VENV}")
    import subprocess

    VENVS.mkdir(parents=True, exist_ok=True)
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(LITSERVE_VENV)], check=True, timeout=300)
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    try:
        subprocess.run([*pip, *LITSERVE_REQUIREMENTS], check=True, timeout=1800)
    except (OSError, subprocess.SubprocessError) as exc:
        raise BenchError(f"installing LitServe's environment failed: {exc}") from exc
    if not _imports(python, probe):
        raise BenchError(f"LitServe installed into {LITSERVE_VENV} but does not import")
    return python


def _imports(python: Path, code: str) -> bool:
    import subprocess

    return (
        subprocess.run([str(python), "-c", code], capture_output=True, timeout=300).returncode == 0
    )


def make_server(name: str) -> Server:
    port = free_port()
    env = {"GPT2_TINY_TORCH_THREADS": "1"}
    if name == "podium":
        argv = podium_argv(EXAMPLE, port, None)
        return Server(name=name, argv=argv, port=port, env=env, ready_timeout=300.0)
    batch = BATCH_SIZE if name == "litserve-batched" else 1
    argv = [
        str(litserve_python()),
        str(BENCH / "litserve_gpt2.py"),
        str(port),
        str(batch),
        str(BATCH_DELAY_S),
    ]
    return Server(
        name=name, argv=argv, port=port, env=env, ready_path="/health", ready_timeout=300.0
    )


# --------------------------------------------------------------------------- load


def body(server: str, client: int, request: int, max_tokens: int) -> dict[str, Any]:
    topic = TOPICS[(client + request) % len(TOPICS)]
    made: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": f"Client {client} asks about {topic}."}],
        "max_tokens": max_tokens,
        "temperature": 1.0,
        "stream": True,
        "ignore_eos": True,
    }
    if server == "podium":
        made["stream_options"] = {"include_usage": True}
    return made


async def one_stream(
    http: httpx.AsyncClient, url: str, payload: dict[str, Any], max_tokens: int
) -> tuple[float, list[float], str]:
    """One chat: its time to first token, its inter-token gaps, and what was wrong ("" if nothing)."""
    sent = time.perf_counter()
    stamps: list[float] = []
    usage: int | None = None
    async with http.stream("POST", url, json=payload) as response:
        if response.status_code != 200:
            await response.aread()
            return math.nan, [], f"status {response.status_code}: {response.text[:200]}"
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if "error" in event:
                return math.nan, [], f"error event: {str(event)[:200]}"
            if event.get("usage"):
                usage = event["usage"].get("completion_tokens")
            for choice in event.get("choices") or ():
                if (choice.get("delta") or {}).get("content"):
                    stamps.append(time.perf_counter())
    if not stamps:
        return math.nan, [], "no content"
    if payload.get("stream_options") and usage != max_tokens:
        return stamps[0] - sent, [], f"completion_tokens {usage}, asked {max_tokens}"
    return stamps[0] - sent, list(np.diff(stamps)), ""


async def load(server: str, url: str, clients: int, seconds: float, max_tokens: int) -> Run:
    """``clients`` clients each streaming chats back to back for ``seconds``."""
    run = Run()
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    timeout = httpx.Timeout(seconds + 120.0)
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as http:
        start = time.perf_counter()
        end = start + seconds

        async def client(k: int) -> None:
            n = 0
            while time.perf_counter() < end:
                payload = body(server, k, n, max_tokens)
                n += 1
                try:
                    got = await one_stream(http, f"{url}/v1/chat/completions", payload, max_tokens)
                except (httpx.HTTPError, OSError, ValueError) as exc:
                    run.errors += 1
                    run.first_problem = run.first_problem or f"{type(exc).__name__}: {exc}"
                    continue
                if time.perf_counter() > end:
                    return  # finished after the window: not counted
                ttft, gaps, problem = got
                if problem:
                    run.bad += 1
                    run.first_problem = run.first_problem or problem
                    continue
                run.streams += 1
                run.ttft_s.append(ttft)
                run.itl_s.extend(gaps)

        tasks = [asyncio.create_task(client(k)) for k in range(clients)]
        await asyncio.wait(tasks, timeout=seconds + GRACE_S)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        run.seconds = seconds
    return run


async def warm(server: str, url: str, clients: int, max_tokens: int) -> None:
    """One whole chat per client, to its end: nothing is left running when the window opens
    (a stream abandoned mid-way goes on generating on a server that does not cancel it)."""
    async with httpx.AsyncClient(timeout=300.0) as http:
        done = await asyncio.gather(
            *(
                one_stream(
                    http, f"{url}/v1/chat/completions", body(server, k, 0, max_tokens), max_tokens
                )
                for k in range(clients)
            )
        )
    problems = [problem for _, _, problem in done if problem]
    if problems:
        raise BenchError(f"{server}: a warm-up chat failed: {problems[0]}")


def measure(name: str, clients: int, args: argparse.Namespace) -> Row:
    row = Row(server=name, clients=clients)
    try:
        with make_server(name) as srv:
            asyncio.run(warm(name, srv.url, min(clients, 4), args.max_tokens))
            run = asyncio.run(load(name, srv.url, clients, args.duration, args.max_tokens))
    except BenchError as exc:
        row.problem = str(exc).splitlines()[0][:200]
        return row
    row.streams, row.bad, row.errors = run.streams, run.bad, run.errors
    row.problem = run.first_problem
    row.tokens_per_s = run.streams * args.max_tokens / run.seconds
    row.ttft_p50_ms, row.ttft_p99_ms = _pct(run.ttft_s, 50), _pct(run.ttft_s, 99)
    row.itl_p50_ms, row.itl_p99_ms = _pct(run.itl_s, 50), _pct(run.itl_s, 99)
    log(
        f"{name} x{clients}: {row.tokens_per_s:.0f} tok/s, TTFT p50 {row.ttft_p50_ms:.0f} ms "
        f"p99 {row.ttft_p99_ms:.0f} ms, ITL p50 {row.itl_p50_ms:.1f} ms p99 {row.itl_p99_ms:.1f} ms"
        f" ({row.streams} streams, {row.bad} bad, {row.errors} errors)"
    )
    return row


# --------------------------------------------------------------------------- report


def report(rows: list[Row], args: argparse.Namespace) -> str:
    lines = ["## OpenAI chat streaming: chat-gpt2-tiny, Podium vs LitServe", ""]
    lines += machine_lines(command_line())
    lines += [
        f"- versions: podium {package_version('podium')}, litserve "
        f"{LITSERVE_REQUIREMENTS[0].split('==')[1]}, torch 1 intra-op thread on both",
        f"- load: {args.duration:g} s per row after a warm-up chat per client (at most 4), "
        f"max_tokens {args.max_tokens}, temperature 1, ignore_eos; fresh server per row",
        "",
        "| server | clients | output tok/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms "
        "| streams | bad/errors |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        problem = f" ({r.problem[:80]})" if r.problem else ""
        lines.append(
            f"| {r.server} | {r.clients} | {r.tokens_per_s:.0f} | {r.ttft_p50_ms:.0f} | "
            f"{r.ttft_p99_ms:.0f} | {r.itl_p50_ms:.1f} | {r.itl_p99_ms:.1f} | {r.streams} | "
            f"{r.bad}/{r.errors}{problem} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", default="1,16,64")
    parser.add_argument("--duration", type=float, default=15.0)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--only", default=",".join(SERVERS))
    parser.add_argument("--quick", action="store_true", help="5 s rows")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.quick:
        args.duration = 5.0
    names = [n for n in args.only.split(",") if n]
    unknown = sorted(set(names) - set(SERVERS))
    if unknown:
        parser.error(f"unknown server(s) {', '.join(unknown)} (known: {', '.join(SERVERS)})")
    exit_on_signals()
    pin_self(CLIENT_CPU)
    rows = [
        measure(name, int(clients), args) for clients in args.clients.split(",") for name in names
    ]
    print(report(rows, args))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=2))
    return 1 if any(r.problem or r.bad or r.errors for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
