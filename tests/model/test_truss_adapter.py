"""A truss behind Podium's ModelInstance: its config, its imports, Truss's rules, streaming by
the value returned, secrets, environment variables, schema and validation."""

from __future__ import annotations

import asyncio
import logging
import os
import textwrap
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from podium.config import Secrets
from podium.errors import DefinitionError, InvalidInput, MissingSecret, ModelError, ResponseTimeout
from podium.model import Contract, discover, truss
from podium.model.truss._model import TrussModel
from podium.types import InputKind, Returned


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    pool = ThreadPoolExecutor(4)
    yield pool
    pool.shutdown(wait=True)


def make_truss(
    root: Path, model: str, config: str = "", files: dict[str, str] | None = None
) -> Path:
    """A truss at ``root``: config.yaml, model/model.py, and any other ``files``."""
    (root / "model").mkdir(parents=True)
    (root / "config.yaml").write_text(textwrap.dedent(config) or "{}\n")
    (root / "model" / "model.py").write_text(textwrap.dedent(model))
    for name, text in (files or {}).items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def build(root: Path, executor: ThreadPoolExecutor, secrets: Any = None) -> TrussModel:
    (source,) = discover(root)
    spec = truss.prepare(source)
    instance = truss.build(
        source, spec, secrets=Secrets(None) if secrets is None else secrets, executor=executor
    )
    assert isinstance(instance, TrussModel)
    return instance


ECHO = """
class Model:
    def predict(self, model_input):
        return model_input
"""


def test_a_truss_is_discovered_with_its_name_and_truss_settings(tmp_path: Path) -> None:
    root = make_truss(
        tmp_path / "my-truss",
        ECHO,
        """
        model_name: basic truss
        runtime:
          predict_concurrency: 3
        model_metadata:
          example_model_input: {"x": 1}
        resources:
          accelerator: A10G:2
        """,
    )
    (source,) = discover(root)
    assert source.contract is Contract.TRUSS
    assert source.config.name == "basic truss"
    assert source.config.predict_concurrency == 3
    assert source.config.model_metadata == {"example_model_input": {"x": 1}}
    assert source.config.raw["resources"]["accelerator"] == "A10G:2"
    # the model's `config` is Truss's, with its defaults filled in
    assert source.config.raw["runtime"]["streaming_read_timeout"] == 60
    assert source.config.raw["model_class_filename"] == "model.py"


def test_a_truss_without_model_name_is_named_after_its_folder(tmp_path: Path) -> None:
    (source,) = discover(make_truss(tmp_path / "iris", ECHO))
    assert source.config.name == "iris"
    assert source.config.predict_concurrency == 1  # Truss's default


def test_a_folder_of_trusses_and_other_models_is_a_repository(tmp_path: Path) -> None:
    make_truss(tmp_path / "repo" / "a", ECHO)
    make_truss(tmp_path / "repo" / "b", ECHO, "model_name: bee\n")
    native = tmp_path / "repo" / "native"
    native.mkdir()
    (native / "model.py").write_text(ECHO)
    found = {s.config.name: s.contract for s in discover(tmp_path / "repo")}
    assert found == {"a": Contract.TRUSS, "bee": Contract.TRUSS, "native": Contract.NATIVE}


def test_custom_module_dir_file_and_class_names(tmp_path: Path) -> None:
    root = tmp_path / "t"
    (root / "src").mkdir(parents=True)
    (root / "src" / "serve.py").write_text(
        "class Predictor:\n    def predict(self, x):\n        return 7\n"
    )
    (root / "config.yaml").write_text(
        "model_module_dir: src\nmodel_class_filename: serve.py\nmodel_class_name: Predictor\n"
    )
    (source,) = discover(root)
    assert source.contract is Contract.TRUSS
    assert truss.prepare(source).cls.__name__ == "Predictor"


def test_unknown_keys_are_warned_not_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = make_truss(tmp_path / "t", ECHO, "not_a_truss_key: 1\nspec_version: '2.0'\n")
    with caplog.at_level(logging.WARNING, logger="podium.model"):
        (source,) = discover(root)
    assert "key 'not_a_truss_key' is not one Truss knows" in caplog.text
    assert "spec_version" not in caplog.text


