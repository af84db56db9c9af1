"""Each foreign config's devices read as Podium's one vocabulary (docs/devices.md): TorchServe's
``deviceType`` / ``deviceIds``, Truss's ``resources``, MLServer's runtime settings told the
worker's GPU; and a ``podium:`` section saying it in Podium's words."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from podium.compat import mlserver as compat_mlserver
from podium.devices import using
from podium.errors import DefinitionError
from podium.model.discovery import discover
from podium.model.mlserver._settings import runtime_settings
from podium.model.torchserve._config import model_config
from podium.model.truss._config import placement_of, read_truss


def ts(data: dict[str, Any]) -> Any:
    return model_config(data, name="m", version="1", where="model-config.yaml")


@pytest.mark.parametrize(
    ("given", "devices"),
    [
        ({}, "auto"),  # TorchServe: a GPU when there is one
        ({"deviceType": "cpu"}, "cpu"),
        ({"deviceType": "gpu"}, "gpu"),
        ({"deviceIds": [1, 3]}, (1, 3)),
        ({"deviceType": "gpu", "deviceIds": [2]}, (2,)),
        ({"deviceType": "cpu", "deviceIds": [2]}, "cpu"),
        ({"podium": {"devices": [0, 1], "workers_per_device": 2}}, (0, 1)),
    ],
)
def test_torchserve_device_keys(given: dict[str, Any], devices: Any) -> None:
    assert ts(given).devices == devices


def test_torchserve_devices_set_twice_is_refused() -> None:
    with pytest.raises(DefinitionError, match="'podium.devices' repeats 'deviceType'/'deviceIds'"):
        ts({"deviceIds": [1], "podium": {"devices": [0]}})


@pytest.mark.parametrize(
    ("resources", "placement"),
    [
        ({}, {"devices": "cpu"}),
        ({"use_gpu": False, "accelerator": None}, {"devices": "cpu"}),
        ({"use_gpu": True}, {"devices": "gpu", "devices_per_worker": 1}),
        ({"accelerator": "T4"}, {"devices": "gpu", "devices_per_worker": 1}),
        ({"accelerator": "A10G:2", "use_gpu": True}, {"devices": "gpu", "devices_per_worker": 2}),
        ({"accelerator": "H100_40GB:8"}, {"devices": "gpu", "devices_per_worker": 8}),
    ],
)
def test_truss_resources(resources: dict[str, Any], placement: dict[str, Any]) -> None:
    assert placement_of(resources) == placement


@pytest.mark.parametrize("accelerator", ["A10G:x", "A10G:0", "A10G:1000"])
def test_truss_accelerator_counts_are_checked(accelerator: str) -> None:
    with pytest.raises(ValueError, match="'resources.accelerator' must be a GPU type"):
        placement_of({"accelerator": accelerator})


def _truss(root: Path, config: str, podium: str | None = None) -> Path:
    (root / "model").mkdir(parents=True)
    (root / "model" / "model.py").write_text(
        "class Model:\n    def predict(self, x):\n        return x\n"
    )
    (root / "config.yaml").write_text(config)
    if podium is not None:
        (root / "podium.yaml").write_text(podium)
    return root


def test_a_truss_asking_for_two_gpus_holds_both_in_each_worker(tmp_path: Path) -> None:
    source = read_truss(_truss(tmp_path / "t", "resources:\n  accelerator: A10G:2\n"))
    assert (source.config.devices, source.config.devices_per_worker) == ("gpu", 2)
    plain = read_truss(_truss(tmp_path / "p", "resources:\n  cpu: '1'\n"))
    assert plain.config.devices == "cpu"  # as Truss runs it: no GPU asked, none given
    mine = read_truss(_truss(tmp_path / "m", "resources:\n  use_gpu: true\n", "devices: [3]\n"))
    assert mine.config.devices == (3,)  # podium.yaml wins
    with pytest.raises(DefinitionError, match="resources.accelerator"):
        read_truss(_truss(tmp_path / "b", "resources:\n  accelerator: A10G:x\n"))


def test_mlserver_runtime_settings_tell_the_worker_its_gpu(tmp_path: Path) -> None:
    folder = tmp_path / "mls"
    folder.mkdir()
    (folder / "models.py").write_text("class Runtime:\n    pass\n")
    (folder / "model-settings.json").write_text(
        json.dumps({"implementation": "models.Runtime", "parameters": {"extra": {"k": 1}}})
    )
    (source,) = discover(folder)
    settings = compat_mlserver.settings
    assert runtime_settings(source, settings).parameters.extra == {"k": 1}  # the CPU: untouched
    with using("cuda:2"):
        assert runtime_settings(source, settings).parameters.extra == {"k": 1, "device": 2}
    (folder / "model-settings.json").write_text(
        json.dumps({"implementation": "models.Runtime", "parameters": {"extra": {"device": -1}}})
    )
    (source,) = discover(folder)
    with using("cuda:2"):  # the file's own choice stands
        assert runtime_settings(source, settings).parameters.extra == {"device": -1}


def test_mlserver_parallel_workers_with_a_device_list(tmp_path: Path) -> None:
    folder = tmp_path / "mls"
    folder.mkdir()
    (folder / "models.py").write_text("class Runtime:\n    pass\n")
    settings = {
        "implementation": "models.Runtime",
        "parallel_workers": 2,
        "podium": {"devices": [0, 1], "workers_per_device": 1},
    }
    (folder / "model-settings.json").write_text(json.dumps(settings))
    (source,) = discover(folder)
    config = source.config
    assert (config.workers, config.devices, config.workers_per_device) == ("process", (0, 1), 1)
