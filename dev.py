#!/usr/bin/env python3
"""Podium's developer entry point; needs only Python >= 3.11.

    python3 dev.py serve   create .venv, install Podium, serve examples/ on http://127.0.0.1:8080
    python3 dev.py test    create .venv, install Podium with its test tools, run the whole suite
    python3 dev.py lint    ruff check, ruff format --check, mypy

The virtual environment is (re)installed only when pyproject.toml changed since the last install.
Extra arguments are passed on (to ``podium serve`` or to ``pytest``).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
STAMP = VENV / ".podium-installed"


def _ensure_venv() -> None:
    if sys.version_info < (3, 11):  # noqa: UP036 - this file runs before any venv exists
        sys.exit(f"Podium needs Python >= 3.11; this is {sys.version.split()[0]}")
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if STAMP.exists() and STAMP.read_text() == wanted and (BIN / "podium").exists():
        return
    if not (BIN / "python").exists():
        print(f"dev.py: creating {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True, clear=False).create(VENV)
    print("dev.py: installing Podium and its test tools into .venv", flush=True)
    pip = [str(BIN / "python"), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    subprocess.run([*pip, "-e", f"{ROOT}[dev]"], check=True)
    STAMP.write_text(wanted)


def _run(*cmd: str) -> int:
    return subprocess.call(list(cmd), cwd=ROOT)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in {"serve", "test", "lint"}:
        print(__doc__)
        return 2
    command, rest = argv[0], argv[1:]
    _ensure_venv()
    if command == "serve":
        args = rest or [str(ROOT / "examples"), "--host", "127.0.0.1", "--http-port", "8080"]
        os.execv(str(BIN / "podium"), [str(BIN / "podium"), "serve", *args])
    if command == "test":
        return _run(str(BIN / "python"), "-m", "pytest", "-m", "slow or not slow", *rest)
    code = _run(str(BIN / "ruff"), "check", "src", "tests", "examples", "bench", "dev.py")
    code |= _run(
        str(BIN / "ruff"), "format", "--check", "src", "tests", "examples", "bench", "dev.py"
    )
    code |= _run(str(BIN / "mypy"))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
