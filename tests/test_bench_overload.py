"""bench/overload.py: the servers it starts and the table it prints. Its figures need a quiet
machine and minutes; here only what it runs and how it shows a missing figure."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.fixture(scope="module")
def overload() -> Iterator[ModuleType]:
    sys.path.insert(0, str(BENCH))  # (it imports bench/common.py as `common`)
    try:
        spec = importlib.util.spec_from_file_location("bench_overload", BENCH / "overload.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # (its dataclass looks its module up there)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(BENCH))
        sys.modules.pop("bench_overload", None)


def row(overload: ModuleType, load: float, ok: int, refused: int, **figures: Any) -> Any:
    values: dict[str, Any] = {
        "ok_p50_ms": None,
        "ok_p99_ms": None,
        "refuse_p50_ms": None,
        "refuse_p99_ms": None,
        "cpu_per_answer_us": None,
        **figures,
    }
    return overload.Row(
        server="podium",
        load=load,
        offered_rps=100.0 * load,
        sent=ok + refused,
        ok=ok,
        refused=refused,
        lost=0,
        errors=0,
        goodput_rps=float(ok),
        cpu_s=0.5,
        statuses={},
        **values,
    )


ARGS = argparse.Namespace(service_ms=10.0, deadline_ms=100.0, duration=1.0, warmup=0.5)


def test_a_missing_figure_is_an_em_dash_never_nan(overload: ModuleType) -> None:
    rows = [
        row(overload, 1, 100, 0, ok_p50_ms=10.5, ok_p99_ms=12.0, cpu_per_answer_us=400.0),
        row(overload, 4, 100, 300, ok_p50_ms=11.0, ok_p99_ms=13.0, refuse_p50_ms=0.5),
    ]
    table = overload.report(rows, {"podium": 100.0}, ARGS).splitlines()
    assert table[-2] == (
        "| podium | 1× | 100 | 100 | 100% | 10.5 | 12.0 | 0 | — | — | 0 | 400.0 | — |"
    )
    assert table[-1] == (
        "| podium | 4× | 400 | 100 | 100% | 11.0 | 13.0 | 300 | 0.5 | — | 0 | — | 0 |"
    )
    # nothing answered, nothing refused, no 1× row to compare with
    (last,) = overload.report([row(overload, 2, 0, 0)], {}, ARGS).splitlines()[-1:]
    assert last == "| podium | 2× | 200 | 0 | — | — | — | 0 | — | — | 0 | — | — |"
    assert "nan" not in last
    assert overload.quantile([], 0.5, 1) is None  # (null in --json, not NaN)
    assert overload.quantile([3.0, 1.0, 2.0], 0.5, 1) == 2.0


def test_podium_runs_with_its_defaults_and_without_its_log_only_as_its_own_row(
    overload: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def argv(model: Path, port: int, http_server: str | None) -> list[str]:
        return ["podium", "serve", str(model), "--http-port", str(port)]

    monkeypatch.setattr(overload, "podium_argv", argv)
    default = overload.podium_server(tmp_path, None, 0.01)
    assert default.name == "podium" and "--no-access-log" not in default.argv
    deadline = overload.podium_server(tmp_path, 100.0, 0.01)
    assert deadline.name == "podium-deadline" and "--no-access-log" not in deadline.argv
    quiet = overload.podium_server(tmp_path, None, 0.01, access_log=False)
    assert quiet.name == "podium-no-access-log" and quiet.argv[-1] == "--no-access-log"
    assert "podium-no-access-log" in overload.ROWS
