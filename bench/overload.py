"""Overload: offered load past a model's capacity, and what each server makes of it.

    .venv/bin/python bench/overload.py [--service-ms 10] [--deadline-ms 100] [--loads 1,2,4]
                                       [--duration S] [--warmup S] [--only NAMES] [--json PATH]

The model sleeps ``--service-ms`` per request, one request at a time, so its capacity is known:
1000 / service-ms requests per second. An open-loop generator (requests sent at a constant
rate whatever the answers, as real clients arrive; a new connection whenever every open one
is busy) offers 1×, 2× and 4× that for ``--duration`` seconds after a ``--warmup`` at the same
rate, and counts each answer:

- goodput: answers 200 per second (and as a share of the 1× figure);
- p50 / p99 of admitted requests (the 200s), from send to answer;
- refused: answers 503 / 429 / 504 per second, and the p50 / p99 time until such an answer;
- lost: requests with no answer by the end (still queued), and errors (connection failures).

Rows: ``podium`` (the model's queue bounded in length only, the default), ``podium-deadline``
(``max_queue_delay: --deadline-ms``), and, when their bench venvs exist or install
(bench/.venvs, as bench/peers.py makes them), ``litserve`` and ``mlserver`` (1.7.1, its OIP
route; its model holds a lock around the sleep, since MLServer runs every request's predict at
once) on the same sleeping model. Podium runs with its defaults, as every other benchmark does
(access log, metrics, checks on); ``podium-no-access-log`` (``podium`` with
``--no-access-log``, what the log costs under overload) is an extra row, only where ``--only``
names it. Servers run pinned to CPU 0 and the generator to CPU 1 where the machine allows
(bench/common.py). Server CPU per answer (refusals included) is read from /proc.

A cell with no figure (a latency with no such answer, the CPU per refusal where nothing was
refused, the share of a 1× row that was not run) is an em dash in the table, null in --json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from common import (
    CLIENT_CPU,
    BenchError,
    Server,
    command_line,
    ensure_mlserver,
    ensure_venv,
    exit_on_signals,
    free_port,
    log,
    machine_lines,
    mlserver_server,
    pin_self,
    podium_argv,
)

BODY = b'{"x": [1, 2, 3, 4]}'
#: The rows --only may name.
ROWS = ("podium", "podium-deadline", "podium-no-access-log", "litserve", "mlserver")
MAX_CONNECTIONS = 4000

PODIUM_MODEL = """
import asyncio


class Model:
    async def predict(self, inputs):
        await asyncio.sleep({service})
        return {{"y": inputs["x"]}}
"""

LITSERVE_APP = """
import sys, time
import litserve as ls


class Sleeper(ls.LitAPI):
    def setup(self, device):
        pass

    def decode_request(self, request):
        return request["x"]

    def predict(self, x):
        time.sleep({service})
        return x

    def encode_response(self, output):
        return {{"y": output}}


if __name__ == "__main__":
    server = ls.LitServer(Sleeper(), accelerator="cpu", devices=1, workers_per_device=1)
    server.run(host="127.0.0.1", port=int(sys.argv[1]), num_api_servers=1,
               log_level="warning", generate_client_file=False)
"""


MLSERVER_MODEL = """
import asyncio

from mlserver import MLModel
from mlserver.types import InferenceRequest, InferenceResponse, ResponseOutput


class Sleeper(MLModel):
    async def load(self) -> bool:
        self.one_at_a_time = asyncio.Lock()  # MLServer awaits every request's predict at once
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        async with self.one_at_a_time:
            await asyncio.sleep({service})
        tensor = payload.inputs[0]
        output = ResponseOutput(
            name="y", shape=tensor.shape, datatype=tensor.datatype, data=tensor.data
        )
        return InferenceResponse(model_name=self.name, outputs=[output])
"""

OIP_BODY = b'{"inputs":[{"name":"x","datatype":"FP32","shape":[4],"data":[1,2,3,4]}]}'


@dataclass
class Row:
    server: str
    load: float
    offered_rps: float
    sent: int
    ok: int
    refused: int
    lost: int
    errors: int
    goodput_rps: float
    ok_p50_ms: float | None
    ok_p99_ms: float | None
    refuse_p50_ms: float | None
    refuse_p99_ms: float | None
    cpu_per_answer_us: float | None
    cpu_s: float
    statuses: dict[str, int]


#: What the table shows where a row has no figure (NO_FIGURE: None in the row).
NO_FIGURE = "—"


def quantile(values: list[float], q: float, digits: int) -> float | None:
    """The ``q`` quantile of ``values``, rounded to ``digits``; None where there are none."""
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], digits)


def cell(value: float | None, spec: str = "") -> str:
    """A figure as the table shows it: ``spec``'s format, or an em dash where there is none."""
    return NO_FIGURE if value is None else format(value, spec)


