"""The run: start the servers, send every scenario to each, compare, write the results."""

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

from . import examples, oip, servers, torchserve  # noqa: F401 - oip/torchserve register scenarios
from .common import SCENARIOS, is_error, run_scenario
from .report import write_markdown

ROOT = servers.HERE.parent.parent
REFERENCE = {"oip": "triton", "torchserve": "torchserve", "ts_setup": "torchserve"}
#: Families served by a pair of servers of their own (the reference's, Podium's), each started
#: by the same command from the same config.properties (issue 22).
PAIRS = {"ts_setup": ("torchserve_setup", "podium_setup")}


def verdict(sc, ref: dict[str, Any], pod: dict[str, Any]) -> str:
    if ref["compare"] == pod["compare"]:
        return "same"
    if sc.improvement or (is_error(ref["compare"]) and not is_error(pod["compare"])):
        return "Podium-only-improvement-candidate"
    return "differs"


def run(args) -> int:
    wanted = {s.strip() for s in args.only.split(",") if s.strip()}
    chosen = [s for s in SCENARIOS if not wanted or s.id in wanted]
    workdir = Path(tempfile.mkdtemp(prefix="podium-conformance-"))
    started = time.monotonic()
    results: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": os.environ.get("CONFORMANCE_COMMAND", "python3 tests/conformance/run.py"),
        "install_seconds": _install_seconds(),
        "machine": _machine(),
        "versions": {},
        "scenarios": [],
        "examples": {},
        "logs": {},
    }
    try:
        if not args.skip_scenarios and chosen:
            run_scenarios(chosen, workdir, results)
        if args.triton_examples:
            run_examples(Path(args.triton_examples), workdir, results)
    finally:
        results["seconds"] = round(time.monotonic() - started)
        shutil.rmtree(workdir, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1, default=str) + "\n")
    print(f"wrote {args.out}")
    if not args.no_docs:
        md = ROOT / "docs" / "conformance.md"
        write_markdown(results, md, args.out)
        print(f"wrote {md}")
    for fam, counts in summary(results).items():
        print(f"{fam}: {counts}")
    return 0


def summary(results: dict[str, Any]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for row in results["scenarios"]:
        counts = out.setdefault(row["reference"], {})
        counts[row["verdict"]] = counts.get(row["verdict"], 0) + 1
    return out


def run_scenarios(chosen, workdir: Path, results: dict[str, Any]) -> None:
    store = workdir / "store"
    families = {s.family for s in chosen}
    services: dict[str, servers.Service] = {}
    try:
        if "torchserve" in families:
            servers.build_archives(store, workdir)
        else:
            store.mkdir(parents=True)
        setup_store = workdir / "setup_store"
        if "ts_setup" in families:
            servers.build_setup_archive(setup_store)
        m = servers.MODELS
        mars = [store / f"{n}.mar" for n in servers.TS_MODELS] if "torchserve" in families else []
        starters = {
            "triton": lambda: servers.start_triton(
                [m / "triton" / "examples", m / "triton" / "scenarios"], _sub(workdir, "triton")
            ),
            "torchserve": lambda: servers.start_torchserve(store, _sub(workdir, "torchserve")),
            "podium": lambda: servers.start_podium(
                [m / "podium" / "examples", m / "podium" / "scenarios", *mars],
                _sub(workdir, "podium"),
                store,
            ),
            "torchserve_setup": lambda: servers.start_setup(
                "torchserve", setup_store, _sub(workdir, "torchserve-setup")
            ),
            "podium_setup": lambda: servers.start_setup(
                "podium", setup_store, _sub(workdir, "podium-setup")
            ),
        }
        wanted = [REFERENCE[f] for f in ("oip", "torchserve") if f in families]
        if families - set(PAIRS):
            wanted.append("podium")
        for family in families & set(PAIRS):
            wanted.extend(PAIRS[family])
        for name in wanted:
            services[name] = _start(name, starters[name])
        for name, svc in services.items():
            results["versions"][name] = svc.version
        results["versions"]["podium_commit"] = _git("rev-parse", "--short", "HEAD")
        for sc in chosen:
            ref_name = REFERENCE[sc.family]
            ref_svc, pod_svc = PAIRS.get(sc.family, (ref_name, "podium"))
            print(f"[{sc.id}] {sc.title}", flush=True)
            ref = run_scenario(sc, services[ref_svc].addr)
            pod = run_scenario(sc, services[pod_svc].addr)
            row = {
                "id": sc.id,
                "item": sc.item,
                "title": sc.title,
                "reference": ref_name,
                "improvement": sc.improvement,
                "verdict": verdict(sc, ref, pod),
                ref_name: ref,
                "podium": pod,
            }
            crashed = [n for n in (ref_svc, pod_svc) if not services[n].alive()]
            if crashed:
                # A server that died answers nothing more: note it, keep its log, start it anew.
                row["crashed"] = crashed
                for n in crashed:
                    results["logs"][f"crash in {sc.id}/{n}"] = services[n].log_text()[-3000:]
                    services[n].stop()
                    services[n] = _start(n, starters[n])
            results["scenarios"].append(row)
    finally:
        for name, svc in services.items():
            svc.stop()
            results["logs"][f"scenarios/{name}"] = svc.log_text()[-3000:]


def run_examples(path: Path, workdir: Path, results: dict[str, Any]) -> None:
    folder = examples.find_dir(path)
    results["examples_dir"] = str(path)
    m = servers.MODELS
    for name, start in (
        (
            "triton",
            lambda: servers.start_triton([m / "triton" / "examples"], _sub(workdir, "ex-triton")),
        ),
        (
            "podium",
            lambda: servers.start_podium(  # with the one flag a Triton user sets (--triton)
                [m / "podium" / "examples"],
                _sub(workdir, "ex-podium"),
                _sub(workdir, "ex-store"),
                args=("--triton",),
            ),
        ),
    ):
        svc = _start(name, start)
        try:
            results["versions"].setdefault(name, svc.version)
            print(f"example clients against {name} ...", flush=True)
            results["examples"][name] = examples.run_all(folder, svc.addr)
        finally:
            svc.stop()
            results["logs"][f"examples/{name}"] = svc.log_text()[-3000:]


def _start(name: str, start):
    t0 = time.monotonic()
    print(f"starting {name} ...", flush=True)
    svc = start()
    print(f"{name} ready in {time.monotonic() - t0:.0f} s: {svc.addr}", flush=True)
    return svc


def _sub(workdir: Path, name: str) -> Path:
    """A new folder for one server start (a restarted server gets another)."""
    return Path(tempfile.mkdtemp(prefix=f"{name}-", dir=workdir))


def _git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "?"


def _install_seconds() -> str:
    now = os.environ.get("CONFORMANCE_INSTALL_SECONDS", "0")
    first = servers.HERE / ".venv" / ".install-seconds"
    last = first.read_text().strip() if first.is_file() else "?"
    return f"{last} s when the venv was built" + ("" if now == "0" else f" (this run: {now} s)")


def _machine() -> str:
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()
    return (
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, {java[0] if java else 'no java'}"
    )