def test_build_time_keys_are_named_and_missing_requirements_listed(tmp_path: Path) -> None:
    root = make_truss(
        tmp_path / "t",
        ECHO,
        """
        requirements:
          - numpy
          - podium-no-such-package==1.0
        system_packages: [ffmpeg]
        """,
    )
    (source,) = discover(root)
    notes = truss.notes(source)
    assert any("'system_packages' is build-time configuration" in n for n in notes)
    assert any(
        "requirements not installed here: podium-no-such-package==1.0" in n
        and "pip install podium-no-such-package==1.0" in n
        for n in notes
    )
    assert not any("numpy" in n for n in notes if "not installed" in n)


def test_requirements_file_is_read(tmp_path: Path) -> None:
    root = make_truss(
        tmp_path / "t",
        ECHO,
        "requirements_file: ./requirements.txt\n",
        {"requirements.txt": "# comment\nnumpy\npodium-missing-too>=2  # why\n-e .\n"},
    )
    (source,) = discover(root)
    assert source.truss_parts().settings.requirements == ("numpy", "podium-missing-too>=2")
    assert truss.missing_requirements(source.truss_parts().settings.requirements) == [
        "podium-missing-too>=2"
    ]


def test_an_import_error_names_the_missing_requirement(tmp_path: Path) -> None:
    root = make_truss(
        tmp_path / "t",
        "import podium_no_such_module\n" + ECHO,
        "requirements: [podium-no-such-module]\n",
    )
    (source,) = discover(root)
    with pytest.raises(DefinitionError) as info:
        truss.prepare(source)
    assert "ModuleNotFoundError" in info.value.message
    assert "pip install podium-no-such-module" in info.value.message


@pytest.mark.parametrize(
    ("config", "rule"),
    [
        ("docker_server: {start_command: 'x', server_port: 8000}\n", "'docker_server' runs"),
        ("runtime: {streaming_read_timeout: 0}\n", "streaming_read_timeout' must be a number"),
        ("secrets: [a, b]\n", "'secrets' must be a mapping"),
        ("- a\n- b\n", "must be a mapping of keys to values, not list"),
        ("model_module_dir: ../elsewhere\n", None),
    ],
)
def test_bad_configs_are_refused_with_the_key(
    tmp_path: Path, config: str, rule: str | None
) -> None:
    root = make_truss(tmp_path / "t", ECHO, config)
    if rule is None:  # a model dir outside the truss: not a truss at all here
        assert not truss.is_source(root)
        return
    with pytest.raises(DefinitionError) as info:
        discover(root)
    assert rule in info.value.message


@pytest.mark.parametrize(
    ("model", "rule"),
    [
        ("class Model:\n    pass\n", "must have a `predict` or `websocket` method"),
        (
            "class Model:\n    def predict(self, a, b, c):\n        return 1\n",
            "cannot have more than two arguments",
        ),
        (
            "class Model:\n    def predict(self, a, b):\n        return 1\n",
            "must have request as second argument",
        ),
        (
            "class Model:\n    def is_healthy(self, x):\n        return True\n"
            "    def predict(self, x):\n        return x\n",
            "`is_healthy` must have only one argument",
        ),
        (
            "class Model:\n    def websocket(self, ws):\n        pass\n",
            "`websocket` endpoints must be async",
        ),
        (
            "class Model:\n    async def websocket(self, ws):\n        pass\n"
            "    def predict(self, x):\n        return x\n",
            "cannot have both `websocket` and any of",
        ),
        (
            "from starlette.requests import Request\nclass Model:\n"
            "    def preprocess(self, x):\n        return x\n"
            "    def predict(self, request: Request):\n        return 1\n",
            "the predict method cannot only have the request",
        ),
    ],
)
def test_truss_rules_are_checked_at_load(tmp_path: Path, model: str, rule: str) -> None:
    (source,) = discover(make_truss(tmp_path / "t", model))
    with pytest.raises(DefinitionError) as info:
        truss.prepare(source)
    assert rule in info.value.message


