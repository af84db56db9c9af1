"""The field table (podium.config.FIELDS) that drives the three model-config validators.

Each test states what users are promised (the documented defaults, bounds and units, and the key
each format accepts) independently of the table, and checks it through the validators, so that a
wrong row fails here.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest

from podium.config import (
    FIELDS,
    MODEL_KEYS,
    UNSET,
    Kind,
    ModelConfig,
    ResponseCacheSettings,
    Unit,
)
from podium.errors import DefinitionError
from podium.model.mlserver._settings import read_settings
from podium.model.torchserve._config import MAPPED, SEQUENCE, model_config

DOCS = Path(__file__).resolve().parents[1] / "docs"

#: The documented defaults (README, docs/*.md).
DEFAULTS: dict[str, Any] = {
    "version": None,
    "model_class_name": "Model",
    "predict_concurrency": 1,
    "batch_size": 1,
    "max_batch_delay": 5.0,
    "max_queue_size": 1000,
    "max_queue_delay": 0.0,
    "priority_levels": 1,
    "default_priority": 1,
    "priority_aging": 1000.0,
    "stream_buffer": 16,
    "default_version": None,
    "workers": "thread",
    "min_workers": 1,
    "max_workers": 1,
    "response_timeout": 120.0,
    "sequence_batching": False,
    "sequence_max_idle_ms": 60_000.0,
    "sequence_timeout_ms": 0.0,
    "max_sequence_queue_size": 16,
    "max_num_sequences": 10_000,
    "continuous_batching": False,
    "metrics_config": None,
    "ts_metrics": "off",
    "devices": "auto",
    "workers_per_device": 0,
    "devices_per_worker": 1,
    "predict_concurrency_per": "device",
    "response_cache": None,
    "model_metadata": {},
    "ray": {},
}

#: The lower bound of every numeric key: (bound, "integer" or the unit of a number).
BOUNDS: dict[str, tuple[int, str]] = {
    "predict_concurrency": (1, "integer"),
    "batch_size": (1, "integer"),
    "max_batch_delay": (0, "milliseconds"),
    "max_queue_size": (1, "integer"),
    "max_queue_delay": (0, "milliseconds"),
    "priority_levels": (1, "integer"),
    "default_priority": (1, "integer"),
    "priority_aging": (1, "milliseconds"),
    "stream_buffer": (1, "integer"),
    "min_workers": (0, "integer"),
    "max_workers": (1, "integer"),
    "response_timeout": (0, "seconds"),
    "sequence_max_idle_ms": (0, "milliseconds"),
    "sequence_timeout_ms": (0, "milliseconds"),
    "max_sequence_queue_size": (1, "integer"),
    "max_num_sequences": (0, "integer"),
    "workers_per_device": (0, "integer"),
    "devices_per_worker": (1, "integer"),
}

#: A valid value of every key other than its default, and what the attribute then holds.
SAMPLES: dict[str, tuple[Any, Any]] = {
    "name": ("other", "other"),
    "version": (7, "7"),
    "model_class_name": ("Classifier", "Classifier"),
    "predict_concurrency": (3, 3),
    "batch_size": (4, 4),
    "max_batch_delay": (7, 7.0),
    "max_queue_size": (9, 9),
    "max_queue_delay": (250, 250.0),
    "priority_levels": (3, 3),
    "default_priority": (1, 1),
    "priority_aging": (500, 500.0),
    "stream_buffer": (4, 4),
    "default_version": ("2", "2"),
    "workers": ("process", "process"),
    "min_workers": (2, 2),
    "max_workers": (3, 3),
    "response_timeout": (30, 30.0),
    "sequence_batching": (True, True),
    "sequence_max_idle_ms": (250, 250.0),
    "sequence_timeout_ms": (1000, 1000.0),
    "max_sequence_queue_size": (3, 3),
    "max_num_sequences": (8, 8),
    "continuous_batching": (True, True),
    "metrics_config": ("metrics.yaml", Path("metrics.yaml")),
    "ts_metrics": ("prometheus", "prometheus"),
    "devices": ([1, 0], (1, 0)),
    "workers_per_device": (2, 2),
    "devices_per_worker": (2, 2),
    "predict_concurrency_per": ("worker", "worker"),
    "response_cache": ({"max_bytes": 2048}, ResponseCacheSettings(max_bytes=2048)),
    "model_metadata": ({"platform": "onnx"}, {"platform": "onnx"}),
    "ray": ({"num_cpus": 2}, {"num_cpus": 2}),
}

#: TorchServe's model-config.yaml keys (docs/torchserve.md), in the same units as Podium's.
TORCHSERVE: dict[str, str] = {
    "minWorkers": "min_workers",
    "maxWorkers": "max_workers",
    "batchSize": "batch_size",
    "maxBatchDelay": "max_batch_delay",
    "responseTimeout": "response_timeout",
    "jobQueueSize": "max_queue_size",
    "sequenceBatching": "sequence_batching",
    "sequenceMaxIdleMSec": "sequence_max_idle_ms",
    "sequenceTimeoutMSec": "sequence_timeout_ms",
    "maxSequenceJobQueueSize": "max_sequence_queue_size",
    "maxNumSequence": "max_num_sequences",
    "continuousBatching": "continuous_batching",
}

#: The Podium keys MLServer's model-settings.json sets through its own keys (docs/mlserver.md).
MLSERVER: dict[str, str] = {
    "name": "name",
    "version": "parameters.version",
    "batch_size": "max_batch_size",
    "max_batch_delay": "max_batch_time",
    "workers": "parallel_workers",
    "min_workers": "parallel_workers",
    "max_workers": "parallel_workers",
}


def attr(config: ModelConfig, key: str) -> Any:
    return getattr(config, FIELDS[key].attr)


def build(data: dict[str, Any]) -> ModelConfig:
    return ModelConfig.from_mapping(data, default_name="m", where="config.yaml")


def problems(call: Any, *args: Any) -> list[str]:
    with pytest.raises(DefinitionError) as info:
        call(*args)
    return info.value.problems


def ts(data: dict[str, Any]) -> ModelConfig:
    return model_config(data, name="m", version="1", where="model-config.yaml")


def mls(tmp_path: Path, settings: dict[str, Any]) -> ModelConfig:
    path = tmp_path / "model-settings.json"
    path.write_text(json.dumps({"implementation": "models.Runtime", **settings}))
    return read_settings(path).config


# -- the table itself ----------------------------------------------------------------------------


def test_one_row_per_model_config_attribute() -> None:
    attrs = [spec.attr for spec in FIELDS.values()]
    # raw is the file itself; signature is derived from model_metadata
    fields = [f.name for f in dataclasses.fields(ModelConfig) if f.init and f.name != "raw"]
    assert attrs == fields  # the same order, so that the two read side by side
    assert set(FIELDS) == MODEL_KEYS == set(SAMPLES)
    assert all(key == spec.key for key, spec in FIELDS.items())


def test_each_row_default_is_the_model_configs_and_the_documented_one() -> None:
    config = ModelConfig(name="m")
    for key, expected in DEFAULTS.items():
        assert FIELDS[key].default == expected, key
        assert attr(config, key) == expected, key
        assert attr(build({}), key) == expected, key
        assert type(attr(config, key)) is type(expected), key
    assert build({}).name == "m"  # the name's default is the caller's: the folder's name


def test_numbers_name_their_unit_and_integers_have_none() -> None:
    for key, spec in FIELDS.items():
        if spec.kind is Kind.NUMBER:
            assert spec.unit is not None and BOUNDS[key][1] == spec.unit.words, key
        else:
            assert spec.unit is None, key


def test_attributes_name_their_unit_where_the_config_mixes_them() -> None:
    # config.yaml's keys stay as users write them; the attributes say ms or s.
    suffix = {Unit.MILLISECONDS: "_ms", Unit.SECONDS: "_s"}
    for key, spec in FIELDS.items():
        if spec.unit is not None:
            assert spec.attr.endswith(suffix[spec.unit]), key
    assert {k: s.attr for k, s in FIELDS.items() if s.attr != k} == {
        "max_batch_delay": "max_batch_delay_ms",
        "max_queue_delay": "max_queue_delay_ms",
        "priority_aging": "priority_aging_ms",
        "response_timeout": "response_timeout_s",
    }


def test_units_convert() -> None:
    assert Unit.SECONDS.to(Unit.MILLISECONDS) == 1000.0
    assert Unit.MILLISECONDS.to(Unit.SECONDS) == 0.001
    assert Unit.MILLISECONDS.to(Unit.MILLISECONDS) == 1.0


def test_a_table_row_is_checked_when_it_is_written() -> None:
    with pytest.raises(ValueError, match="a number needs its unit"):
        dataclasses.replace(FIELDS["max_batch_delay"], unit=None)
    assert UNSET is UNSET and repr(UNSET) == "UNSET"


# -- config.yaml ---------------------------------------------------------------------------------


@pytest.mark.parametrize("key", sorted(SAMPLES))
def test_config_yaml_accepts_each_key(key: str) -> None:
    given, expected = SAMPLES[key]
    value = attr(build({key: given}), key)
    assert value == expected and type(value) is type(expected)


@pytest.mark.parametrize("key", sorted(BOUNDS))
def test_config_yaml_bounds(key: str) -> None:
    bound, what = BOUNDS[key]
    assert attr(build({key: bound}), key) == bound
    [problem] = problems(build, {key: bound - 1})
    if what == "integer":
        assert f"'{key}' must be an integer >= {bound}, got {bound - 1}" in problem
        [problem] = problems(build, {key: bound + 0.5})
        assert f"'{key}' must be an integer >= {bound}" in problem
    else:
        assert f"'{key}' must be a number of {what} >= {bound}, got {bound - 1}" in problem
        assert attr(build({key: bound + 0.5}), key) == bound + 0.5
    assert problem.startswith("config.yaml: ")


def test_keys_without_bounds_are_checked_by_kind() -> None:
    unbounded = {k for k, s in FIELDS.items() if s.kind not in (Kind.INTEGER, Kind.NUMBER)}
    assert unbounded == set(SAMPLES) - set(BOUNDS)
    for key in unbounded:
        wrong = [True] if key == "devices" else [1]  # [1] is GPU 1
        [problem] = problems(build, {key: wrong})
        assert f"'{key}' must be" in problem, key


@pytest.mark.parametrize(
    ("given", "held"),
    [
        ("auto", "auto"),
        ("CPU", "cpu"),
        ("gpu", "gpu"),
        ("cuda", "gpu"),
        (2, (2,)),
        ([0, 3], (0, 3)),
        ("1,2", (1, 2)),
    ],
)
def test_devices_spellings(given: Any, held: Any) -> None:
    assert build({"devices": given}).devices == held


@pytest.mark.parametrize("given", ["tpu", [], [-1], [0, 0], [0.5], "0,x", True, list(range(300))])
def test_devices_refused(given: Any) -> None:
    [problem] = problems(build, {"devices": given})
    assert "'devices'" in problem
    assert len(problem) < 300  # a long list is not echoed whole


# -- TorchServe's model-config.yaml --------------------------------------------------------------


def test_torchserve_maps_exactly_the_documented_keys() -> None:
    assert MAPPED == TORCHSERVE
    assert {s.torchserve for s in FIELDS.values() if s.torchserve} == set(TORCHSERVE)
    assert SEQUENCE < set(TORCHSERVE)


@pytest.mark.parametrize("ts_key", sorted(TORCHSERVE))
def test_torchserve_accepts_each_key_in_podiums_unit(ts_key: str) -> None:
    key = TORCHSERVE[ts_key]
    given, expected = SAMPLES[key]
    assert attr(ts({ts_key: given}), key) == expected
    # Podium's bound applies, naming Podium's key; TorchServe's own check names TorchServe's.
    if key in BOUNDS and BOUNDS[key][0] > 0:
        (problem,) = problems(ts, {ts_key: 0})
        assert f"'{key}' must be" in problem
    (problem,) = problems(ts, {ts_key: "x"})
    assert f"'{ts_key}' must be" in problem


@pytest.mark.parametrize("key", sorted(SAMPLES))
def test_torchserves_podium_section_takes_every_other_key(key: str) -> None:
    given, expected = SAMPLES[key]
    ts_key = FIELDS[key].torchserve
    if key in ("name", "version"):
        (problem,) = problems(ts, {"podium": {key: given}})
        assert "MANIFEST.json" in problem
    elif ts_key is not None:
        (problem,) = problems(ts, {ts_key: given, "podium": {key: given}})
        assert f"'podium.{key}' repeats '{ts_key}'" in problem
    else:
        assert attr(ts({"podium": {key: given}}), key) == expected


def test_docs_torchserve_table_pairs_each_key_with_its_podium_key_and_unit() -> None:
    text = (DOCS / "torchserve.md").read_text(encoding="utf-8")
    leading = re.compile(r"^\s*((?:`[^`]+`(?:, )?)+)")
    pairs: dict[str, tuple[str, str]] = {}
    for line in text.splitlines():
        cells = line.split("|")
        if len(cells) < 4 or not leading.match(cells[1]):
            continue
        first, second = leading.match(cells[1]), leading.match(cells[2])
        if first is None or second is None:
            continue
        ts_keys = re.findall(r"`([^`]+)`", first.group(1))
        keys = re.findall(r"`([^`]+)`", second.group(1))
        if len(ts_keys) == len(keys):
            pairs.update((t, (k, cells[1])) for t, k in zip(ts_keys, keys, strict=True))
    for ts_key, key in TORCHSERVE.items():
        assert pairs[ts_key][0] == key, ts_key
        unit = FIELDS[key].unit
        if unit is not None:
            assert {Unit.MILLISECONDS: "(ms)", Unit.SECONDS: "(s)"}[unit] in pairs[ts_key][1]


# -- MLServer's model-settings.json --------------------------------------------------------------


def test_mlserver_spells_exactly_the_documented_keys() -> None:
    spelled = {k: s.mlserver.key for k, s in FIELDS.items() if s.mlserver and s.mlserver.key}
    assert spelled == MLSERVER


def test_mlserver_keys_map_onto_podiums(tmp_path: Path) -> None:
    config = mls(
        tmp_path,
        {
            "name": "other",
            "parameters": {"version": 7},
            "max_batch_size": 4,
            "max_batch_time": 0.5,  # seconds
            "parallel_workers": 3,
        },
    )
    assert (config.name, config.version, config.batch_size) == ("other", "7", 4)
    assert attr(config, "max_batch_delay") == 500.0  # milliseconds
    assert (config.workers, config.min_workers, config.max_workers) == ("process", 3, 3)
    assert mls(tmp_path, {"parallel_workers": 0}).workers == "thread"
    # MLServer's optional keys: null is as if absent
    assert mls(tmp_path, {"parallel_workers": None}).workers == "thread"
    assert mls(tmp_path, {"parameters": {"version": None}}).version is None


def test_mlservers_own_defaults(tmp_path: Path) -> None:
    config = mls(tmp_path, {})
    assert config.predict_concurrency == 64  # MLServer awaits every predict at once
    assert config.batch_size == 1 and attr(config, "max_batch_delay") == 5.0
    assert (config.workers, config.min_workers, config.max_workers) == ("thread", 1, 1)
    assert config.name == tmp_path.name and config.version is None


@pytest.mark.parametrize(
    ("key", "bad", "message"),
    [
        ("max_batch_size", -1, "'max_batch_size' must be an integer >= 0, got -1"),
        ("max_batch_size", None, "'max_batch_size' must be an integer >= 0, got None"),
        ("max_batch_time", -0.5, "'max_batch_time' must be a number of seconds >= 0, got -0.5"),
        ("parallel_workers", -1, "'parallel_workers' must be an integer >= 0, got -1"),
    ],
)
def test_mlserver_bounds(tmp_path: Path, key: str, bad: Any, message: str) -> None:
    assert mls(tmp_path, {key: 0}) is not None
    (problem,) = problems(mls, tmp_path, {key: bad})  # one problem, even for parallel_workers
    assert message in problem


@pytest.mark.parametrize("key", sorted(SAMPLES))
def test_mlservers_podium_section_takes_every_other_key(tmp_path: Path, key: str) -> None:
    given, expected = SAMPLES[key]
    if key in MLSERVER:
        (problem,) = problems(mls, tmp_path, {"podium": {key: given}})
        assert f"'podium.{key}' cannot be set here; use '{MLSERVER[key]}'" in problem
    elif key in ("model_class_name", "default_version"):
        (problem,) = problems(mls, tmp_path, {"podium": {key: given}})
        assert f"unknown key 'podium.{key}'" in problem
    else:
        assert attr(mls(tmp_path, {"podium": {key: given}}), key) == expected
