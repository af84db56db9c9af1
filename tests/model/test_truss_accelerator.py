"""A truss's ``resources.accelerator`` type against the GPUs it is given (docs/devices.md):
NVML's names matched by Truss's types, and a mismatch a warning at load, never an error."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from podium.model.truss._accelerator import accelerator_mismatch, shows_type
from podium.model.truss._config import read_truss
from podium.runtime import devices as devices_module
from podium.runtime.devices import FakeInventory
from podium.runtime.loading import build_version
from podium.runtime.registry import ModelState
from podium.server._requests import RequestSnapshots


@pytest.mark.parametrize(
    ("kind", "name", "shown"),
    [
        ("A10G", "NVIDIA A10G", True),
        ("T4", "Tesla T4", True),
        ("L4", "NVIDIA L4", True),
        ("L4", "NVIDIA L40S", False),
        ("L40S", "NVIDIA L40S", True),
        ("A10G", "NVIDIA A100-SXM4-80GB", False),
        ("A100", "NVIDIA A100-SXM4-80GB", True),
        ("A100", "NVIDIA A100 80GB PCIe", True),
        ("A100_40GB", "NVIDIA A100-SXM4-40GB", True),
        ("A100_40GB", "NVIDIA A100-SXM4-80GB", False),
        ("H100", "NVIDIA H100 80GB HBM3", True),
        ("H100_40GB", "NVIDIA H100 80GB HBM3 MIG 3g.40gb", True),
        ("H100_40GB", "NVIDIA H100 80GB HBM3", False),
        ("H200", "NVIDIA H200", True),
        ("H100", "NVIDIA H200", False),
        ("V100", "Tesla V100-SXM2-16GB", True),
        ("RTX_PRO_6000", "NVIDIA RTX PRO 6000 Blackwell Server Edition", True),
        ("B200", "NVIDIA B200", True),
        ("a10g", "NVIDIA A10G", True),
    ],
)
def test_nvml_names_show_trusss_gpu_types(kind: str, name: str, shown: bool) -> None:
    assert shows_type(kind, name) is shown


def test_the_warning_names_each_other_gpu_bounded() -> None:
    assert accelerator_mismatch("t", "A10G:2", [(0, "NVIDIA A10G"), (1, "NVIDIA A10G")]) is None
    note = accelerator_mismatch("truss 't'", "A10G:2", [(0, "NVIDIA A10G"), (1, "Tesla T4")])
    assert note == (
        "truss 't': resources.accelerator asks for 'A10G', but GPU 1 is 'Tesla T4'; "
        "it runs there anyway"
    )
    many = accelerator_mismatch("t", "H100", [(i, "x" * 500) for i in range(20)])
    assert many is not None and "and 12 more" in many and len(many) < 1000


def _truss(root: Path, accelerator: str) -> Path:
    (root / "model").mkdir(parents=True)
    (root / "model" / "model.py").write_text(
        "class Model:\n    def predict(self, x):\n        return x\n"
    )
    (root / "config.yaml").write_text(f"resources:\n  accelerator: {accelerator}\n")
    return root


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(2) as pool:
        yield pool


@pytest.mark.anyio
@pytest.mark.parametrize(("gpu", "warned"), [("NVIDIA A10G", False), ("Tesla T4", True)])
async def test_a_truss_on_gpus_of_another_type_loads_with_a_warning(
    tmp_path: Path,
    executor: ThreadPoolExecutor,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    gpu: str,
    warned: bool,
) -> None:
    monkeypatch.setattr(devices_module, "_inventory", FakeInventory(4, name=gpu))
    source = read_truss(_truss(tmp_path / "t", "A10G:2"))
    with caplog.at_level(logging.WARNING):
        mv = build_version(source, secrets={}, executor=executor, codec=RequestSnapshots())
        await mv.load()
    try:
        assert mv.state is ModelState.READY, mv.reason
        assert [w.devices for w in mv.workers()] == [(0, 1)]
    finally:
        await mv.close()
    notes = [r.getMessage() for r in caplog.records if "resources.accelerator" in r.getMessage()]
    if warned:
        assert len(notes) == 1
        assert "asks for 'A10G', but GPU 0 is 'Tesla T4', GPU 1 is 'Tesla T4'" in notes[0]
    else:
        assert notes == []