class Client:
    """Keep-alive HTTP/1.1 connections to one server; ``post`` takes a free one or opens one."""

    def __init__(self, port: int, path: str) -> None:
        self.port = port
        body = OIP_BODY if path.startswith("/v2/") else BODY
        self.request = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body
        self.free: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self.opened = 0

    async def post(self) -> int:
        if self.free:
            reader, writer = self.free.pop()
        else:
            if self.opened >= MAX_CONNECTIONS:
                raise ConnectionError("too many connections")
            self.opened += 1
            reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        try:
            writer.write(self.request)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            length = 0
            close = False
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                name = name.strip().lower()
                if name == b"content-length":
                    length = int(value)
                elif name == b"connection" and value.strip().lower() == b"close":
                    close = True
            if length:
                await reader.readexactly(length)
        except BaseException:
            self.opened -= 1
            writer.close()
            raise
        if close:
            self.opened -= 1
            writer.close()
        else:
            self.free.append((reader, writer))
        return status

    def close(self) -> None:
        for _, writer in self.free:
            writer.close()
        self.free.clear()


async def offer(
    port: int, path: str, rate: float, seconds: float
) -> list[tuple[int, float, float]]:
    """Send ``rate`` requests per second for ``seconds``; each answer's (status, latency s,
    when it came, s after the start); status 0: a connection error, -1: no answer when the
    run ended (1 s grace)."""
    client = Client(port, path)
    results: list[tuple[int, float, float]] = []
    tasks: list[asyncio.Task[None]] = []

    async def one(sent: float) -> None:
        try:
            status = await client.post()
        except asyncio.CancelledError:
            results.append((-1, 0.0, math.inf))
            raise
        except Exception:
            status = 0
        now = time.perf_counter()
        results.append((status, now - sent, now - start))

    start = time.perf_counter()
    count = int(rate * seconds)
    for n in range(count):
        due = start + n / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(due)))
    _, pending = await asyncio.wait(tasks, timeout=1.0) if tasks else (set(), set())
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    client.close()
    return results


async def saturate(port: int, path: str, seconds: float, clients: int = 8) -> float:
    """What the server answers per second with ``clients`` requests always outstanding: the
    model's real capacity on this machine (its sleep, plus the server's time around it)."""
    client = Client(port, path)
    done = 0
    end = time.perf_counter() + seconds

    async def loop() -> None:
        nonlocal done
        while time.perf_counter() < end:
            if await client.post() == 200:
                done += 1

    start = time.perf_counter()
    await asyncio.gather(*(loop() for _ in range(clients)))
    client.close()
    return done / (time.perf_counter() - start)


def measure(
    srv: Server, name: str, path: str, load: float, capacity: float, args: argparse.Namespace
) -> Row:
    rate = capacity * load
    asyncio.run(offer(srv.port, path, rate, args.warmup))
    time.sleep(args.service_ms / 1000 * 2)
    before = srv.tree_usage().usage
    results = asyncio.run(offer(srv.port, path, rate, args.duration))
    used = srv.tree_usage().usage - before
    statuses: dict[str, int] = {}
    for status, _, _ in results:
        statuses[str(status)] = statuses.get(str(status), 0) + 1
    ok = [t * 1000 for s, t, _ in results if s == 200]
    in_time = sum(1 for s, _, at in results if s == 200 and at <= args.duration)
    refused = [t * 1000 for s, t, _ in results if s in (429, 503, 504)]
    answered = sum(1 for s, _, _ in results if s > 0)
    return Row(
        server=name,
        load=load,
        offered_rps=round(rate, 1),
        sent=len(results),
        ok=len(ok),
        refused=len(refused),
        lost=statuses.get("-1", 0),
        errors=statuses.get("0", 0),
        goodput_rps=round(in_time / args.duration, 1),
        ok_p50_ms=quantile(ok, 0.5, 1),
        ok_p99_ms=quantile(ok, 0.99, 1),
        refuse_p50_ms=quantile(refused, 0.5, 2),
        refuse_p99_ms=quantile(refused, 0.99, 2),
        cpu_per_answer_us=round(used.cpu_s / answered * 1e6, 1) if answered else None,
        cpu_s=used.cpu_s,
        statuses=statuses,
    )


def podium_server(
    folder: Path, deadline_ms: float | None, service: float, access_log: bool = True
) -> Server:
    """Podium with its defaults (``access_log``: False adds ``--no-access-log``)."""
    model = folder / ("sleeper-deadline" if deadline_ms else "sleeper")
    model.mkdir(parents=True, exist_ok=True)
    (model / "model.py").write_text(PODIUM_MODEL.format(service=service))
    config = "predict_concurrency: 1\n"
    if deadline_ms:
        config += f"max_queue_delay: {deadline_ms}\n"
    (model / "config.yaml").write_text(config)
    port = free_port()
    argv = podium_argv(model, port, None)
    name = "podium-deadline" if deadline_ms else "podium"
    if not access_log:
        argv.append("--no-access-log")
        name += "-no-access-log"
    return Server(name=name, argv=argv, port=port)


