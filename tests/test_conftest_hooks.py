"""tests/conftest.py's collection hook: a test's ``default`` run is left out where its ``deep``
run is selected too (as under ``dev.py test`` and CI), and kept where it runs alone."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from conftest import pytest_collection_modifyitems


def _collect(*nodeids: str) -> tuple[list[str], list[str]]:
    items: list[Any] = [SimpleNamespace(nodeid=n) for n in nodeids]
    gone: list[str] = []
    hook = SimpleNamespace(pytest_deselected=lambda items: gone.extend(i.nodeid for i in items))
    pytest_collection_modifyitems(SimpleNamespace(hook=hook), items)  # type: ignore[arg-type]
    return [i.nodeid for i in items], gone


def test_a_default_run_is_left_out_where_its_deep_run_runs() -> None:
    kept, gone = _collect("f.py::t[default]", "f.py::t[deep]", "f.py::u[default]", "f.py::v")
    assert kept == ["f.py::t[deep]", "f.py::u[default]", "f.py::v"]
    assert gone == ["f.py::t[default]"]


def test_a_default_run_alone_stays() -> None:
    assert _collect("f.py::t[default]", "f.py::t[other]") == (
        ["f.py::t[default]", "f.py::t[other]"],
        [],
    )
