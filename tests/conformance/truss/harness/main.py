"""The run: each truss served alone by Truss's server, then by Podium; every case of that truss
sent to each; the answers compared and written to ``docs/truss-conformance.json`` and
``docs/truss-conformance.md``."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import own, servers, upstream  # noqa: F401 - they register the trusses and cases
from .cases import CASES, TRUSSES, Ctx, run_case
from .report import write_markdown

ROOT = servers.ROOT
SERVERS = ("truss", "podium")


def run(args) -> int:
    wanted = {s.strip() for s in args.only.split(",") if s.strip()}
    chosen = [t for t in TRUSSES.values() if not wanted or t.name in wanted]
    python = servers.podium_python(args.podium_python or os.environ.get("PODIUM_PYTHON"))
    if not python.is_file():
        raise SystemExit(
            f"no Python for Podium at {python}: run `python3 dev.py` at the repository's root "
            "(it makes .venv), or pass --podium-python"
        )
    workdir = Path(tempfile.mkdtemp(prefix="podium-truss-conformance-"))
    started = time.monotonic()
    results: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": os.environ.get(
            "TRUSS_CONFORMANCE_COMMAND", "python3 tests/conformance/truss/run.py"
        ),
        "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()} (Truss), Podium's: {python}",
        "versions": _versions(python),
        "self_check": args.self_check,
        "install_seconds": _install_seconds(),
        "trusses": {},
        "cases": [],
    }
    try:
        for t in chosen:
            print(f"== {t.group}/{t.name}", flush=True)
            cases = [c for c in CASES if c.truss == t.name]
            per_server: dict[str, dict[str, Any]] = {}
            info: dict[str, Any] = {"group": t.group, "path": str(t.path.relative_to(ROOT))}
            for name in SERVERS:
                # --self-check: Truss's server in Podium's place, to show that what is
                # compared is stable from one start to the next (every case should be "same").
                start = "truss" if args.self_check else name
                per_server[name], info[name] = _serve_and_ask(start, t, cases, workdir, python)
            results["trusses"][t.name] = info
            for c in cases:
                a, b = per_server["truss"].get(c.id), per_server["podium"].get(c.id)
                if a is None or b is None:
                    verdict = "not run"
                else:
                    verdict = "same" if a["compare"] == b["compare"] else "differs"
                print(f"   {c.id}: {verdict}", flush=True)
                if verdict == "same":
                    results.setdefault("same_but_bytes", []).extend(
                        f"{t.name}/{c.id}{where}" for where in _byte_diffs(a["raw"], b["raw"])
                    )
                results["cases"].append(
                    {
                        "truss": t.name,
                        "group": t.group,
                        "id": c.id,
                        "title": c.title,
                        "verdict": verdict,
                        "truss_answer": a,
                        "podium_answer": b,
                    }
                )
    finally:
        results["seconds"] = round(time.monotonic() - started)
        shutil.rmtree(workdir, ignore_errors=True)
    out = args.out
    if wanted or args.self_check:
        # A partial run does not replace the report: it goes beside the harness (gitignored).
        out = servers.HERE / "partial.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(_for_json(results), indent=1, default=str) + "\n")
    print(f"wrote {out}")
    if not args.no_docs:
        md = out.with_suffix(".md")
        write_markdown(results, md, out, partial=bool(wanted) or args.self_check)
        print(f"wrote {md}")
    counts: dict[str, int] = {}
    for row in results["cases"]:
        counts[row["verdict"]] = counts.get(row["verdict"], 0) + 1
    print(f"{len(results['cases'])} cases: {counts}; {results['seconds']} s")
    return 0


def _byte_diffs(a: Any, b: Any, where: str = "") -> list[str]:
    """Where two equal observations' bodies differ as bytes (JSON spacing, key order)."""
    if isinstance(a, dict) and isinstance(b, dict):
        if "_bytes" in a and "_bytes" in b:
            return [] if a["_bytes"] == b["_bytes"] else [where]
        return [w for k in a if k in b for w in _byte_diffs(a[k], b[k], f"{where}.{k}")]
    return []


def _for_json(results: dict[str, Any]) -> dict[str, Any]:
    """The results without each answer's ``compare`` (it is ``raw`` less its ``_`` keys)."""
    rows = []
    for row in results["cases"]:
        row = dict(row)
        for key in ("truss_answer", "podium_answer"):
            if row[key] is not None:
                row[key] = {k: v for k, v in row[key].items() if k != "compare"}
        rows.append(row)
    return {**results, "cases": rows}


def _serve_and_ask(name, t, cases, workdir: Path, python: Path):
    """Start ``name`` serving ``t``, run its cases, stop it; (answers by case id, info)."""
    sub = Path(tempfile.mkdtemp(prefix=f"{t.name}-{name}-", dir=workdir))
    t0 = time.monotonic()
    info: dict[str, Any] = {}
    answers: dict[str, Any] = {}
    service = None
    try:
        for attempt in range(3):
            try:
                service = _start(name, t, Path(tempfile.mkdtemp(dir=sub)), python)
                break
            except RuntimeError as exc:
                # The free port was taken between choosing it and binding it: choose again.
                if "already in use" not in str(exc) or attempt == 2:
                    raise
        info["start_seconds"] = round(time.monotonic() - t0, 1)
        for c in cases:
            answers[c.id] = run_case(c, Ctx(service.addr, service))
            if not service.alive() and t.wait != "exit":
                info.setdefault("died_during", []).append(c.id)
    except Exception as exc:
        info["start_error"] = f"{type(exc).__name__}: {exc}"[-3000:]
        print(f"   {name} did not start: {type(exc).__name__}", flush=True)
    finally:
        if service is not None:
            service.stop()
            info["log_tail"] = service.log_text()[-2500:]
    return answers, info


def _start(name: str, t, sub: Path, python: Path) -> servers.Service:
    if name == "truss":
        return servers.start_truss(t.path, sub, env=t.env, secret_files=t.secret_files, wait=t.wait)
    return servers.start_podium(
        t.path, sub, python=python, env=t.env, secret_files=t.secret_files, wait=t.wait
    )


def _install_seconds() -> str:
    now = os.environ.get("TRUSS_CONFORMANCE_INSTALL_SECONDS", "0")
    first = servers.HERE / ".venv" / ".install-seconds"
    last = first.read_text().strip() if first.is_file() else "?"
    return f"{last} s when the venv was built" + ("" if now == "0" else f" (this run: {now} s)")


def _versions(python: Path) -> dict[str, str]:
    from importlib.metadata import version

    def run(*cmd: str, cwd: Path = ROOT) -> str:
        try:
            return subprocess.run(
                cmd, cwd=cwd, capture_output=True, text=True, timeout=30
            ).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return "?"

    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    podium = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('podium'))"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    ).stdout.strip()
    return {
        "truss": version("truss"),
        "truss_fastapi": version("fastapi"),
        "truss_uvicorn": version("uvicorn"),
        "podium": podium or "?",
        "podium_commit": run("git", "rev-parse", "--short", "HEAD"),
        "podium_dirty": "yes" if run("git", "status", "--porcelain", "--", "src") else "no",
    }
