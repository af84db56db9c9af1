"""From files on disk to registered, scheduled versions: podium.runtime.loading."""

from __future__ import annotations

import dataclasses
import textwrap
import threading
import types
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from helpers import all_ready

from podium.config import Secrets
from podium.errors import DefinitionError, ModelNotReady
from podium.model import Contract
from podium.model.discovery import discover
from podium.runtime.batcher import BatchScheduler
from podium.runtime.direct import DirectScheduler
from podium.runtime.loading import _check_continuous, build_version, check_paths, register_paths
from podium.runtime.registry import ModelState, Registry

ECHO = """
class Model:
    def predict(self, inputs):
        return inputs
"""

STREAM = """
class Model:
    async def predict(self, inputs):
        yield inputs
"""


def write(path: Path, text: str = ECHO) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(4, thread_name_prefix="test-model") as pool:
        yield pool


# -- build_version -------------------------------------------------------------------------------


@pytest.mark.parametrize("sequences", [False, True])
@pytest.mark.parametrize("contract", [Contract.MLSERVER, Contract.TRUSS])
def test_continuous_batching_is_refused_where_the_contract_has_no_step(
    tmp_path: Path, contract: Contract, sequences: bool
) -> None:
    write(tmp_path / "m" / "model.py")
    [source] = discover(tmp_path / "m")
    config = dataclasses.replace(
        source.config, continuous_batching=True, sequence_batching=sequences
    )
    # (what prepare checks first, whatever else the contract's source carries)
    other = types.SimpleNamespace(config=config, contract=contract, label="model 'm'")
    with pytest.raises(DefinitionError) as info:
        _check_continuous(other)  # type: ignore[arg-type]
    assert info.value.problems == [
        f"model 'm': continuous_batching for a {contract.value} model is not supported yet; "
        "only native models (a class with step(self, batch)) and TorchServe handlers "
        "(continuousBatching) have it"
    ]


def test_direct_scheduler_by_default(tmp_path: Path, executor: ThreadPoolExecutor) -> None:
    write(tmp_path / "m" / "model.py")
    write(tmp_path / "m" / "config.yaml", "predict_concurrency: 3\nmax_queue_size: 7\n")
    [source] = discover(tmp_path / "m")
    mv = build_version(source, secrets={}, executor=executor)
    assert isinstance(mv.scheduler, DirectScheduler)
    assert mv.scheduler.statistics() == {"slots": 3, "busy": 0, "waiting": 0}
    assert mv.state is ModelState.LOADING
    assert (mv.name, mv.version) == ("m", None)
    assert mv.source == str(source.file)


