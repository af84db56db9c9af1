#!/usr/bin/env python3
"""Podium side by side with Truss's own model server, one truss at a time.

    python3 tests/conformance/truss/run.py [--only TRUSS,TRUSS] [--podium-python PATH]

One command: it creates ``tests/conformance/truss/.venv`` (once; a stamp of the requirements
keeps it until they change) with the ``truss`` package (pinned; its ``templates/server`` is
Truss's model server) and that server's own pinned requirements, then re-runs itself in that
venv. There, for each truss in ``trusses/``, it lays the truss out as Truss's image build does and
starts Truss's server, sends the truss's cases, stops it; then does the same with Podium from
this checkout (``python -m podium serve TRUSS`` with the repository's ``.venv``, made by
``python3 dev.py``). It writes ``docs/truss-conformance.json`` (every answer) and
``docs/truss-conformance.md`` (the table, and the differences). Every server is stopped when it
ends, whatever happens. Not part of the default test run (``tests/conftest.py`` ignores
``tests/conformance``).
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
ROOT = HERE.parent.parent.parent
VENV = HERE / ".venv"
VPY = VENV / "bin" / "python"

TRUSS = "truss==0.18.36"
# Besides the server's own requirements (read from the installed truss): what the cases and the
# trusses use.
EXTRA = ["h11", "httpx", "websockets", "pydantic>=2"]


def _stamp() -> str:
    return hashlib.sha256("\n".join([TRUSS, *EXTRA]).encode()).hexdigest()


def install() -> float:
    """Create or refresh the venv; returns the seconds it took (0 when the stamp matched)."""
    stamp = VENV / ".truss-conformance-stamp"
    if stamp.is_file() and stamp.read_text() == _stamp() and VPY.is_file():
        return 0.0
    t0 = time.monotonic()
    print(f"installing the harness's venv in {VENV} ...", flush=True)
    if not VPY.is_file():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    pip = [str(VPY), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, TRUSS, *EXTRA], check=True, timeout=1800)
    # The model server's requirements, exactly as Truss's image installs them.
    server = subprocess.run(
        [str(VPY), "-c", "import truss, pathlib; print(pathlib.Path(truss.__file__).parent)"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    reqs = Path(server) / "templates" / "server" / "requirements.txt"
    subprocess.run([*pip, "-r", str(reqs)], check=True, timeout=1800)
    seconds = time.monotonic() - t0
    (VENV / ".install-seconds").write_text(f"{seconds:.0f}")
    stamp.write_text(_stamp())
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", default="", help="comma-separated truss names (default: all)")
    parser.add_argument(
        "--podium-python",
        default="",
        help="the Python that runs Podium (default: PODIUM_PYTHON, else the repository's .venv)",
    )
    parser.add_argument("--no-docs", action="store_true", help="write the JSON only")
    parser.add_argument(
        "--self-check",
        action="store_true",
        help="Truss's server on both sides (every case should be 'same'); writes partial.*",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "truss-conformance.json")
    parser.add_argument(
        "--fingerprints",
        action="store_true",
        help="print judgements.py's JUDGED_ANSWERS lines for the last full run, and stop",
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="write docs/truss-conformance.md again from the last full run's JSON, and stop",
    )
    parser.add_argument("--in-venv", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not args.in_venv:
        seconds = install()
        argv = [str(VPY), str(Path(__file__).resolve()), "--in-venv", *sys.argv[1:]]
        env = dict(os.environ)
        env["PYTHONPATH"] = str(HERE)
        env["TRUSS_CONFORMANCE_INSTALL_SECONDS"] = f"{seconds:.0f}"
        env["TRUSS_CONFORMANCE_COMMAND"] = " ".join(
            ["python3 tests/conformance/truss/run.py", *sys.argv[1:]]
        )
        return subprocess.call(argv, env=env, cwd=ROOT)
    sys.path.insert(0, str(HERE))
    if args.report_only:
        from harness.report import rewrite

        print(f"wrote {rewrite(args.out)}")
        return 0
    if args.fingerprints:
        from harness.report import print_fingerprints

        print_fingerprints(args.out)
        return 0
    from harness.main import run

    return run(args)


if __name__ == "__main__":
    sys.exit(main())
