#!/usr/bin/env python3
"""Podium side by side with the real Triton Inference Server and the real TorchServe.

    python3 tests/conformance/run.py [--triton-examples DIR] [--only 5,13,T1] [--skip-servers]

One command: it creates ``tests/conformance/.venv`` (once; a stamp of the requirements keeps it
until they change) with nvidia-pytriton (the ``tritonserver`` binary), torchserve,
torch-model-archiver, a CPU torch, tritonclient, the KServe SDK and Podium from this checkout
(editable), then re-runs itself in that venv. There it starts the three servers on free loopback
ports, sends each scenario's requests to the reference (Triton for the Open Inference Protocol,
TorchServe for TorchServe's APIs) and to Podium, and writes ``docs/conformance.json`` (every
answer) and ``docs/conformance.md`` (the table). Every server is stopped when it ends, whatever
happens. Not part of the default test run (``tests/conftest.py`` ignores this folder).

With ``--triton-examples DIR`` (or ``TRITON_EXAMPLES``), the unmodified example clients of
Triton's client repository in DIR (a checkout, or its ``src/python/examples``) also run against
Triton and Podium, each serving the seven example models they expect.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
VENV = HERE / ".venv"
VPY = VENV / "bin" / "python"

REQUIREMENTS = [
    "torch==2.13.0",  # the CPU build that lies on this machine's disk (no download)
    "nvidia-pytriton==0.7.0",  # bundles tritonserver 2.51 and its python backend
    "torchserve==0.12.0",
    "torch-model-archiver==0.12.0",
    "tritonclient[all]",
    "kserve",
    "grpcio-tools",
    "googleapis-common-protos",  # google.rpc, imported by TorchServe's inference proto
]
PROTOS = ROOT / "src" / "podium" / "server" / "grpc" / "protos"


def _stamp() -> str:
    text = "\n".join(REQUIREMENTS) + (ROOT / "pyproject.toml").read_text()
    return hashlib.sha256(text.encode()).hexdigest()


def install() -> float:
    """Create or refresh the venv; returns the seconds it took (0 when the stamp matched)."""
    stamp = VENV / ".conformance-stamp"
    if stamp.is_file() and stamp.read_text() == _stamp() and VPY.is_file():
        return 0.0
    t0 = time.monotonic()
    print(f"installing the harness's venv in {VENV} ...", flush=True)
    if not VPY.is_file():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    subprocess.run(
        [str(VPY), "-m", "pip", "install", "-q", *REQUIREMENTS, "-e", str(ROOT)],
        check=True,
        timeout=1800,
    )
    # TorchServe's gRPC stubs, from the protos Podium declares (wire-compatible with
    # TorchServe's own): generated, never committed.
    out = VENV / "ts_protos"
    out.mkdir(exist_ok=True)
    for name in ("torchserve_inference.proto", "torchserve_management.proto"):
        subprocess.run(
            [
                str(VPY),
                "-m",
                "grpc_tools.protoc",
                f"-I{PROTOS}",
                f"--python_out={out}",
                f"--grpc_python_out={out}",
                str(PROTOS / name),
            ],
            check=True,
            timeout=120,
        )
    seconds = time.monotonic() - t0
    (VENV / ".install-seconds").write_text(f"{seconds:.0f}")
    stamp.write_text(_stamp())
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--triton-examples",
        type=Path,
        default=os.environ.get("TRITON_EXAMPLES"),
        help="a checkout of Triton's client repository (or its src/python/examples)",
    )
    parser.add_argument("--only", default="", help="comma-separated scenario ids (default: all)")
    parser.add_argument("--skip-scenarios", action="store_true", help="only the example clients")
    parser.add_argument(
        "--no-docs", action="store_true", help="write the JSON only, not docs/conformance.md"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "conformance.json")
    parser.add_argument("--in-venv", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not args.in_venv:
        seconds = install()
        argv = [str(VPY), str(Path(__file__).resolve()), "--in-venv", *sys.argv[1:]]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(HERE)])
        env["CONFORMANCE_INSTALL_SECONDS"] = f"{seconds:.0f}"
        env["CONFORMANCE_COMMAND"] = " ".join(
            ["python3", "tests/conformance/run.py", *sys.argv[1:]]
        )
        return subprocess.call(argv, env=env, cwd=ROOT)
    sys.path.insert(0, str(HERE))
    from harness.main import run

    return run(args)


if __name__ == "__main__":
    sys.exit(main())