def test_a_zero_argument_predict_is_allowed(tmp_path: Path, executor: ThreadPoolExecutor) -> None:
    inst = build(
        make_truss(tmp_path / "t", "class Model:\n    def predict(self):\n        return 5\n"),
        executor,
    )
    assert asyncio.run(inst.predict({"ignored": 1}, None)) == 5


def test_constructor_gets_truss_keywords_by_name(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    model = """
    class Model:
        def __init__(self, config, data_dir, secrets, lazy_data_resolver, environment):
            self.seen = (config, data_dir, secrets, lazy_data_resolver, environment)

        def predict(self, x):
            config, data_dir, secrets, lazy, environment = self.seen
            return {
                "name": config["model_name"],
                "data": (data_dir / "weights.txt").read_text(),
                "lazy": lazy.block_until_download_complete(),
                "environment": environment,
            }
    """
    root = make_truss(tmp_path / "t", model, "model_name: k\n", {"data/weights.txt": "w"})
    inst = build(root, executor)
    assert asyncio.run(inst.predict(None, None)) == {
        "name": "k",
        "data": "w",
        "lazy": "",
        "environment": None,
    }


def test_kwargs_constructor_gets_them_all(tmp_path: Path, executor: ThreadPoolExecutor) -> None:
    model = """
    class Model:
        def __init__(self, **kwargs):
            self.keys = sorted(kwargs)

        def predict(self, x):
            return self.keys
    """
    inst = build(make_truss(tmp_path / "t", model), executor)
    assert asyncio.run(inst.predict(None, None)) == sorted(
        ["config", "data_dir", "secrets", "lazy_data_resolver", "environment"]
    )


SECRETS = """
class Model:
    def __init__(self, secrets):
        self._secrets = secrets

    def predict(self, name):
        return self._secrets[name]
"""


def test_secrets_come_from_default_then_environment_then_file(
    tmp_path: Path, executor: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_truss(
        tmp_path / "t",
        SECRETS,
        "secrets:\n  api_key: from-default\n  token: null\n  other: x\n",
    )
    secrets_dir = tmp_path / "secrets"
    secrets_dir.mkdir()
    inst = build(root, executor, Secrets(secrets_dir))
    assert asyncio.run(inst.predict("api_key", None)) == "from-default"
    monkeypatch.setenv("TRUSS_SECRET_api_key", "from-env")
    assert asyncio.run(inst.predict("api_key", None)) == "from-env"
    (secrets_dir / "api_key").write_text("from-file")
    assert asyncio.run(inst.predict("api_key", None)) == "from-file"
    for name in ("token", "undeclared"):  # declared without a value; not declared
        with pytest.raises(MissingSecret) as info:
            asyncio.run(inst.predict(name, None))
        assert f"Secret '{name}' not found" in info.value.message
    assert "from-file" not in repr(inst.obj._secrets)


ENVIRON = """
import os

IMPORTED = os.environ.get("TRUSS_TEST_VAR")


class Model:
    def __init__(self):
        self.at_init = os.getenv("TRUSS_TEST_VAR")

    def load(self):
        self.at_load = os.environ["TRUSS_TEST_VAR"]

    def predict(self, x):
        return [IMPORTED, self.at_init, self.at_load, os.environ.get("TRUSS_TEST_VAR"),
                "TRUSS_TEST_VAR" in os.environ, os.environ.get("TRUSS_FLAG")]
"""


def test_environment_variables_reach_only_the_truss_code(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    root = make_truss(
        tmp_path / "t",
        ENVIRON,
        "environment_variables:\n  TRUSS_TEST_VAR: v1\n  TRUSS_FLAG: true\n",
    )
    inst = build(root, executor)
    asyncio.run(inst.load())
    assert asyncio.run(inst.predict(None, None)) == ["v1", "v1", "v1", "v1", True, "true"]
    # not in the server's own environment, nor in another thread's
    assert os.environ.get("TRUSS_TEST_VAR") is None
    seen: list[Any] = []
    thread = threading.Thread(target=lambda: seen.append(os.getenv("TRUSS_TEST_VAR")))
    thread.start()
    thread.join()
    assert seen == [None]
    other = build(
        make_truss(
            tmp_path / "other",
            ENVIRON.replace("self.at_load = os.environ[", "self.at_load = os.environ.get(").replace(
                '"TRUSS_TEST_VAR"]', '"TRUSS_TEST_VAR")'
            ),
        ),
        executor,
    )
    asyncio.run(other.load())
    assert asyncio.run(other.predict(None, None)) == [None, None, None, None, False, None]


def test_packages_external_dirs_and_siblings_import_as_in_truss(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    shared = tmp_path / "shared" / "sharedlib"
    shared.mkdir(parents=True)
    (shared / "__init__.py").write_text("VALUE = 'shared'\n")
    model = """
    from helpers_pkg.tools import double
    from model.siblings import SUFFIX
    import sharedlib

    class Model:
        def load(self):
            from model import siblings  # imported later, as models do
            self.late = siblings.SUFFIX

        def predict(self, x):
            return [double(x), SUFFIX, sharedlib.VALUE, self.late]
    """
    root = make_truss(
        tmp_path / "t",
        model,
        "external_package_dirs: [../shared]\n",
        {
            "model/__init__.py": "",
            "model/siblings.py": "SUFFIX = 'one'\n",
            "packages/helpers_pkg/__init__.py": "",
            "packages/helpers_pkg/tools.py": "def double(x):\n    return x * 2\n",
        },
    )
    inst = build(root, executor)
    asyncio.run(inst.load())
    assert asyncio.run(inst.predict(2, None)) == [4, "one", "shared", "one"]
    # a second truss whose sibling module has the same name gets its own
    other = make_truss(
        tmp_path / "t2",
        "from model.siblings import SUFFIX\nclass Model:\n    def predict(self, x):\n        return SUFFIX\n",
        files={"model/__init__.py": "", "model/siblings.py": "SUFFIX = 'two'\n"},
    )
    assert asyncio.run(build(other, executor).predict(None, None)) == "two"


STREAMS = """
import asyncio

class Model:
    def __init__(self):
        self.calls = 0

    def predict(self, x):
        if x == "sync":
            return (f"{i}," for i in range(3))
        if x == "async":
            return self._agen()
        if x == "slow":
            return self._slow()
        return {"value": x}

    async def _agen(self):
        for i in range(2):
            yield f"a{i}"

    async def _slow(self):
        yield "first"
        await asyncio.sleep(5)
        yield "never"
"""


async def _items(inst: TrussModel, x: Any) -> list[Any]:
    return [item async for item in inst.predict_stream(x, None)]


def test_predict_streams_by_the_value_it_returns(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    inst = build(
        make_truss(tmp_path / "t", STREAMS, "runtime: {streaming_read_timeout: 1}\n"), executor
    )
    caps = inst.capabilities
    assert caps.returns_streams and not caps.streaming
    assert asyncio.run(_items(inst, "sync")) == ["0,", "1,", "2,"]
    assert asyncio.run(_items(inst, "async")) == ["a0", "a1"]
    assert asyncio.run(_items(inst, 3)) == [Returned({"value": 3})]
    # a non-streaming call gathers a returned stream into one string, as Truss's JSON accept
    assert asyncio.run(inst.predict("sync", None)) == "0,1,2,"
    assert asyncio.run(inst.predict(3, None)) == {"value": 3}


def test_a_stalled_stream_is_cut_after_streaming_read_timeout(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    inst = build(
        make_truss(tmp_path / "t", STREAMS, "runtime: {streaming_read_timeout: 0.2}\n"), executor
    )

    async def run() -> list[Any]:
        got: list[Any] = []
        with pytest.raises(ResponseTimeout) as info:
            async for item in inst.predict_stream("slow", None):
                got.append(item)
        assert "streaming_read_timeout (0.2 s)" in info.value.message
        return got

    assert asyncio.run(run()) == ["first"]


def test_postprocess_applies_to_returned_values_and_refuses_streams(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    model = """
    class Model:
        def preprocess(self, x):
            return x + 1

        def predict(self, x):
            return (i for i in range(x)) if x > 10 else x * 10

        def postprocess(self, y):
            return {"post": y}
    """
    inst = build(make_truss(tmp_path / "t", model), executor)
    assert inst.capabilities.has_preprocess and inst.capabilities.has_postprocess
    assert asyncio.run(_items(inst, 2)) == [Returned({"post": 20})]
    with pytest.raises(ModelError) as info:
        asyncio.run(_items(inst, 20))
    assert "you cannot use postprocessing" in info.value.message


def test_a_model_error_names_model_method_and_exception(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    model = "class Model:\n    def predict(self, x):\n        raise ValueError('boom')\n"
    inst = build(make_truss(tmp_path / "t", model, "model_name: m\n"), executor)
    with pytest.raises(ModelError) as info:
        asyncio.run(inst.predict(1, None))
    assert info.value.message == "model 'm' predict raised ValueError: boom"


PYDANTIC = """
from collections.abc import Generator
from typing import Union
import pydantic

class Item(pydantic.BaseModel):
    name: str
    count: int

class Answer(pydantic.BaseModel):
    total: int

class Model:
    def predict(self, item: Item) -> Union[Answer, Generator[str, None, None]]:
        return Answer(total=item.count)
"""


def test_pydantic_input_is_validated_with_truss_message_and_schema(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    inst = build(make_truss(tmp_path / "t", PYDANTIC), executor)
    caps = inst.capabilities
    assert caps.input_kind is InputKind.SCHEMA
    assert caps.io_schema is not None
    assert caps.io_schema["input_schema"]["title"] == "Item"
    assert caps.io_schema["output_schema"]["title"] == "Answer"
    assert caps.io_schema["supports_streaming"] is True
    assert inst.validate({"name": "a", "count": 2}).count == 2
    with pytest.raises(InvalidInput) as info:
        inst.validate({"name": "a", "count": "many", "extra": 1})
    assert info.value.message.startswith("Input Parsing Error:\n  `count`: ")
    with pytest.raises(InvalidInput) as info:
        inst.validate(b'{"count": "x"}')
    assert info.value.message.startswith("Input Parsing Errors:\n")
    assert "`name`: Field required." in info.value.message


def test_no_schema_without_pydantic_annotations(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    inst = build(make_truss(tmp_path / "t", ECHO), executor)
    assert inst.capabilities.io_schema is None
    assert inst.capabilities.input_kind is InputKind.DEFAULT


def test_is_healthy_endpoints_and_websocket(tmp_path: Path, executor: ThreadPoolExecutor) -> None:
    model = """
    class Model:
        def __init__(self):
            self.healthy = True

        def is_healthy(self):
            return self.healthy

        def predict(self, x):
            return x

        async def chat_completions(self, body):
            if body.get("stream"):
                return self._chunks()
            return {"choices": [{"message": {"content": "hi"}}]}

        async def _chunks(self):
            yield "data: 1\\n\\n"
            yield "data: [DONE]\\n\\n"

        def embeddings(self, body):
            return {"data": [[0.0]]}
    """
    inst = build(make_truss(tmp_path / "t", model), executor)
    caps = inst.capabilities
    assert caps.health_check and caps.endpoints == {"chat_completions", "embeddings"}
    assert not caps.websocket

    async def run() -> None:
        assert await inst.is_healthy() is True
        inst.obj.healthy = False
        assert await inst.is_healthy() is False
        got = [i async for i in inst.endpoint("chat_completions", {}, None)]
        assert got == [Returned({"choices": [{"message": {"content": "hi"}}]})]
        got = [i async for i in inst.endpoint("chat_completions", {"stream": True}, None)]
        assert got == ["data: 1\n\n", "data: [DONE]\n\n"]
        got = [i async for i in inst.endpoint("embeddings", {}, None)]
        assert got == [Returned({"data": [[0.0]]})]

    asyncio.run(run())


def test_a_websocket_model_has_no_predict(tmp_path: Path, executor: ThreadPoolExecutor) -> None:
    model = """
    class Model:
        async def websocket(self, ws):
            await ws.accept()
    """
    inst = build(make_truss(tmp_path / "t", model), executor)
    assert inst.capabilities.websocket and not inst.capabilities.returns_streams
    assert not inst.capabilities.needs_inputs


def test_podium_keys_come_from_podium_yaml_beside_the_config(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = make_truss(
        tmp_path / "t",
        ECHO,
        "runtime: {predict_concurrency: 3}\n",
        {"podium.yaml": "max_queue_size: 7\n"},
    )
    (source,) = discover(root)
    assert source.config.max_queue_size == 7
    assert source.config.predict_concurrency == 3
    (root / "podium.yaml").write_text("max_queue_size: 0\nnot_a_key: 1\n")
    with pytest.raises(DefinitionError) as info:
        discover(root)
    assert "podium.yaml: unknown key 'not_a_key'" in info.value.message
    assert "max_queue_size" in info.value.message
    # a podium: section inside config.yaml is Truss's unknown key (truss push refuses it)
    (root / "podium.yaml").unlink()
    (root / "config.yaml").write_text("podium: {workers: process}\n")
    with caplog.at_level(logging.WARNING, logger="podium.model"):
        (source,) = discover(root)
    assert "key 'podium' is not one Truss knows" in caplog.text
    assert "podium.yaml beside it" in caplog.text
    assert source.config.workers == "thread"


def test_the_config_holds_truss_defaults_as_truss_writes_them(tmp_path: Path) -> None:
    """What Truss 0.18.36's ``TrussConfig.to_dict(verbose=True)`` gives its server for this
    file (checked against the real package by the side-by-side harness)."""
    root = make_truss(
        tmp_path / "t",
        ECHO,
        """
        model_name: cfg
        resources: {accelerator: "A10G:2"}
        runtime: {transport: {kind: websocket}}
        environment_variables: {FLAG: true, N: 3}
        hf_cache: [{repo_id: x}]
        """,
    )
    (source,) = discover(root)
    config = source.config.raw
    assert config["resources"] == {
        "cpu": "1",
        "memory": "2Gi",
        "accelerator": "A10G:2",
        "use_gpu": True,
    }
    assert config["runtime"]["is_websocket_endpoint"] is True
    assert config["runtime"]["transport"] == {
        "kind": "websocket",
        "ping_interval_seconds": None,
        "ping_timeout_seconds": None,
    }
    assert config["runtime"]["remote_ssh"] == {"enabled": False}
    assert config["environment_variables"] == {"FLAG": "true", "N": "3"}
    assert config["model_cache"] == [{"repo_id": "x"}]  # hf_cache, renamed as Truss does
    assert config["bdn"] == {"access": [], "hotload": {"enabled": False}, "mounts": []}
    assert config["python_version"] == "py313"


def test_a_plain_truss_has_nothing_to_note_and_platform_settings_are_named(tmp_path: Path) -> None:
    (source,) = discover(make_truss(tmp_path / "plain", ECHO, "model_name: plain\n"))
    assert truss.notes(source) == []
    root = make_truss(
        tmp_path / "platform", ECHO, "runtime: {health_checks: {restart_threshold_seconds: 30}}\n"
    )
    (source,) = discover(root)
    assert [n for n in truss.notes(source) if "runtime.health_checks" in n]


FLAKY = """
class Model:
    def __init__(self):
        self.attempts = 0

    def load(self):
        self.attempts += 1
        if self.attempts < 2:
            raise RuntimeError("not yet")

    def predict(self, x):
        return self.attempts
"""


def test_a_failed_load_is_tried_again_as_truss_does(
    tmp_path: Path, executor: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("podium.model.truss._model.LOAD_RETRY_GAP", 0.01)
    inst = build(make_truss(tmp_path / "t", FLAKY), executor)
    asyncio.run(inst.load())
    assert asyncio.run(inst.predict(None, None)) == 2  # the second try loaded it
    monkeypatch.setenv("NUM_LOAD_RETRIES_TRUSS", "0")
    again = build(make_truss(tmp_path / "t2", FLAKY), executor)
    with pytest.raises(RuntimeError, match="not yet"):
        asyncio.run(again.load())
