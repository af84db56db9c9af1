"""Triton's published example clients (``src/python/examples`` of Triton's client repository),
run unmodified from a local checkout against a server, one subprocess each, pass = exit 0.

The scripts expect Triton's example models, which ``models/triton/examples`` and
``models/podium/examples`` provide: ``simple``, ``simple_int8``, ``simple_string``,
``simple_identity``, ``simple_sequence``, ``simple_dyna_sequence`` and ``repeat_int32`` (seven:
the model-control scripts check that the repository index has seven entries)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# script -> which listener its -u takes. The "done when" list: health/metadata, infer,
# async, aio, string, sequence sync/stream, model control, the raw-proto clients, shared memory;
# plus the decoupled stream (custom_repeat) and reuse of infer objects.
SCRIPTS: dict[str, str] = {
    "simple_http_health_metadata.py": "http",
    "simple_grpc_health_metadata.py": "grpc",
    "simple_http_infer_client.py": "http",
    "simple_grpc_infer_client.py": "grpc",
    "simple_http_async_infer_client.py": "http",
    "simple_grpc_async_infer_client.py": "grpc",
    "simple_http_aio_infer_client.py": "http",
    "simple_grpc_aio_infer_client.py": "grpc",
    "simple_http_string_infer_client.py": "http",
    "simple_grpc_string_infer_client.py": "grpc",
    "simple_http_sequence_sync_infer_client.py": "http",
    "simple_grpc_sequence_sync_infer_client.py": "grpc",
    "simple_grpc_sequence_stream_infer_client.py": "grpc",
    "simple_grpc_aio_sequence_stream_infer_client.py": "grpc",
    "grpc_explicit_int_content_client.py": "grpc",
    "grpc_explicit_int8_content_client.py": "grpc",
    "grpc_explicit_byte_content_client.py": "grpc",
    "simple_http_shm_client.py": "http",
    "simple_grpc_shm_client.py": "grpc",
    "simple_http_shm_string_client.py": "http",
    "simple_grpc_shm_string_client.py": "grpc",
    "simple_grpc_custom_repeat.py": "grpc",
    "reuse_infer_objects_client.py": "both",
    # Last: they unload `simple` at the end. The HTTP one wants 7 models in the repository
    # index, the gRPC one 8 (as in Triton's own QA): with seven, the gRPC one fails everywhere.
    "simple_http_model_control.py": "http",
    "simple_grpc_model_control.py": "grpc",
}


def find_dir(path: Path) -> Path:
    """The folder holding the scripts: ``path`` itself, or ``src/python/examples`` in it."""
    for candidate in (path, path / "src" / "python" / "examples"):
        if (candidate / "simple_http_infer_client.py").is_file():
            return candidate
    raise FileNotFoundError(f"no Triton example clients in {path} (or its src/python/examples)")


def run_all(folder: Path, addr: dict[str, str], timeout: float = 90) -> dict[str, Any]:
    """Run every script of :data:`SCRIPTS` found in ``folder``; a missing one is reported."""
    results: dict[str, Any] = {}
    for script, kind in SCRIPTS.items():
        path = folder / script
        if not path.is_file():
            results[script] = {"result": "missing"}
            continue
        if kind == "both":
            # Its -u is the HTTP address; -i picks the protocol (and takes the gRPC URL then).
            args = ["-u", addr["http"]]
        else:
            args = ["-u", addr[kind]]
        t0 = time.monotonic()
        try:
            p = subprocess.run(
                [sys.executable, str(path), *args],
                cwd=folder,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
            result = "pass" if p.returncode == 0 else f"fail (exit {p.returncode})"
            tail = (p.stdout + p.stderr)[-800:]
        except subprocess.TimeoutExpired as exc:
            result = f"fail (timeout {timeout:.0f} s)"
            tail = (
                (exc.stdout or b"").decode(errors="replace")
                if isinstance(exc.stdout, bytes)
                else (exc.stdout or "")
            )[-800:]
        results[script] = {
            "result": result,
            "seconds": round(time.monotonic() - t0, 1),
            "output_tail": tail.strip().splitlines()[-6:],
        }
    return results