def litserve_server(folder: Path, service: float) -> Server:
    python = ensure_venv(
        "litserve", ("litserve==0.2.19", "uvloop", "httptools"), "import litserve, uvloop"
    )
    app = folder / "litserve_sleeper.py"
    app.write_text(LITSERVE_APP.format(service=service))
    port = free_port()
    return Server(
        name="litserve", argv=[str(python), str(app), str(port)], port=port, ready_path="/health"
    )


def mlserver(folder: Path, service: float) -> Server:
    executable = ensure_mlserver()
    models = folder / "mlserver"
    models.mkdir(parents=True, exist_ok=True)
    (models / "sleeper_model.py").write_text(MLSERVER_MODEL.format(service=service))
    (models / "model-settings.json").write_text(
        json.dumps({"name": "sleeper", "implementation": "sleeper_model.Sleeper"})
    )
    (models / "settings.json").write_text(
        json.dumps({"parallel_workers": 0, "metrics_endpoint": None, "debug": False})
    )
    return mlserver_server(executable, models, free_port())


def report(rows: list[Row], capacities: dict[str, float], args: argparse.Namespace) -> str:
    out = [
        "### Overload: offered load at 1×, 2×, 4× a model's capacity",
        "",
        *machine_lines(command_line()),
        f"- model: sleeps {args.service_ms} ms per request, one at a time (nominal capacity "
        f"{1000 / args.service_ms:.0f} req/s); each server's 1× is its own capacity, measured "
        "first with 8 requests always outstanding: "
        + ", ".join(f"{name} {rps:.0f} req/s" for name, rps in capacities.items()),
        f"- podium-deadline: `max_queue_delay: {args.deadline_ms:g}` (ms)",
        f"- open loop, {args.duration:g} s per row after a {args.warmup:g} s warm-up at the same "
        "rate; goodput: answers 200 that came within the run; unanswered: none by 1 s after it",
        "- refusal CPU: (server CPU of the row − its 200s × the 1× row's CPU per answer) / "
        "refusals, an estimate",
        "",
        "| server | load | offered/s | goodput/s | of 1× | ok p50 ms | ok p99 ms | refused/s "
        "| refuse p50 ms | refuse p99 ms | unanswered | CPU µs/answer | CPU µs/refusal |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    base: dict[str, Row] = {}
    for row in rows:
        if row.load == 1:
            base[row.server] = row
        one = base.get(row.server)
        share = row.goodput_rps / one.goodput_rps if one and one.goodput_rps else None
        per_refusal = None
        if one is not None and row.refused and one.ok:
            per_ok = one.cpu_s / one.ok
            per_refusal = max(0.0, (row.cpu_s - row.ok * per_ok) / row.refused * 1e6)
        out.append(
            f"| {row.server} | {row.load:g}× | {row.offered_rps:.0f} | {row.goodput_rps:.0f} | "
            f"{cell(share, '.0%')} | {cell(row.ok_p50_ms)} | {cell(row.ok_p99_ms)} | "
            f"{row.refused / args.duration:.0f} | {cell(row.refuse_p50_ms)} | "
            f"{cell(row.refuse_p99_ms)} | {row.lost + row.errors} | "
            f"{cell(row.cpu_per_answer_us)} | {cell(per_refusal, '.0f')} |"
        )
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--service-ms", type=float, default=10.0)
    parser.add_argument("--deadline-ms", type=float, default=100.0)
    parser.add_argument("--loads", default="1,2,4")
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument(
        "--only",
        default="podium,podium-deadline,litserve,mlserver",
        help=f"rows, of: {', '.join(ROWS)} (podium-no-access-log only where named)",
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    exit_on_signals()
    pin_self(CLIENT_CPU)
    loads = [float(x) for x in args.loads.split(",")]
    only = args.only.split(",")
    unknown = sorted(set(only) - set(ROWS))
    if unknown:
        parser.error(f"--only: no such rows: {', '.join(unknown)} (of {', '.join(ROWS)})")
    service = args.service_ms / 1000
    rows: list[Row] = []
    capacities: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bench-overload-") as tmp:
        folder = Path(tmp)
        makers = {
            "podium": (lambda: podium_server(folder, None, service), "/v1/models/sleeper:predict"),
            "podium-deadline": (
                lambda: podium_server(folder, args.deadline_ms, service),
                "/v1/models/sleeper-deadline:predict",
            ),
            "podium-no-access-log": (
                lambda: podium_server(folder, None, service, access_log=False),
                "/v1/models/sleeper:predict",
            ),
            "litserve": (lambda: litserve_server(folder, service), "/predict"),
            "mlserver": (lambda: mlserver(folder, service), "/v2/models/sleeper/infer"),
        }
        for name in only:
            make, path = makers[name]
            try:
                server = make()
            except BenchError as exc:
                log(f"{name}: skipped: {exc}")
                continue
            with server as srv:
                capacity = capacities[name] = asyncio.run(saturate(srv.port, path, 2.0))
            for load in loads:
                with server as srv:  # a fresh server for each load: no queue left over
                    row = measure(srv, name, path, load, capacity, args)
                log(f"{name} {load:g}×: {row}")
                rows.append(row)
    print(report(rows, capacities, args))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
