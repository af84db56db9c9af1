"""TorchServe's ``model-config.yaml``: its frontend keys mapped onto Podium's ``ModelConfig``.

TorchServe reads the camelCase top-level keys itself (workers, batching, timeouts, devices) and
hands the whole parsed file to the handler as ``context.model_yaml_config``. Podium does the same:
the keys below map onto :class:`podium.config.ModelConfig` (validated there, in one place), a
``podium:`` section may set Podium's own keys (``predict_concurrency``, ``workers``, ...), and
the whole file still reaches the handler.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import re
from typing import Any

from ...config import FIELDS, ModelConfig, Spelling
from ...errors import DefinitionError
from .._source import podium_section

__all__ = ["model_config"]

logger = logging.getLogger("podium.model")

#: TorchServe key → Podium key: the ``torchserve`` column of the field table.
MAPPED = {spec.torchserve: key for key, spec in FIELDS.items() if spec.torchserve}
#: The sequence settings that mean nothing without ``sequenceBatching: true``.
SEQUENCE = {
    "sequenceMaxIdleMSec",
    "sequenceTimeoutMSec",
    "maxSequenceJobQueueSize",
    "maxNumSequence",
}
#: Accepted and validated, but Podium has nothing to do with them (documented in docs/torchserve.md).
NOT_ENFORCED = {"startupTimeout", "maxRetryTimeoutInSec", "clientTimeoutInMills", "useVenv"}
#: Device selection: read as Podium's ``devices`` (:func:`devices_of`), whose assignment fills
#: ``system_properties["gpu_id"]``.
DEVICE = {"deviceType", "deviceIds"}
#: TorchServe's asynchronous worker modes: not supported yet.
CONTINUOUS = {"useJobTicket", "asyncCommunication"}
#: Multi-process model parallelism launched through torchrun: not something Podium launches.
PARALLEL = {"parallelType", "parallelLevel", "torchrun"}
FRONTEND = set(MAPPED) | NOT_ENFORCED | DEVICE | CONTINUOUS | PARALLEL

_CAMEL = re.compile(r"^[a-z]+(?:[A-Z][a-z0-9]*)+$")


def _is_int(value: Any, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


#: TorchServe's defaults where they differ from Podium's (its ModelConfig and ModelManager at
#: 0.12.0), for a TorchServe model whose model-config.yaml does not set them: a batch waits
#: 100 ms for more requests; a sequence model holds max(1, batchSize × maxWorkers) sequences
#: at once, with one request waiting behind the running one, and a sequence never expires for
#: idleness. (docs/torchserve.md)
TORCHSERVE_DEFAULTS: dict[str, Any] = {
    "max_batch_delay": 100,
    "max_num_sequences": 1,
    "max_sequence_queue_size": 1,
    "sequence_max_idle_ms": 0,
}


def model_config(
    yaml_config: dict[str, Any],
    *,
    name: str,
    version: str | None,
    where: str,
) -> ModelConfig:
    """The ``ModelConfig`` of a TorchServe model from its parsed ``model-config.yaml``.

    Raises one ``DefinitionError`` naming every bad key: asynchronous worker modes and
    parallelism keys (not supported), unknown camelCase keys (TorchServe frontend keys Podium
    does not know, usually a typo), and bad values.
    """
    problems: list[str] = []
    data: dict[str, Any] = {"name": name}
    if version is not None:
        data["version"] = version
    for key, value in yaml_config.items():
        if not isinstance(key, str):
            continue
        if key in MAPPED:
            # TorchServe's own check of the value's type, naming its key (Podium's bounds are
            # checked after it, by ModelConfig, naming Podium's)
            try:
                data[MAPPED[key]] = Spelling(key, FIELDS[MAPPED[key]].kind).check(value)
            except ValueError as exc:
                problems.append(f"{where}: {exc}")
        elif key in CONTINUOUS:
            problems.append(
                f"{where}: '{key}' is not supported yet: TorchServe's asynchronous worker "
                "modes are not supported yet (continuous batching is: continuousBatching)"
            )
        elif key in PARALLEL:
            problems.append(
                f"{where}: '{key}' is not supported: Podium does not launch torchrun for "
                "model-parallel handlers (one process serves the model)"
            )
        elif key in NOT_ENFORCED:
            if key != "useVenv" and not _is_int(value, 0):
                problems.append(f"{where}: '{key}' must be an integer, got {value!r}")
            else:
                logger.info("%s: '%s' is accepted but has no effect on Podium", where, key)
        elif key in DEVICE:
            continue
        elif _CAMEL.match(key) and not isinstance(value, dict):
            close = difflib.get_close_matches(key, sorted(FRONTEND), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            problems.append(
                f"{where}: unknown TorchServe frontend key '{key}'{hint}; put settings for "
                "the handler in a section such as 'handler:'"
            )
    refused = {key: f"repeats '{FIELDS[key].torchserve}'; set it once" for key in data}
    for key in ("name", "version"):
        refused[key] = (
            "cannot be set here: the model's name and version come from its MANIFEST.json"
        )
    data.update(podium_section(yaml_config.get("podium"), where, problems, refused))
    sequences_set = "max_num_sequences" in data  # by maxNumSequence or the podium section
    for key, value in TORCHSERVE_DEFAULTS.items():  # TorchServe's, where the file is silent
        if key not in data and (key == "max_batch_delay" or data.get("sequence_batching")):
            data[key] = value
    if data.get("sequence_batching") and not sequences_set:
        # in effect max(1, batchSize × maxWorkers) sequences at once, as TorchServe's backend
        workers = data.get("max_workers", data.get("min_workers", 1))
        if _is_int(workers, 1) and _is_int(data.get("batch_size", 1), 1):
            data["max_num_sequences"] = max(1, int(data.get("batch_size", 1)) * int(workers))
    if (
        data.get("sequence_batching") is True
        and data.get("continuous_batching") is True
        and "predict_concurrency" not in data
    ):
        # A sequence's next request (a cancel, say) runs while its previous one streams: room
        # for a few handle calls at once, as TorchServe's backend takes them.
        data["predict_concurrency"] = max(4, int(data.get("batch_size", 1)) * 2)
    orphans = sorted(k for k in SEQUENCE if k in yaml_config)
    if orphans and data.get("sequence_batching") is not True:
        logger.warning(
            "%s: %s has no effect without 'sequenceBatching: true'", where, ", ".join(orphans)
        )
    device_type = yaml_config.get("deviceType")
    if device_type is not None and device_type not in ("cpu", "gpu"):
        problems.append(f"{where}: 'deviceType' must be 'cpu' or 'gpu', got {device_type!r}")
    ids = yaml_config.get("deviceIds", [])
    if not isinstance(ids, list) or not all(_is_int(i, 0) for i in ids):
        problems.append(f"{where}: 'deviceIds' must be a list of GPU numbers, got {ids!r}")
        ids = []
    devices = devices_of(device_type, ids)
    if devices is not None:
        if "devices" in data:
            problems.append(
                f"{where}: 'podium.devices' repeats 'deviceType'/'deviceIds'; set it once"
            )
        else:
            data["devices"] = devices
    # Each TorchServe worker runs its own handler calls, however many share its GPU (minWorkers
    # on one GPU: that many at once): its predict_concurrency stays per worker (docs/devices.md)
    data.setdefault("predict_concurrency_per", "worker")
    try:
        config = ModelConfig.from_mapping(data, default_name=name, where=where)
    except DefinitionError as exc:
        problems.extend(exc.problems)
    DefinitionError.check(problems)
    # the handler gets the whole file, as TorchServe gives it; ModelConfig.raw holds it too
    return dataclasses.replace(config, raw=dict(yaml_config))


def devices_of(device_type: str | None, ids: list[int]) -> Any:
    """Podium's ``devices`` for TorchServe's ``deviceType`` and ``deviceIds``: ``cpu``; the
    listed GPUs; ``gpu`` (every GPU; none is a load error); None (neither key: ``auto``, a GPU
    when there is one, as TorchServe)."""
    if device_type == "cpu":
        return "cpu"
    if ids:
        return list(ids)
    if device_type == "gpu":
        return "gpu"
    return None
