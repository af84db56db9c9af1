"""Finding models on disk and importing their code: podium.model.discovery."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from podium.config import FIELDS, MODEL_KEYS, ModelConfig, ResponseCacheSettings
from podium.errors import DefinitionError
from podium.model import ModelSource
from podium.model.discovery import discover, import_model
from podium.types import InputKind

ECHO = """
class Model:
    def predict(self, inputs):
        return inputs
"""


def write(path: Path, text: str = ECHO) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def problems_of(path: Path) -> list[str]:
    with pytest.raises(DefinitionError) as info:
        discover(path)
    return info.value.problems


def one(path: Path) -> ModelSource:
    sources = discover(path)
    assert len(sources) == 1, sources
    return sources[0]


# -- the shapes a path can have ------------------------------------------------------------------


def test_a_python_file(tmp_path: Path) -> None:
    file = write(tmp_path / "echo.py")
    source = one(file)
    assert source.config.name == "echo"
    assert source.config.version is None
    assert source.file == file.resolve()
    assert source.model_dir == tmp_path.resolve()
    assert source.config.raw == {}
    assert source.label == f"model 'echo' ({file.resolve()})"


def test_a_file_that_is_not_python(tmp_path: Path) -> None:
    file = write(tmp_path / "echo.txt")
    [problem] = problems_of(file)
    assert str(file) in problem and "must be a .py file" in problem


def test_a_model_directory(tmp_path: Path) -> None:
    write(tmp_path / "sentiment" / "model.py")
    write(tmp_path / "sentiment" / "config.yaml", "predict_concurrency: 4\n")
    source = one(tmp_path / "sentiment")
    assert source.config.name == "sentiment"
    assert source.config.predict_concurrency == 4
    assert source.config.raw == {"predict_concurrency": 4}
    assert source.file == (tmp_path / "sentiment" / "model.py").resolve()
    assert source.model_dir == (tmp_path / "sentiment").resolve()


def test_config_yml_is_read_too(tmp_path: Path) -> None:
    write(tmp_path / "m" / "model.py")
    write(tmp_path / "m" / "config.yml", "batch_size: 8\n")
    assert one(tmp_path / "m").config.batch_size == 8


def test_a_model_directory_without_config(tmp_path: Path) -> None:
    write(tmp_path / "m" / "model.py")
    config = one(tmp_path / "m").config
    assert config.name == "m" and config.predict_concurrency == 1 and config.raw == {}


def test_name_override(tmp_path: Path) -> None:
    write(tmp_path / "dir-name" / "model.py")
    write(tmp_path / "dir-name" / "config.yaml", "name: nice-name\nversion: 3\n")
    config = one(tmp_path / "dir-name").config
    assert config.name == "nice-name"
    assert config.version == "3"


def test_a_versioned_directory(tmp_path: Path) -> None:
    root = tmp_path / "ranker"
    write(root / "config.yaml", "predict_concurrency: 2\nmodel_metadata: {owner: search}\n")
    write(root / "1" / "model.py")
    write(root / "2" / "model.py")
    write(root / "2" / "config.yaml", "predict_concurrency: 7\n")
    write(root / "10" / "model.py")
    write(root / "notes" / "readme.txt", "not a version\n")
    sources = discover(root)
    by_version = {s.config.version: s for s in sources}
    assert set(by_version) == {"1", "2", "10"}
    assert all(s.config.name == "ranker" for s in sources)
    assert by_version["1"].config.predict_concurrency == 2
    assert by_version["2"].config.predict_concurrency == 7
    assert by_version["10"].config.predict_concurrency == 2
    assert all(s.config.model_metadata == {"owner": "search"} for s in sources)
    assert by_version["2"].model_dir == (root / "2").resolve()
    assert by_version["2"].file == (root / "2" / "model.py").resolve()
    assert by_version["2"].label == f"model 'ranker' version '2' ({by_version['2'].file})"


def test_a_version_directory_may_rename_its_version(tmp_path: Path) -> None:
    write(tmp_path / "m" / "1" / "model.py")
    write(tmp_path / "m" / "1" / "config.yaml", "version: v1-beta\n")
    assert one(tmp_path / "m").config.version == "v1-beta"


def test_a_bad_key_in_the_shared_config_names_the_shared_file(tmp_path: Path) -> None:
    root = tmp_path / "m"
    write(root / "config.yaml", "predict_concurency: 2\n")
    write(root / "1" / "model.py")
    write(root / "2" / "model.py")
    problems = problems_of(root)
    assert problems
    assert all("'predict_concurency'" in p for p in problems)
    assert all(str(root / "config.yaml") in p for p in problems)


def test_a_bad_key_in_a_version_config_names_that_file(tmp_path: Path) -> None:
    root = tmp_path / "m"
    write(root / "1" / "model.py")
    write(root / "2" / "model.py")
    write(root / "2" / "config.yaml", "batch_size: many\n")
    [problem] = problems_of(root)
    assert str(root / "2" / "config.yaml") in problem
    assert "'batch_size'" in problem


def test_a_repository_of_several_models(tmp_path: Path) -> None:
    write(tmp_path / "a" / "model.py")
    write(tmp_path / "b" / "config.yaml", "name: bee\n")
    write(tmp_path / "b" / "model.py")
    write(tmp_path / "c" / "1" / "model.py")
    write(tmp_path / "c" / "2" / "model.py")
    write(tmp_path / ".hidden" / "model.py")
    write(tmp_path / "_private" / "model.py")
    write(tmp_path / "docs" / "index.md", "# not a model\n")
    write(tmp_path / "loose.py")  # files at the top of a repository are not models
    found = sorted((s.config.name, s.config.version) for s in discover(tmp_path))
    assert found == [("a", None), ("bee", None), ("c", "1"), ("c", "2")]


def test_an_empty_repository(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    [problem] = problems_of(tmp_path / "empty")
    assert "holds no model" in problem


def test_a_missing_path(tmp_path: Path) -> None:
    [problem] = problems_of(tmp_path / "nope")
    assert str(tmp_path / "nope") in problem
    assert "no such file or directory" in problem


def test_every_problem_in_a_repository_is_reported(tmp_path: Path) -> None:
    write(tmp_path / "a" / "model.py")
    write(tmp_path / "a" / "config.yaml", "colour: blue\n")
    write(tmp_path / "b" / "model.py")
    write(tmp_path / "b" / "config.yaml", "max_queue_size: 0\n")
    write(tmp_path / "c" / "model.py")
    write(tmp_path / "c" / "config.yaml", "[1, 2]\n")
    problems = problems_of(tmp_path)
    assert len(problems) == 3
    assert "unknown key 'colour'" in problems[0]
    assert "'max_queue_size' must be an integer >= 1, got 0" in problems[1]
    assert "must be a mapping" in problems[2] and "list" in problems[2]


# -- config keys ---------------------------------------------------------------------------------

VALID: dict[str, tuple[str, Any]] = {
    "name": ("other", "other"),
    "version": ("7", "7"),
    "model_class_name": ("Classifier", "Classifier"),
    "predict_concurrency": ("3", 3),
    "batch_size": ("16", 16),
    "max_batch_delay": ("2.5", 2.5),
    "max_queue_size": ("9", 9),
    "stream_buffer": ("4", 4),
    "default_version": ("3", "3"),
    "model_metadata": ("{platform: onnx}", {"platform": "onnx"}),
    "workers": ("process", "process"),
    "min_workers": ("0", 0),
    "max_workers": ("3", 3),
    "response_timeout": ("2.5", 2.5),
    "sequence_batching": ("true", True),
    "sequence_max_idle_ms": ("250", 250.0),
    "sequence_timeout_ms": ("0", 0.0),
    "max_sequence_queue_size": ("3", 3),
    "max_num_sequences": ("16", 16),
    "continuous_batching": ("true", True),
    "ray": ("{num_cpus: 2}", {"num_cpus": 2}),
    "devices": ("[0, 2]", (0, 2)),
    "workers_per_device": ("2", 2),
    "devices_per_worker": ("2", 2),
    "metrics_config": ("metrics.yaml", Path("metrics.yaml")),
    "ts_metrics": ("prometheus", "prometheus"),
    "max_queue_delay": ("100", 100.0),
    "priority_levels": ("3", 3),
    "default_priority": ("1", 1),
    "priority_aging": ("500", 500.0),
    "predict_concurrency_per": ("worker", "worker"),
    "response_cache": (
        "{max_bytes: 1024, ttl_s: 30}",
        ResponseCacheSettings(max_bytes=1024, ttl_s=30.0),
    ),
}

INVALID: dict[str, str] = {
    "name": "''",
    "version": "[1]",
    "model_class_name": "''",
    "predict_concurrency": "0",
    "batch_size": "two",
    "max_batch_delay": "-1",
    "max_queue_size": "true",
    "stream_buffer": "1.5",
    "default_version": "''",
    "model_metadata": "[a, b]",
    "workers": "gpu",
    "min_workers": "-1",
    "max_workers": "0",
    "response_timeout": "soon",
    "sequence_batching": "yes please",
    "sequence_max_idle_ms": "-5",
    "sequence_timeout_ms": "forever",
    "max_sequence_queue_size": "0",
    "max_num_sequences": "-1",
    "continuous_batching": "1",
    "ray": "[1, 2]",
    "devices": "[0, 0]",
    "workers_per_device": "-1",
    "devices_per_worker": "0",
    "metrics_config": "''",
    "ts_metrics": "graphite",
    "max_queue_delay": "-1",
    "priority_levels": "0",
    "default_priority": "0",
    "priority_aging": "0",
    "predict_concurrency_per": "gpu",
    "response_cache": "lots",
}


def test_the_tables_cover_every_key() -> None:
    assert set(VALID) == set(INVALID) == MODEL_KEYS


@pytest.mark.parametrize("key", sorted(VALID))
def test_each_config_key(tmp_path: Path, key: str) -> None:
    text, expected = VALID[key]
    write(tmp_path / "m" / "model.py")
    write(tmp_path / "m" / "config.yaml", f"{key}: {text}\n")
    config = one(tmp_path / "m").config
    assert getattr(config, FIELDS[key].attr) == expected


@pytest.mark.parametrize("key", sorted(INVALID))
def test_each_config_key_with_a_wrong_value(tmp_path: Path, key: str) -> None:
    write(tmp_path / "m" / "model.py")
    write(tmp_path / "m" / "config.yaml", f"{key}: {INVALID[key]}\n")
    [problem] = problems_of(tmp_path / "m")
    assert f"'{key}'" in problem
    assert str(tmp_path / "m" / "config.yaml") in problem


def test_an_unknown_key(tmp_path: Path) -> None:
    write(tmp_path / "m" / "model.py")
    write(tmp_path / "m" / "config.yaml", "batch_sise: 4\n")
    [problem] = problems_of(tmp_path / "m")
    assert "unknown key 'batch_sise'" in problem
    assert "batch_size" in problem  # the allowed keys are listed


def test_invalid_yaml(tmp_path: Path) -> None:
    write(tmp_path / "m" / "model.py")
    write(tmp_path / "m" / "config.yaml", "batch_size: [1\n")
    [problem] = problems_of(tmp_path / "m")
    assert "invalid YAML" in problem and "config.yaml" in problem


# -- importing -----------------------------------------------------------------------------------


def test_import_a_model(tmp_path: Path) -> None:
    spec = import_model(one(write(tmp_path / "echo.py")))
    assert spec.cls.__name__ == "Model"
    assert spec.predict.takes_inputs


def test_model_class_name(tmp_path: Path) -> None:
    write(
        tmp_path / "m" / "model.py",
        """
        class Helper:
            pass

        class Classifier:
            def predict(self, inputs):
                return inputs
        """,
    )
    write(tmp_path / "m" / "config.yaml", "model_class_name: Classifier\n")
    assert import_model(one(tmp_path / "m")).cls.__name__ == "Classifier"


def test_missing_class(tmp_path: Path) -> None:
    write(tmp_path / "m" / "model.py", "class NotTheModel:\n    pass\n")
    source = one(tmp_path / "m")
    with pytest.raises(DefinitionError) as info:
        import_model(source)
    assert "model 'm'" in info.value.message
    assert str(source.file) in info.value.message
    assert "defines no class 'Model'" in info.value.message


def test_import_error_names_the_model_the_file_and_the_exception(tmp_path: Path) -> None:
    write(tmp_path / "broken" / "model.py", "import math\nVALUE = 1 / 0\n")
    source = one(tmp_path / "broken")
    with pytest.raises(DefinitionError) as info:
        import_model(source)
    message = info.value.message
    assert "model 'broken'" in message
    assert str(source.file) in message
    assert "ZeroDivisionError: division by zero" in message
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_syntax_error(tmp_path: Path) -> None:
    write(tmp_path / "m.py", "class Model(:\n")
    with pytest.raises(DefinitionError) as info:
        import_model(one(tmp_path / "m.py"))
    assert "model 'm'" in info.value.message and "SyntaxError" in info.value.message


def test_a_failed_import_leaves_no_module_behind(tmp_path: Path) -> None:
    write(tmp_path / "m.py", "raise ImportError('no torch here')\n")
    before = set(sys.modules)
    with pytest.raises(DefinitionError, match="ImportError: no torch here"):
        import_model(one(tmp_path / "m.py"))
    assert set(sys.modules) == before


def test_contract_problems_name_the_model_and_the_file(tmp_path: Path) -> None:
    write(
        tmp_path / "m.py",
        """
        class Model:
            def preprocess(self, a, b, c):
                return a

            def predict(self):
                return 1
        """,
    )
    source = one(tmp_path / "m.py")
    with pytest.raises(DefinitionError) as info:
        import_model(source)
    assert len(info.value.problems) == 2
    assert all(p.startswith(source.label + ": ") for p in info.value.problems)
    assert "Model.preprocess takes 3 parameters" in info.value.problems[0]
    assert "Model.predict takes no parameters" in info.value.problems[1]


def test_string_annotations_in_a_model_file(tmp_path: Path) -> None:
    write(
        tmp_path / "m.py",
        """
        from __future__ import annotations

        from typing import TYPE_CHECKING

        import pydantic
        from starlette.requests import Request

        from podium import InferenceRequest

        if TYPE_CHECKING:
            import numpy.typing as npt


        class Query(pydantic.BaseModel):
            text: str


        class MyRequest(Request):
            pass


        class Model:
            def preprocess(self, inputs: Query, request: MyRequest) -> npt.NDArray:
                return inputs

            async def predict(self, inputs, request: Request) -> npt.NDArray:
                return inputs

            def postprocess(self, outputs: dict, request: MyRequest) -> dict:
                return outputs


        class Oip:
            def predict(self, inputs: InferenceRequest):
                return inputs


        class RequestOnly:
            def predict(self, request: Request):
                return 1
        """,
    )
    source = one(tmp_path / "m.py")
    spec = import_model(source)
    assert spec.input_kind is InputKind.SCHEMA
    assert spec.input_schema is not None and spec.input_schema.__name__ == "Query"
    assert spec.preprocess is not None and spec.preprocess.takes_request
    assert spec.predict.takes_request
    assert spec.postprocess is not None and spec.postprocess.takes_request

    for name, kind, needs_inputs in (
        ("Oip", InputKind.OIP_REQUEST, True),
        ("RequestOnly", InputKind.DEFAULT, False),
    ):
        other = ModelSource(
            ModelConfig(name="m", model_class_name=name), source.file, source.model_dir
        )
        spec = import_model(other)
        assert spec.input_kind is kind
        assert spec.needs_inputs is needs_inputs


def test_a_directory_of_torchserve_archives_is_a_repository(tmp_path: Path) -> None:
    """A TorchServe model store: .mar files side by side (and a stray file that is not one)."""
    from podium.model.torchserve import archive_model

    handler = tmp_path / "src" / "handler.py"
    handler.parent.mkdir()
    handler.write_text("def handle(data, context):\n    return [1 for _ in data]\n")
    store = tmp_path / "store"
    store.mkdir()
    for name in ("alpha", "beta"):
        archive_model(model_name=name, handler=handler, export_path=store, archive_format="default")
    (store / "notes.txt").write_text("not a model")
    found = discover(store)
    assert sorted(s.config.name for s in found) == ["alpha", "beta"]
    assert {s.contract for s in found} == {"torchserve"}


def test_the_requirements_a_model_declares_are_read_from_its_own_file(tmp_path: Path) -> None:
    import json

    native = write(tmp_path / "native" / "model.py")
    assert one(native.parent).requirements() == ()
    write(native.parent / "requirements.txt", "numpy>=1  # pinned\n-e ./local\n\nscipy\n")
    assert one(native.parent).requirements() == ("numpy>=1", "scipy")
    handler = write(tmp_path / "ts" / "handler.py", "def handle(data, context):\n    return data\n")
    manifest = {"model": {"modelName": "ts", "handler": "handler.py"}}
    write(handler.parent / "MAR-INF" / "MANIFEST.json", json.dumps(manifest))
    assert one(handler.parent).requirements() == ()  # none listed
    manifest["model"]["requirementsFile"] = "needs.txt"
    write(handler.parent / "MAR-INF" / "MANIFEST.json", json.dumps(manifest))
    assert one(handler.parent).requirements() == ()  # listed, but not there
    write(handler.parent / "needs.txt", "torch\n")
    assert one(handler.parent).requirements() == ("torch",)