def test_batch_scheduler_when_batch_size_above_one(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    write(tmp_path / "m" / "model.py")
    write(tmp_path / "m" / "config.yaml", "batch_size: 4\npredict_concurrency: 2\n")
    [source] = discover(tmp_path / "m")
    mv = build_version(source, secrets={}, executor=executor)
    assert isinstance(mv.scheduler, BatchScheduler)
    assert mv.scheduler.statistics()["slots"] == 2


def test_streaming_predict_cannot_be_batched(tmp_path: Path, executor: ThreadPoolExecutor) -> None:
    write(tmp_path / "llm" / "model.py", STREAM)
    write(tmp_path / "llm" / "config.yaml", "batch_size: 8\n")
    [source] = discover(tmp_path / "llm")
    with pytest.raises(DefinitionError) as info:
        build_version(source, secrets={}, executor=executor)
    assert "model 'llm'" in info.value.message
    assert "async generator and batch_size is 8" in info.value.message
    [problem] = check_paths([tmp_path / "llm"])
    assert "model 'llm'" in problem and "batch_size is 8" in problem


def test_init_receives_config_data_dir_and_secrets(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    write(
        tmp_path / "m" / "model.py",
        """
        class Model:
            def __init__(self, config, data_dir, secrets):
                self.threshold = config["model_metadata"]["threshold"]
                self.labels = (data_dir / "labels.txt").read_text().split()
                self.token = secrets["api_token"]

            def predict(self, inputs):
                return inputs
        """,
    )
    write(tmp_path / "m" / "config.yaml", "model_metadata: {threshold: 0.5}\n")
    write(tmp_path / "m" / "data" / "labels.txt", "cat dog\n")
    [source] = discover(tmp_path / "m")
    secrets = Secrets(environ={"PODIUM_SECRET_API_TOKEN": "t0k"})
    mv = build_version(source, secrets=secrets, executor=executor)
    obj = mv.instance.obj  # type: ignore[attr-defined]
    assert (obj.threshold, obj.labels, obj.token) == (0.5, ["cat", "dog"], "t0k")


def test_init_raising_names_the_model(tmp_path: Path, executor: ThreadPoolExecutor) -> None:
    write(
        tmp_path / "m" / "model.py",
        """
        class Model:
            def __init__(self, secrets):
                self.key = secrets["openai"]

            def predict(self, inputs):
                return inputs
        """,
    )
    [source] = discover(tmp_path / "m")
    with pytest.raises(DefinitionError) as info:
        build_version(source, secrets=Secrets(environ={}), executor=executor)
    message = info.value.message
    assert "model 'm'" in message
    assert "Model.__init__ raised MissingSecret" in message
    assert "PODIUM_SECRET_OPENAI" in message


# -- check_paths ---------------------------------------------------------------------------------


def test_check_paths_valid(tmp_path: Path) -> None:
    write(tmp_path / "a.py")
    write(tmp_path / "repo" / "b" / "model.py")
    assert check_paths([tmp_path / "a.py", tmp_path / "repo"]) == []


def test_duplicate_name_and_version_across_paths(tmp_path: Path) -> None:
    first = write(tmp_path / "one" / "echo.py")
    second = write(tmp_path / "two" / "echo" / "model.py")
    [problem] = check_paths([first, tmp_path / "two"])
    assert "model 'echo'" in problem
    assert "defined twice" in problem
    assert str(first.resolve()) in problem and str(second.resolve()) in problem


def test_duplicate_version_via_name_override(tmp_path: Path) -> None:
    write(tmp_path / "a" / "1" / "model.py")
    write(tmp_path / "b" / "model.py")
    write(tmp_path / "b" / "config.yaml", "name: a\nversion: 1\n")
    [problem] = check_paths([tmp_path])
    assert "model 'a' version '1'" in problem and "defined twice" in problem


def test_same_name_different_versions_is_fine(tmp_path: Path) -> None:
    write(tmp_path / "a" / "1" / "model.py")
    write(tmp_path / "b" / "model.py")
    write(tmp_path / "b" / "config.yaml", "name: a\nversion: 2\n")
    assert check_paths([tmp_path]) == []


def test_check_paths_reports_every_problem(tmp_path: Path) -> None:
    write(tmp_path / "repo" / "bad_import" / "model.py", "import not_a_module_anywhere\n")
    write(tmp_path / "repo" / "bad_contract" / "model.py", "class Model:\n    pass\n")
    write(tmp_path / "repo" / "bad_config" / "model.py")
    write(tmp_path / "repo" / "bad_config" / "config.yaml", "replicas: 2\n")
    write(tmp_path / "repo" / "good" / "model.py")
    problems = check_paths([tmp_path / "repo", tmp_path / "missing"])
    text = "\n".join(problems)
    assert len(problems) == 4, text
    assert "unknown key 'replicas'" in text
    assert str(tmp_path / "missing") in text and "no such file or directory" in text
    assert "model 'bad_import'" in text and "ModuleNotFoundError" in text
    assert "model 'bad_contract'" in text and "no predict method" in text


# -- register_paths and loading ------------------------------------------------------------------


@pytest.mark.anyio
async def test_register_and_load(tmp_path: Path, executor: ThreadPoolExecutor) -> None:
    loop_thread = threading.get_ident()
    write(
        tmp_path / "repo" / "sync_load" / "model.py",
        """
        import threading

        LOADED_IN = []

        class Model:
            def load(self):
                LOADED_IN.append(threading.get_ident())

            def predict(self, inputs):
                return LOADED_IN[0]
        """,
    )
    write(
        tmp_path / "repo" / "async_load" / "model.py",
        """
        import threading

        class Model:
            async def load(self):
                self.loaded_in = threading.get_ident()

            async def predict(self, inputs):
                return self.loaded_in
        """,
    )
    write(
        tmp_path / "repo" / "broken_load" / "model.py",
        """
        class Model:
            def load(self):
                raise FileNotFoundError("weights.bin")

            def predict(self, inputs):
                return inputs
        """,
    )
    write(tmp_path / "repo" / "versions" / "1" / "model.py")
    write(tmp_path / "repo" / "versions" / "10" / "model.py")
    write(tmp_path / "repo" / "versions" / "9" / "model.py")
    registry = Registry()
    register_paths(registry, [tmp_path / "repo"], secrets={}, executor=executor)
    assert registry.names() == ["async_load", "broken_load", "sync_load", "versions"]
    assert not all_ready(registry)
    with pytest.raises(ModelNotReady, match="still loading"):
        registry.ready("sync_load")
    await registry.load_all()
    try:
        assert registry.get("sync_load").state is ModelState.READY
        assert registry.get("async_load").state is ModelState.READY
        broken = registry.get("broken_load")
        assert broken.state is ModelState.FAILED
        assert broken.reason == "load() raised FileNotFoundError: weights.bin"
        assert not all_ready(registry)
        sync_thread = await registry.ready("sync_load").scheduler.infer(None, None)
        async_thread = await registry.ready("async_load").scheduler.infer(None, None)
        assert sync_thread != loop_thread
        assert async_thread == loop_thread
        assert registry.get("versions").version == "10"
    finally:
        await registry.close()


def test_register_paths_refuses_everything_on_any_problem(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    write(tmp_path / "good.py")
    write(tmp_path / "bad.py", "raise RuntimeError('at import')\n")
    registry = Registry()
    with pytest.raises(DefinitionError) as info:
        register_paths(
            registry, [tmp_path / "good.py", tmp_path / "bad.py"], secrets={}, executor=executor
        )
    [problem] = info.value.problems
    assert "model 'bad'" in problem and "RuntimeError: at import" in problem
    assert registry.names() == []


def test_register_paths_reports_init_failures(tmp_path: Path, executor: ThreadPoolExecutor) -> None:
    write(tmp_path / "good.py")
    write(
        tmp_path / "bad.py",
        """
        class Model:
            def __init__(self):
                raise ValueError("bad init")

            def predict(self, inputs):
                return inputs
        """,
    )
    registry = Registry()
    with pytest.raises(DefinitionError) as info:
        register_paths(
            registry, [tmp_path / "good.py", tmp_path / "bad.py"], secrets={}, executor=executor
        )
    [problem] = info.value.problems
    assert "model 'bad'" in problem and "ValueError: bad init" in problem
