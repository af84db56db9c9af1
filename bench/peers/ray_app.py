"""Ray Serve side of bench/peers.py. Runs in bench/.venvs/ray:

    bench/.venvs/ray/bin/python bench/peers/ray_app.py PORT MODE

A local Ray instance (``num_cpus=1``, no dashboard) and Serve's HTTP proxy on 127.0.0.1:PORT,
one application of one deployment with one replica, a FastAPI ingress. Serve's defaults
otherwise: requests go proxy → replica (separate actor processes), ``max_ongoing_requests`` 5
per replica (more wait in the proxy's queue), sync methods run in a thread pool. MODE:
``sync`` / ``async`` (``POST /predict``: ``{"x": [...]}`` → ``{"y": [...]}``), ``stream``
(``POST /stream``: a ``StreamingResponse`` of N JSON lines ``{"i": k}`` for ``{"n": N}``),
``batch`` (``POST /batch``: ``@serve.batch(max_batch_size=32, batch_wait_timeout_s=0.005)``, and
``max_ongoing_requests`` raised to 128, without which no batch could exceed 5; a batch sleeps
1 ms + 0.05 ms per item and every answer carries the model's counters). ``GET /ready`` answers
once the application is deployed. SIGTERM shuts Serve and Ray down.
"""

import asyncio
import json
import signal
import sys
import time
from pathlib import Path
from typing import Annotated, Any

# This folder is bench/peers, not a package; Ray itself must come from the venv.
sys.path.insert(0, str(Path(__file__).resolve().parent))
import ray  # noqa: E402
from common_model import Counters, batch_seconds  # noqa: E402
from fastapi import Body, FastAPI  # noqa: E402
from fastapi.responses import StreamingResponse  # noqa: E402
from ray import serve  # noqa: E402

#: a JSON object body (FastAPI would take an unannotated dict from the query string)
JsonBody = Annotated[dict[str, Any], Body()]

api = FastAPI()


@serve.deployment(num_replicas=1)
@serve.ingress(api)
class SyncEcho:
    @api.get("/ready")
    def ready(self) -> str:
        return "ok"

    @api.post("/predict")
    def predict(self, body: JsonBody) -> dict[str, Any]:
        return {"y": body["x"]}


async_api = FastAPI()


@serve.deployment(num_replicas=1)
@serve.ingress(async_api)
class AsyncEcho:
    @async_api.get("/ready")
    async def ready(self) -> str:
        return "ok"

    @async_api.post("/predict")
    async def predict(self, body: JsonBody) -> dict[str, Any]:
        return {"y": body["x"]}


stream_api = FastAPI()


@serve.deployment(num_replicas=1)
@serve.ingress(stream_api)
class Stream:
    @stream_api.get("/ready")
    async def ready(self) -> str:
        return "ok"

    @stream_api.post("/stream")
    async def stream(self, body: JsonBody) -> StreamingResponse:
        n = int(body["n"])

        async def lines():
            for k in range(n):
                yield json.dumps({"i": k}) + "\n"

        return StreamingResponse(lines(), media_type="application/jsonl")


batch_api = FastAPI()


@serve.deployment(num_replicas=1, max_ongoing_requests=128)
@serve.ingress(batch_api)
class Batch:
    def __init__(self) -> None:
        self.counters = Counters()

    @batch_api.get("/ready")
    async def ready(self) -> str:
        return "ok"

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.005)
    async def run(self, xs: list[Any]) -> list[dict[str, Any]]:
        started = time.monotonic()
        await asyncio.sleep(batch_seconds(len(xs)))
        stats = self.counters.record(started)
        return [{"y": x, **stats} for x in xs]

    @batch_api.post("/batch")
    async def batch(self, body: JsonBody) -> dict[str, Any]:
        return await self.run(body["x"])


APPS: dict[str, Any] = {
    "sync": SyncEcho,
    "async": AsyncEcho,
    "stream": Stream,
    "batch": Batch,
    # the async echo with room for every connection at the replica: what the default's 5 costs
    "async-wide": AsyncEcho.options(max_ongoing_requests=128),
}


def _stop(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def main() -> None:
    port, mode = int(sys.argv[1]), sys.argv[2]
    signal.signal(signal.SIGTERM, _stop)
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        serve.run(APPS[mode].bind(), name="peers", route_prefix="/")
        print("ray_app: deployed", flush=True)
        while True:
            signal.pause()
    finally:
        try:
            serve.shutdown()
        finally:
            ray.shutdown()


if __name__ == "__main__":
    main()
