"""Configuration values: podium.config (ModelConfig, ServerConfig, Secrets, load_yaml)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from podium.config import (
    FIELDS,
    MODEL_KEYS,
    SETTINGS,
    ModelConfig,
    Secrets,
    ServerConfig,
    load_yaml,
)
from podium.errors import DefinitionError, MissingSecret, PodiumError


def build(data: dict[Any, Any]) -> ModelConfig:
    return ModelConfig.from_mapping(data, default_name="m", where="m/config.yaml")


def problems(data: dict[Any, Any]) -> list[str]:
    with pytest.raises(DefinitionError) as info:
        build(data)
    return info.value.problems


# -- load_yaml -----------------------------------------------------------------------------------


def test_load_yaml(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("a: 1\nb: [x, y]\n")
    assert load_yaml(path) == {"a": 1, "b": ["x", "y"]}


def test_load_yaml_empty_file_is_an_empty_mapping(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("# nothing here\n")
    assert load_yaml(path) == {}


@pytest.mark.parametrize(
    ("text", "fragment"),
    [("- 1\n- 2\n", "must be a mapping of keys to values, not list"), ("a: [1\n", "invalid YAML")],
)
def test_load_yaml_errors_name_the_file(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(DefinitionError) as info:
        load_yaml(path)
    assert str(path) in info.value.message and fragment in info.value.message


def test_load_yaml_unreadable(tmp_path: Path) -> None:
    with pytest.raises(DefinitionError, match="cannot be read"):
        load_yaml(tmp_path / "missing.yaml")


# -- ModelConfig ---------------------------------------------------------------------------------


def test_model_config_defaults() -> None:
    config = build({})
    assert config == ModelConfig(name="m")
    assert (config.version, config.model_class_name) == (None, "Model")
    assert (config.predict_concurrency, config.batch_size, config.max_queue_size) == (1, 1, 1000)
    assert (config.max_batch_delay_ms, config.stream_buffer) == (5.0, 16)
    assert config.model_metadata == {} and config.raw == {}


def test_model_keys_are_every_field_but_raw() -> None:
    fields = {f.name for f in dataclasses.fields(ModelConfig) if f.init}
    assert {FIELDS[key].attr for key in MODEL_KEYS} == fields - {"raw"}
    # What is derived from the fields is not set from the file.
    assert {f.name for f in dataclasses.fields(ModelConfig) if not f.init} == {"signature"}


def test_model_config_all_keys() -> None:
    data = {
        "name": "n",
        "version": 2,
        "model_class_name": "C",
        "predict_concurrency": 3,
        "batch_size": 4,
        "max_batch_delay": 10,
        "max_queue_size": 5,
        "max_queue_delay": 50,
        "priority_levels": 3,
        "default_priority": 2,
        "priority_aging": 200,
        "stream_buffer": 6,
        "default_version": 1,
        "model_metadata": {"platform": "x"},
        "workers": "process",
        "min_workers": 2,
        "max_workers": 4,
        "response_timeout": 30,
        "sequence_batching": True,
        "sequence_max_idle_ms": 500,
        "sequence_timeout_ms": 10_000,
        "max_sequence_queue_size": 2,
        "max_num_sequences": 8,
        "continuous_batching": True,
        "metrics_config": "metrics.yaml",
        "ts_metrics": "log",
        "devices": "cpu",
        "workers_per_device": 2,
        "devices_per_worker": 1,
        "predict_concurrency_per": "worker",
        "response_cache": {"ttl_s": 5},
        "ray": {"num_cpus": 2, "max_ongoing_requests": 8},
    }
    assert set(data) == MODEL_KEYS
    config = build(data)
    assert config.name == "n"
    assert config.version == "2"
    assert config.model_class_name == "C"
    assert (config.predict_concurrency, config.batch_size) == (3, 4)
    assert config.max_batch_delay_ms == 10.0 and isinstance(config.max_batch_delay_ms, float)
    assert (config.max_queue_size, config.stream_buffer) == (5, 6)
    assert (config.max_queue_delay_ms, config.priority_aging_ms) == (50.0, 200.0)
    assert (config.priority_levels, config.default_priority) == (3, 2)
    assert config.model_metadata == {"platform": "x"}
    assert config.default_version == "1"
    assert (config.workers, config.min_workers, config.max_workers) == ("process", 2, 4)
    assert config.response_timeout_s == 30.0 and isinstance(config.response_timeout_s, float)
    assert config.sequence_batching is True
    assert (config.sequence_max_idle_ms, config.sequence_timeout_ms) == (500.0, 10_000.0)
    assert (config.max_sequence_queue_size, config.max_num_sequences) == (2, 8)
    assert config.continuous_batching is True
    assert config.predict_concurrency_per == "worker"
    assert config.ray == {"num_cpus": 2, "max_ongoing_requests": 8}
    assert config.raw == data and config.raw is not data


def test_default_priority_is_one_of_the_levels() -> None:
    with pytest.raises(
        DefinitionError,
        match="'default_priority' \\(3\\) must not exceed 'priority_levels' \\(2\\)",
    ):
        build({"priority_levels": 2, "default_priority": 3})
    assert build({"priority_levels": 4, "default_priority": 4}).default_priority == 4


def test_model_config_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        build({}).batch_size = 3  # type: ignore[misc]


def test_version_null_means_unversioned() -> None:
    assert build({"version": None}).version is None
    assert build({"version": "1.2.0"}).version == "1.2.0"
    assert build({"max_batch_delay": 0}).max_batch_delay_ms == 0.0
    assert build({"model_metadata": None}).model_metadata == {}


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("name", "", "'name' must be a non-empty string"),
        ("name", 5, "'name' must be a non-empty string"),
        ("name", "a/b", "'name' must not contain '/'"),
        ("version", True, "'version' must be a non-empty string or an integer"),
        ("version", 1.5, "'version' must be a non-empty string or an integer"),
        ("version", "1/2", "'version' must be a non-empty string or an integer"),
        ("version", "", "'version' must be a non-empty string or an integer"),
        ("version", " ", "'version' must be a non-empty string or an integer"),
        ("model_class_name", "", "'model_class_name' must be a non-empty string"),
        ("model_class_name", 3, "'model_class_name' must be a non-empty string"),
        ("predict_concurrency", 0, "'predict_concurrency' must be an integer >= 1, got 0"),
        ("predict_concurrency", True, "'predict_concurrency' must be an integer >= 1, got True"),
        ("batch_size", 2.0, "'batch_size' must be an integer >= 1, got 2.0"),
        ("max_queue_size", "10", "'max_queue_size' must be an integer >= 1, got '10'"),
        ("stream_buffer", -1, "'stream_buffer' must be an integer >= 1, got -1"),
        ("max_batch_delay", -0.5, "'max_batch_delay' must be a number of milliseconds >= 0"),
        ("max_batch_delay", "5ms", "'max_batch_delay' must be a number of milliseconds >= 0"),
        ("max_batch_delay", False, "'max_batch_delay' must be a number of milliseconds >= 0"),
        ("model_metadata", [1], "'model_metadata' must be a mapping"),
    ],
)
def test_wrong_types_name_the_key(key: str, value: Any, fragment: str) -> None:
    [problem] = problems({key: value})
    assert problem.startswith("m/config.yaml: ")
    assert fragment in problem


def test_unknown_keys_name_the_key_and_the_allowed_ones() -> None:
    found = problems({"batch": 2, "colour": "red"})
    assert len(found) == 2
    assert "unknown key 'batch'" in found[0]
    assert "unknown key 'colour'" in found[1]
    assert all("batch_size" in p and "predict_concurrency" in p for p in found)


def test_non_string_keys_are_reported_not_crashed_on() -> None:
    found = problems({1: "one", "zeta": 2, 2.5: 3})
    assert any("unknown key '1'" in p for p in found)
    assert any("unknown key 'zeta'" in p for p in found)
    assert any("unknown key '2.5'" in p for p in found)


def test_every_problem_at_once() -> None:
    found = problems({"batch_size": 0, "stream_buffer": 0, "typo": 1, "name": ""})
    assert len(found) == 4
    with pytest.raises(DefinitionError) as info:
        build({"batch_size": 0, "stream_buffer": 0})
    assert info.value.message == "; ".join(info.value.problems)


# -- ServerConfig --------------------------------------------------------------------------------

PORTS = ["http_port", "management_port", "metrics_port", "grpc_port", "grpc_management_port"]


def test_server_config_defaults() -> None:
    config = ServerConfig()
    assert (config.listeners.host, config.listeners.http_port) == ("0.0.0.0", 8080)
    assert (config.listeners.management_host, config.listeners.management_port) == (
        "127.0.0.1",
        8081,
    )
    assert (config.listeners.metrics_host, config.listeners.metrics_port) == ("127.0.0.1", 8082)
    assert (config.listeners.grpc_port, config.listeners.grpc_management_port) == (7070, 7071)
    assert config.protocols.max_request_size == 64 * 1024 * 1024
    assert config.serving.threads == 64


def test_registration_limits_default_and_are_checked() -> None:
    config = ServerConfig()
    assert config.registration.download_timeout == 300.0
    assert (config.registration.max_archive_size, config.registration.max_archive_ratio) == (
        4 << 30,
        100.0,
    )
    assert config.registration.allow_any_local_path is False
    given = ServerConfig(download_timeout=5, max_archive_ratio=20, allow_any_local_path=True)
    assert (given.registration.download_timeout, given.registration.max_archive_ratio) == (
        5.0,
        20.0,
    )
    assert given.registration.allow_any_local_path is True
    for key, value, fragment in (
        ("download_timeout", 0, "download-timeout must be a number of seconds > 0"),
        ("download_timeout", "5", "download-timeout must be a number of seconds > 0"),
        ("download_timeout", float("nan"), "download-timeout must be a number of seconds > 0"),
        ("max_archive_size", 0, "max-archive-size must be an integer >= 1"),
        ("max_archive_size", 1.5, "max-archive-size must be an integer >= 1"),
        ("max_archive_ratio", 0.5, "max-archive-ratio must be a number >= 1"),
        ("max_archive_ratio", True, "max-archive-ratio must be a number >= 1"),
        ("allow_any_local_path", "yes", "allow-any-local-path must be true or false"),
    ):
        with pytest.raises(ValueError, match=fragment):
            ServerConfig(**{key: value})


def test_shared_memory_is_off_by_default_and_checked() -> None:
    config = ServerConfig()
    assert (config.shared_memory.mode, config.shared_memory.key_prefix) == ("off", "")
    assert (config.shared_memory.max_regions, config.shared_memory.max_size) == (64, 16 << 30)
    on = ServerConfig(shared_memory="system", shm_key_prefix="/job-", max_shm_regions=2)
    assert (on.shared_memory.mode, on.shared_memory.key_prefix, on.shared_memory.max_regions) == (
        "system",
        "/job-",
        2,
    )
    for key, value, fragment in (
        ("shared_memory", "cuda", "shared-memory must be 'off' or 'system'"),
        ("shm_key_prefix", "a/b", "shm-key-prefix must be the start of an object name"),
        ("shm_key_prefix", 3, "shm-key-prefix must be a string"),
        ("max_shm_regions", 0, "max-shm-regions must be an integer >= 1"),
        ("max_shm_size", 0, "max-shm-size must be an integer >= 1"),
    ):
        with pytest.raises(ValueError, match=fragment):
            ServerConfig(**{key: value})


@pytest.mark.parametrize("key", PORTS)
@pytest.mark.parametrize("port", [0, 1, 65535])
def test_valid_ports(key: str, port: int) -> None:
    assert getattr(ServerConfig(**{key: port}).listeners, key) == port


@pytest.mark.parametrize("key", PORTS)
@pytest.mark.parametrize("port", [-1, 65536, True, "8080", 80.0, None])
def test_invalid_ports_name_the_flag(key: str, port: Any) -> None:
    with pytest.raises(ValueError) as info:
        ServerConfig(**{key: port})
    message = str(info.value)
    assert key.replace("_", "-") in message
    assert "0-65535" in message and repr(port) in message


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("max_request_size", 0, "max-request-size must be an integer >= 1"),
        ("max_request_size", "big", "max-request-size must be an integer >= 1"),
        ("max_request_size", True, "max-request-size must be an integer >= 1"),
        ("threads", 0, "threads must be an integer >= 1"),
        ("threads", "4", "threads must be an integer >= 1"),
        ("threads", 2.5, "threads must be an integer >= 1"),
    ],
)
def test_invalid_settings_raise_value_error(key: str, value: Any, fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        ServerConfig(**{key: value})
    assert fragment in str(info.value)
    assert repr(value) in str(info.value)


def test_server_config_accepts_granian_and_keys() -> None:
    assert ServerConfig(threads=1, max_request_size=1).serving.threads == 1
    assert {"host", "http_port", "secrets_dir", "threads", "models"} <= SETTINGS.keys()
    # each group holds its settings, by their attributes, and nothing else but GrpcLimits' own
    config = ServerConfig()
    for field in dataclasses.fields(ServerConfig):
        group = getattr(config, field.name)
        attrs = {s.attr for s in SETTINGS.values() if s.group.value == field.name}
        own = {f.name for f in dataclasses.fields(group)} - attrs
        assert own == (
            {"max_connections", "handshake_timeout", "max_ping_strikes", "max_metadata_size"}
            if field.name == "grpc"
            else set()
        ), field.name


# -- Secrets -------------------------------------------------------------------------------------


def test_secret_from_the_environment() -> None:
    secrets = Secrets(environ={"PODIUM_SECRET_HF_TOKEN": "abc"})
    assert secrets["hf_token"] == "abc"
    assert secrets["HF_TOKEN"] == "abc"
    assert secrets["hf-token"] == "abc"  # not a letter or digit: '_'
    assert Secrets.env_name("api.key-2") == "PODIUM_SECRET_API_KEY_2"


def test_empty_environment_value_is_a_value() -> None:
    assert Secrets(environ={"PODIUM_SECRET_X": ""})["x"] == ""


def test_secret_from_a_file_in_the_directory(tmp_path: Path) -> None:
    (tmp_path / "db_password").write_text("hunter2\n")
    secrets = Secrets(tmp_path, environ={})
    assert secrets["db_password"] == "hunter2"
    (tmp_path / "db_password").write_text("rotated")
    assert secrets["db_password"] == "rotated"  # read on access


def test_environment_wins_over_the_file(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("from-file")
    assert Secrets(tmp_path, environ={"PODIUM_SECRET_TOKEN": "from-env"})["token"] == "from-env"


def test_missing_secret_names_the_secret_and_the_env_var(tmp_path: Path) -> None:
    secrets = Secrets(tmp_path, environ={})
    with pytest.raises(MissingSecret) as info:
        secrets["openai-key"]
    exc = info.value
    assert isinstance(exc, KeyError) and isinstance(exc, PodiumError)
    assert "'openai-key'" in exc.message
    assert "PODIUM_SECRET_OPENAI_KEY" in exc.message
    assert str(tmp_path) in exc.message
    assert str(exc) == exc.message
    with pytest.raises(KeyError):
        Secrets(environ={})["x"]


def test_missing_secret_without_directory() -> None:
    with pytest.raises(MissingSecret) as info:
        Secrets(environ={})["x"]
    assert "PODIUM_SECRET_X" in info.value.message
    assert " or a file" not in info.value.message


def test_mapping_behaviour(tmp_path: Path) -> None:
    (tmp_path / "file_secret").write_text("f")
    (tmp_path / "subdir").mkdir()
    secrets = Secrets(tmp_path, environ={"PODIUM_SECRET_ENV_SECRET": "e", "OTHER": "o"})
    assert isinstance(secrets, Mapping)
    assert list(secrets) == ["env_secret", "file_secret"]
    assert len(secrets) == 2
    assert "env_secret" in secrets and "file_secret" in secrets
    assert "subdir" not in secrets and "other" not in secrets
    assert secrets.get("nope", "default") == "default"
    assert dict(secrets) == {"env_secret": "e", "file_secret": "f"}


def test_secrets_are_read_only() -> None:
    secrets = Secrets(environ={})
    with pytest.raises(TypeError):
        secrets["x"] = "y"  # type: ignore[index]
    assert not hasattr(secrets, "update") and not hasattr(secrets, "pop")


def test_secret_names_cannot_leave_the_directory(tmp_path: Path) -> None:
    inside = tmp_path / "secrets"
    inside.mkdir()
    (tmp_path / "outside").write_text("private")
    secrets = Secrets(inside, environ={})
    for name in ("../outside", ".", "..", ""):
        with pytest.raises(MissingSecret):
            secrets[name]


def test_secrets_read_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PODIUM_SECRET_FROM_OS", "yes")
    assert Secrets()["from_os"] == "yes"


def test_server_config_log_level_is_checked() -> None:
    with pytest.raises(ValueError, match="log-level must be 'debug', 'info', 'warning' or 'error'"):
        ServerConfig(log_level="loud")


def test_worker_settings() -> None:
    assert (build({}).min_workers, build({}).max_workers, build({}).workers) == (1, 1, "thread")
    assert build({"min_workers": 3}).max_workers == 3  # max defaults to min
    assert build({"min_workers": 0}).max_workers == 1
    assert build({"response_timeout": 0}).response_timeout_s == 0.0
    with pytest.raises(
        DefinitionError, match="'min_workers' \\(3\\) must not exceed 'max_workers' \\(2\\)"
    ):
        build({"min_workers": 3, "max_workers": 2})
    with pytest.raises(DefinitionError, match="'workers' must be 'thread' or 'process', got 'gpu'"):
        build({"workers": "gpu"})
    with pytest.raises(DefinitionError, match="'max_workers' must be an integer >= 1"):
        build({"max_workers": 0})
    with pytest.raises(DefinitionError, match="'response_timeout' must be a number of seconds"):
        build({"response_timeout": -1})


def test_a_config_files_paths_are_relative_to_it_for_every_reader(tmp_path: Path) -> None:
    from podium.config import read_config_file

    folder = tmp_path / "conf"
    folder.mkdir()
    file = folder / "podium.yaml"
    file.write_text("models: echo\nsecrets-dir: secrets\nthreads: 2\ntriton: true\n")
    data = read_config_file(file)
    assert data["models"] == (str(folder / "echo"),)
    assert data["secrets_dir"] == folder / "secrets"
    assert (data["threads"], data["triton"]) == (2, True)
    file.write_text("colour: red\n")
    with pytest.raises(DefinitionError, match=r"unknown key\(s\) colour \(allowed: "):
        read_config_file(file)
    file.write_text("models: {a: 1}\n")
    with pytest.raises(DefinitionError, match="'models' must be a list of paths"):
        read_config_file(file)
