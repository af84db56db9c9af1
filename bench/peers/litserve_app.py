"""LitServe side of bench/peers.py. Runs in bench/.venvs/litserve:

    bench/.venvs/litserve/bin/python bench/peers/litserve_app.py PORT MODE

MODE: ``sync`` / ``async`` (tiny JSON predict, ``{"x": [...]}`` → ``{"y": [...]}``; async is
``enable_async=True`` with every method ``async def``), ``stream`` (``stream=True``: ``{"n": N}``
→ N JSON lines ``{"i": k}``) or ``batch`` (``max_batch_size`` 32, ``batch_timeout`` 5 ms; a batch
sleeps 1 ms + 0.05 ms per item and every answer carries the model's counters). LitServe's
defaults otherwise: one API server process, one inference worker process, ``POST /predict``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import litserve as ls

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common_model import Counters, batch_seconds  # noqa: E402


# ``request`` stays unannotated: LitServe builds its route from the annotation, and an
# unannotated one is the JSON body (a ``dict`` annotation would make it a query parameter).
class SyncEcho(ls.LitAPI):
    def setup(self, device: str) -> None:
        pass

    def decode_request(self, request):
        return request["x"]

    def predict(self, x: Any) -> Any:
        return x

    def encode_response(self, output: Any) -> dict[str, Any]:
        return {"y": output}


class AsyncEcho(ls.LitAPI):
    def setup(self, device: str) -> None:
        pass

    async def decode_request(self, request):
        return request["x"]

    async def predict(self, x: Any) -> Any:
        return x

    async def encode_response(self, output: Any) -> dict[str, Any]:
        return {"y": output}


class Stream(ls.LitAPI):
    def setup(self, device: str) -> None:
        pass

    def decode_request(self, request):
        return int(request["n"])

    def predict(self, n: int):
        yield from range(n)

    def encode_response(self, outputs):
        for k in outputs:
            yield {"i": k}


class Batch(ls.LitAPI):
    def setup(self, device: str) -> None:
        self.counters = Counters()

    def decode_request(self, request):
        return request["x"]

    def predict(self, xs: Any) -> Any:
        items = xs if isinstance(xs, list) and xs and isinstance(xs[0], list) else [xs]
        started = time.monotonic()
        time.sleep(batch_seconds(len(items)))  # the inference worker is its own process
        stats = self.counters.record(started)
        return [{"y": x, **stats} for x in items]

    def encode_response(self, output: Any) -> dict[str, Any]:
        return output


def main() -> None:
    port, mode = int(sys.argv[1]), sys.argv[2]
    if mode == "sync":
        api: ls.LitAPI = SyncEcho()
    elif mode == "async":
        api = AsyncEcho(enable_async=True)
    elif mode == "stream":
        api = Stream(stream=True)
    elif mode == "batch":
        api = Batch(max_batch_size=32, batch_timeout=0.005)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    server = ls.LitServer(api, accelerator="cpu", devices=1, workers_per_device=1)
    server.run(
        host="127.0.0.1",
        port=port,
        num_api_servers=1,
        log_level="warning",
        generate_client_file=False,
    )


if __name__ == "__main__":
    main()
