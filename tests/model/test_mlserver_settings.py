"""Finding MLServer runtimes: model-settings.json mapped onto Podium's model configuration."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import EXAMPLES

from podium.errors import DefinitionError
from podium.model import mlserver
from podium.model.discovery import discover, discover_all


def model_dir(root: Path, name: str, settings: dict, code: str | None = None) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "model-settings.json").write_text(json.dumps(settings))
    (folder / "models.py").write_text(code or "class Runtime:\n    pass\n")
    return folder


def test_a_folder_with_model_settings_is_one_mlserver_model(tmp_path: Path) -> None:
    folder = model_dir(
        tmp_path,
        "sentiment",
        {
            "implementation": "models.Runtime",
            "max_batch_size": 8,
            "max_batch_time": 0.02,
            "platform": "custom",
            "inputs": [{"name": "text", "datatype": "BYTES", "shape": [-1]}],
            "parameters": {"version": 7, "content_type": "str", "extra": {"k": 1}},
        },
    )
    assert mlserver.is_source(folder)
    (source,) = discover(folder)
    config = source.config
    assert (config.name, config.version, config.batch_size) == ("sentiment", "7", 8)
    assert config.max_batch_delay_ms == pytest.approx(20.0)  # seconds → milliseconds
    assert config.predict_concurrency == 64 and config.workers == "thread"
    assert config.model_metadata == {
        "platform": "custom",
        "inputs": [{"name": "text", "datatype": "BYTES", "shape": [-1]}],
        "content_type": "str",
    }
    assert source.contract == "mlserver"
    assert source.file == folder / "models.py" and source.model_dir == folder
    assert source.mlserver_parts().implementation == "models.Runtime"


def test_name_parallel_workers_and_podium_keys(tmp_path: Path) -> None:
    folder = model_dir(
        tmp_path,
        "dir-name",
        {
            "name": "given",
            "implementation": "models.Runtime",
            "parallel_workers": 3,
            "max_batch_size": 4,  # no max_batch_time: no batching, as in MLServer
            "podium": {"predict_concurrency": 2, "max_queue_size": 10},
        },
    )
    (source,) = mlserver.sources(folder)
    c = source.config
    assert (c.name, c.batch_size, c.predict_concurrency, c.max_queue_size) == ("given", 1, 2, 10)
    assert (c.workers, c.min_workers, c.max_workers) == ("process", 3, 3)
    zero = model_dir(tmp_path, "zero", {"implementation": "models.Runtime", "parallel_workers": 0})
    assert mlserver.sources(zero)[0].config.workers == "thread"


def test_versions_in_subfolders(tmp_path: Path) -> None:
    root = tmp_path / "multi"
    for v in ("1", "2"):
        model_dir(
            root,
            v,
            {"name": "multi", "implementation": "models.Runtime", "parameters": {"version": v}},
        )
    assert mlserver.is_source(root)
    assert [(s.config.name, s.config.version) for s in discover(root)] == [
        ("multi", "1"),
        ("multi", "2"),
    ]


def test_a_repository_mixing_contracts_is_not_taken_for_one_mlserver_model(tmp_path: Path) -> None:
    model_dir(tmp_path, "mls", {"implementation": "models.Runtime"})
    native = tmp_path / "native"
    native.mkdir()
    (native / "model.py").write_text("class Model:\n    def predict(self, x):\n        return x\n")
    assert not mlserver.is_source(tmp_path)
    found = sorted((s.config.name, s.contract) for s in discover(tmp_path))
    assert found == [("mls", "mlserver"), ("native", "native")]


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        (
            {},
            "'implementation' must be the import path of the runtime class, 'module.Class', got None",
        ),
        ({"implementation": "NoModule"}, "'implementation' must be the import path"),
        ({"implementation": "models.R", "colour": "red"}, "unknown key 'colour'"),
        (
            {"implementation": "models.R", "max_batch_size": -1},
            "'max_batch_size' must be an integer >= 0",
        ),
        (
            {"implementation": "models.R", "max_batch_time": "1s"},
            "'max_batch_time' must be a number of seconds",
        ),
        (
            {"implementation": "models.R", "parallel_workers": 1.5},
            "'parallel_workers' must be an integer >= 0",
        ),
        ({"implementation": "models.R", "parameters": []}, "'parameters' must be an object"),
        (
            {"implementation": "models.R", "parameters": {"version": [1]}},
            "'parameters.version' must be",
        ),
        (
            {"implementation": "models.R", "parameters": {"environment_tarball": 3}},
            "'parameters.environment_tarball' must be a string",
        ),
        (
            {"implementation": "models.R", "parameters": {"extra": 3}},
            "'parameters.extra' must be an object",
        ),
        (
            {"implementation": "models.R", "inputs": "x"},
            "'inputs' must be a list of tensor descriptions",
        ),
        (
            {"implementation": "models.R", "podium": {"batch_size": 2}},
            "'podium.batch_size' cannot be set here; use 'max_batch_size'",
        ),
        ({"implementation": "models.R", "podium": {"colour": 1}}, "unknown key 'podium.colour'"),
        (
            {"implementation": "models.R", "podium": {"predict_concurrency": 0}},
            "'predict_concurrency' must be an integer >= 1",
        ),
        ({"implementation": "models.R", "name": "a/b"}, "'name' must not contain '/'"),
    ],
)
def test_problems_name_the_key_and_the_file(tmp_path: Path, settings: dict, expected: str) -> None:
    folder = model_dir(tmp_path, "bad", settings)
    with pytest.raises(DefinitionError) as info:
        discover(folder)
    assert expected in str(info.value)
    assert str(folder / "model-settings.json") in str(info.value)


def test_invalid_json_and_every_problem_at_once(tmp_path: Path) -> None:
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "model-settings.json").write_text("{not json")
    found, problems = discover_all(folder)
    assert not found and "invalid JSON" in problems[0]
    many = model_dir(tmp_path, "many", {"colour": 1, "max_batch_size": "x"})
    with pytest.raises(DefinitionError) as info:
        discover(many)
    assert len(info.value.problems) == 3  # unknown key, implementation, max_batch_size


def test_pydantic_is_imported_only_for_mlserver_models() -> None:
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "import podium.cli, podium.dataplane, podium.server._runner\n"
        "from podium.runtime.loading import check_paths\n"
        f"assert not check_paths([Path({str(EXAMPLES / 'echo')!r})])\n"
        "assert 'pydantic' not in sys.modules and 'podium.compat' not in sys.modules\n"
        f"assert not check_paths([Path({str(EXAMPLES / 'mlserver-text')!r})])\n"
        "assert 'pydantic' in sys.modules and sys.modules['mlserver'].__name__ == 'podium.compat.mlserver'\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
