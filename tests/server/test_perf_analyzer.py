"""Triton's ``perf_analyzer`` runs against Podium over REST and gRPC (issue 12, item 14).

What it asks, in order (perf_analyzer 2.51, ``src/perf_analyzer.cc``, ``model_parser.cc``,
``inference_profiler.cc``, ``client_backend/triton``): model metadata (``GET /v2/models/{m}``
or ``/versions/{v}``, gRPC ``ModelMetadata``), the model configuration (``…/config``,
``ModelConfig``: ``max_batch_size``, ``input``/``output`` names, ``sequence_batching``,
``model_transaction_policy``), server metadata (``GET /v2``, ``ServerMetadata``: whether
``statistics`` is among the extensions), then, when it is, the model's statistics
(``…/stats``, ``ModelStatistics``) around every measurement window, the version found by
parsing it as a number. With ``--shared-memory system`` it first unregisters every system and
CUDA region, registers one region per input and output, and unregisters them at the end; the
C++ HTTP client then reads an output answered with ``parameters`` as binary data (it needs
``binary_data_size``). Inference is ``POST …/infer`` with binary tensors, or ``ModelInfer``,
or ``ModelStreamInfer`` with ``--streaming``.

The binary is tritonclient 2.51.0's (``bench/perf_analyzer.py --setup`` installs it into
``bench/.venvs/perf_analyzer`` with the two libraries it links, taken from nvidia-pytriton; a
minute the first time). It exists for Linux x86_64 only: elsewhere these tests are skipped with
that reason, which ``-ra`` prints in the summary.
"""

from __future__ import annotations

import csv
import platform
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import ROOT, TEST_MODELS, Server, run_server

pytestmark = pytest.mark.slow

MODEL = "identity"


@pytest.fixture(scope="module")
def perf_analyzer() -> Path:
    if (platform.system(), platform.machine()) != ("Linux", "x86_64"):
        pytest.skip(
            "perf_analyzer exists only as a Linux x86_64 binary (tritonclient<=2.52 manylinux "
            f"wheels); this machine is {platform.system()} {platform.machine()}"
        )
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "perf_analyzer.py"), "--setup"],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if done.returncode != 0:
        pytest.fail(
            "perf_analyzer could not be installed (bench/perf_analyzer.py --setup):\n"
            + done.stdout
            + done.stderr
        )
    return Path(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with run_server(TEST_MODELS / "triton" / MODEL, args=("--shared-memory", "system")) as running:
        yield running


def address(server: Server, protocol: str) -> str:
    """``host:port`` of the inference listener (perf_analyzer's ``-u``)."""
    found = server.addresses["http-inference" if protocol == "http" else "grpc-inference"]
    return found.split("://")[-1].rstrip("/")


def run(
    perf_analyzer: Path, server: Server, protocol: str, extra: list[str], tmp_path: Path
) -> tuple[str, dict[str, str]]:
    """A short perf_analyzer run (three 300 ms windows at concurrency 2, any spread accepted):
    its output and the row of its CSV report."""
    report = tmp_path / "report.csv"
    argv = [
        str(perf_analyzer),
        "-m",
        MODEL,
        "-u",
        address(server, protocol),
        "-i",
        protocol,
        "--shape",
        "INPUT0:16",
        "--concurrency-range",
        "2",
        "-p",
        "300",
        "-s",
        "1000",
        "-r",
        "3",
        "-f",
        str(report),
        *extra,
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{' '.join(argv)}\n{output}\n--- server log:\n{server.log}"
    with report.open() as f:
        (row,) = csv.DictReader(f)
    return output, row


CASES = [
    ("http", []),
    ("grpc", []),
    ("http", ["-x", "1"]),  # the version pinned: .../versions/1/... and stats of version "1"
    ("grpc", ["-x", "1"]),
    ("http", ["--async"]),
    ("grpc", ["--async"]),
    ("grpc", ["--streaming"]),  # ModelStreamInfer in Triton's framing
    ("http", ["--shared-memory", "system"]),
    ("grpc", ["--shared-memory", "system"]),
]


@pytest.mark.parametrize(("protocol", "extra"), CASES, ids=[" ".join([p, *e]) for p, e in CASES])
def test_perf_analyzer_measures_podium(
    perf_analyzer: Path, server: Server, protocol: str, extra: list[str], tmp_path: Path
) -> None:
    output, row = run(perf_analyzer, server, protocol, extra, tmp_path)
    assert float(row["Inferences/Second"]) > 0
    assert float(row["p99 latency"]) > 0
    extensions = httpx.get(f"{server.url}/v2").json()["extensions"]
    if "statistics" in extensions:
        # perf_analyzer read the server's statistics around each window and found the
        # requests it sent there (it fails outright when it cannot find the version's).
        assert "Server Queue" in row and "Server Compute Infer" in row
        assert "Successful request count:" in output.split("Server:")[1]
    # perf_analyzer unregistered the regions it registered
    assert httpx.get(f"{server.url}/v2/systemsharedmemory/status").json() == []
