"""TorchServe's model-config.yaml mapped onto ModelConfig: podium.model.torchserve._config."""

from __future__ import annotations

from typing import Any

import pytest

from podium.errors import DefinitionError
from podium.model.torchserve._config import model_config


def config(data: dict[str, Any]) -> Any:
    return model_config(data, name="m", version="1.0", where="model-config.yaml")


def problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(DefinitionError) as info:
        config(data)
    return info.value.problems


def test_frontend_keys_map_onto_podium_keys() -> None:
    cfg = config(
        {
            "minWorkers": 2,
            "maxWorkers": 4,
            "batchSize": 8,
            "maxBatchDelay": 50,
            "responseTimeout": 30,
            "jobQueueSize": 10,
            "deviceType": "cpu",
            "handler": {"anything": [1, 2]},
        }
    )
    assert (cfg.name, cfg.version) == ("m", "1.0")
    assert (cfg.min_workers, cfg.max_workers, cfg.batch_size) == (2, 4, 8)
    assert (cfg.max_batch_delay_ms, cfg.response_timeout_s, cfg.max_queue_size) == (50.0, 30.0, 10)
    assert cfg.devices == "cpu"
    assert cfg.raw["handler"] == {"anything": [1, 2]}  # the whole file, for the handler


def test_defaults_without_a_config() -> None:
    cfg = config({})
    assert cfg.batch_size == 1 and cfg.min_workers == 1 and cfg.response_timeout_s == 120.0
    assert cfg.devices == "auto"  # neither deviceType nor deviceIds: a GPU if there is one


def test_torchserves_own_defaults_where_the_file_is_silent() -> None:
    cfg = config({"batchSize": 8})
    assert cfg.max_batch_delay_ms == 100.0  # TorchServe's, not Podium's 5 ms
    cfg = config({"sequenceBatching": True})
    assert (cfg.max_num_sequences, cfg.max_sequence_queue_size, cfg.sequence_max_idle_ms) == (
        1,
        1,
        0.0,
    )
    cfg = config({"sequenceBatching": True, "batchSize": 4, "maxWorkers": 2})
    assert cfg.max_num_sequences == 8  # max(1, batchSize x maxWorkers), as TorchServe
    cfg = config({"batchSize": 8, "maxBatchDelay": 7, "sequenceBatching": True,
                     "maxNumSequence": 4})  # fmt: skip
    assert (cfg.max_batch_delay_ms, cfg.max_num_sequences) == (7.0, 4)
    cfg = config({"sequenceBatching": True, "batchSize": 4, "podium": {"max_num_sequences": 3}})
    assert cfg.max_num_sequences == 3  # set in the podium section: kept
    cfg = config({})  # not a sequence model: Podium's own sequence defaults stay
    assert cfg.max_num_sequences == 10_000


def test_max_workers_follows_min_workers() -> None:
    cfg = config({"minWorkers": 3})
    assert cfg.max_workers == 3


def test_job_tickets_are_not_supported_yet() -> None:
    for key in ("useJobTicket",):
        (problem,) = problems({key: True})
        assert f"'{key}' is not supported yet" in problem
        assert "continuous batching" in problem


def test_parallel_keys_are_refused() -> None:
    (problem,) = problems({"parallelType": "tp"})
    assert "'parallelType' is not supported" in problem and "torchrun" in problem


def test_unknown_camel_case_keys_are_errors_naming_them() -> None:
    (problem,) = problems({"maxBatchDelayMs": 5})
    assert "unknown TorchServe frontend key 'maxBatchDelayMs'" in problem
    assert "did you mean 'maxBatchDelay'" in problem


def test_custom_sections_and_snake_case_keys_reach_the_handler() -> None:
    cfg = config({"pt2": {"compile": True}, "my_setting": 3, "customSection": {"a": 1}})
    assert cfg.raw["my_setting"] == 3 and cfg.raw["customSection"] == {"a": 1}


def test_bad_values_are_validated_in_model_config() -> None:
    found = problems({"batchSize": 0, "minWorkers": 3, "maxWorkers": 1, "deviceType": "tpu"})
    text = " ".join(found)
    assert "'batch_size' must be an integer >= 1" in text
    assert "'min_workers' (3) must not exceed 'max_workers' (1)" in text
    assert "'deviceType' must be 'cpu' or 'gpu'" in text


def test_not_enforced_keys_are_accepted() -> None:
    cfg = config({"startupTimeout": 60, "maxRetryTimeoutInSec": 10, "useVenv": False})
    assert cfg.batch_size == 1


def test_podium_section_sets_podium_keys() -> None:
    cfg = config({"podium": {"predict_concurrency": 3, "workers": "process"}})
    assert cfg.predict_concurrency == 3 and cfg.workers == "process"
    assert "repeats 'batchSize'" in problems({"batchSize": 2, "podium": {"batch_size": 4}})[0]
    assert "unknown key 'podium.nope'" in problems({"podium": {"nope": 1}})[0]
