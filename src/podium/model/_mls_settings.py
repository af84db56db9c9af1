"""``model-settings.json`` → Podium's ``ModelConfig`` and the runtime's own ``ModelSettings``.

Every key MLServer defines is accepted or refused with an error naming the key and the file:

- ``name`` → ``name`` (default: the folder's name); ``parameters.version`` → ``version``;
- ``implementation`` (required): ``module.Class``, imported with the folder first on ``sys.path``;
- ``max_batch_size`` > 1 with ``max_batch_time`` > 0 → ``batch_size`` and ``max_batch_delay``
  (seconds → milliseconds); otherwise no batching, as in MLServer;
- ``parallel_workers``: N ≥ 1 → ``workers: process`` with N workers; 0 → ``workers: thread``;
- ``platform``, ``inputs``, ``outputs``, ``parameters.content_type`` → the model's metadata;
- ``parameters.uri`` (default: the folder), ``format``, ``extra`` and any other parameter reach
  the runtime in ``settings.parameters``; ``versions``, ``warm_workers``, ``cache_enabled``,
  ``parameters.inference_pool_gid`` / ``autogenerate_inference_pool_gid`` are accepted and have
  no effect;
- ``parameters.environment_path`` / ``environment_tarball`` are refused: Podium runs every model
  in its own Python environment;
- ``podium``: Podium's own ``config.yaml`` keys for this model (``predict_concurrency``,
  ``max_queue_size``, ...); unknown top-level keys are an error (MLServer ignores them).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import ModuleType
from typing import Any

from ..config import MODEL_KEYS, ModelConfig
from ..errors import DefinitionError
from ._source import Contract, MLServerParts, ModelSource

__all__ = ["DEFAULT_PREDICT_CONCURRENCY", "SETTINGS_FILE", "read_settings", "runtime_settings"]

logger = logging.getLogger("podium.model")

SETTINGS_FILE = "model-settings.json"

#: MLServer awaits every request's predict at once; Podium bounds it, generously by default.
DEFAULT_PREDICT_CONCURRENCY = 64

_KEYS = frozenset(
    {
        "name",
        "implementation",
        "parameters",
        "max_batch_size",
        "max_batch_time",
        "parallel_workers",
        "warm_workers",
        "platform",
        "versions",
        "inputs",
        "outputs",
        "cache_enabled",
        "podium",
    }
)
_REFUSED_PARAMETERS = {
    "environment_path": "Podium runs every model in its own Python environment; install the "
    "runtime's requirements there",
    "environment_tarball": "Podium runs every model in its own Python environment; install the "
    "runtime's requirements there",
}
# Podium keys that model-settings.json sets through MLServer's own keys.
_MAPPED = {
    "name": "name",
    "version": "parameters.version",
    "batch_size": "max_batch_size",
    "max_batch_delay": "max_batch_time",
    "workers": "parallel_workers",
    "min_workers": "parallel_workers",
    "max_workers": "parallel_workers",
}


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise DefinitionError(f"{path}: cannot be read: {exc.strerror}") from exc
    except ValueError as exc:
        raise DefinitionError(f"{path}: invalid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise DefinitionError(f"{path}: must be a JSON object, not {type(data).__name__}")
    return data


def _module_file(folder: Path, implementation: str) -> Path | None:
    module = implementation.rpartition(".")[0]
    base = folder.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def read_settings(path: Path) -> ModelSource:
    """The model version a ``model-settings.json`` describes; ``DefinitionError`` listing every
    problem, each naming the key and the file."""
    where = str(path)
    data = _read_json(path)
    problems: list[str] = []
    for key in sorted(set(data) - _KEYS):
        problems.append(f"{where}: unknown key '{key}' (allowed: {', '.join(sorted(_KEYS))})")
    implementation = data.get("implementation")
    if (
        not isinstance(implementation, str)
        or "." not in implementation.strip(".")
        or not all(part.isidentifier() for part in implementation.split("."))
    ):
        problems.append(
            f"{where}: 'implementation' must be the import path of the runtime class, "
            f"'module.Class', got {implementation!r}"
        )
    params = data.get("parameters")
    if params is None:
        params = {}
    elif not isinstance(params, dict):
        problems.append(f"{where}: 'parameters' must be an object, got {params!r}")
        params = {}
    for key, why in _REFUSED_PARAMETERS.items():
        if params.get(key) is not None:
            problems.append(f"{where}: 'parameters.{key}' is not supported: {why}")
    for key in ("uri", "format", "content_type", "inference_pool_gid"):
        if params.get(key) is not None and not isinstance(params[key], str):
            problems.append(f"{where}: 'parameters.{key}' must be a string, got {params[key]!r}")
    if params.get("extra") is not None and not isinstance(params["extra"], dict):
        problems.append(f"{where}: 'parameters.extra' must be an object, got {params['extra']!r}")

    config: dict[str, Any] = {"predict_concurrency": DEFAULT_PREDICT_CONCURRENCY}
    if "name" in data:
        config["name"] = data["name"]
    version = params.get("version")
    if version is not None:
        if isinstance(version, bool) or not isinstance(version, str | int):
            problems.append(
                f"{where}: 'parameters.version' must be a string or an integer, got {version!r}"
            )
        else:
            config["version"] = str(version)
    size, delay = data.get("max_batch_size", 0), data.get("max_batch_time", 0)
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        problems.append(f"{where}: 'max_batch_size' must be an integer >= 0, got {size!r}")
        size = 0
    if not _number(delay) or delay < 0:
        problems.append(
            f"{where}: 'max_batch_time' must be a number of seconds >= 0, got {delay!r}"
        )
        delay = 0
    if size > 1 and delay > 0:
        config["batch_size"] = size
        config["max_batch_delay"] = float(delay) * 1000.0
    elif size > 1:
        logger.warning(
            "%s: max_batch_size is %d but max_batch_time is 0: no batching (as in MLServer)",
            where,
            size,
        )
    workers = data.get("parallel_workers")
    if workers is not None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
            problems.append(f"{where}: 'parallel_workers' must be an integer >= 0, got {workers!r}")
        elif workers == 0:
            config["workers"] = "thread"
        else:
            config.update(workers="process", min_workers=workers, max_workers=workers)
    for key in ("warm_workers", "cache_enabled"):
        if key in data and not isinstance(data[key], bool):
            problems.append(f"{where}: '{key}' must be true or false, got {data[key]!r}")
    if "platform" in data and not isinstance(data["platform"], str):
        problems.append(f"{where}: 'platform' must be a string, got {data['platform']!r}")
    if "versions" in data and not (
        isinstance(data["versions"], list) and all(isinstance(v, str) for v in data["versions"])
    ):
        problems.append(f"{where}: 'versions' must be a list of strings, got {data['versions']!r}")
    metadata: dict[str, Any] = {}
    for key in ("inputs", "outputs"):
        value = data.get(key)
        if value is None:
            continue
        if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
            problems.append(
                f"{where}: '{key}' must be a list of tensor descriptions, got {value!r}"
            )
        elif value:
            metadata[key] = value
    if data.get("platform"):
        metadata["platform"] = data["platform"]
    if params.get("content_type"):
        metadata["content_type"] = params["content_type"]
    if metadata:
        config["model_metadata"] = metadata
    own = data.get("podium")
    if own is not None:
        if not isinstance(own, dict):
            problems.append(f"{where}: 'podium' must be an object of Podium's model settings")
        else:
            for key in own:
                if key in _MAPPED:
                    problems.append(
                        f"{where}: 'podium.{key}' cannot be set here; use '{_MAPPED[key]}'"
                    )
                elif key in ("model_class_name", "default_version") or key not in MODEL_KEYS:
                    allowed = sorted(
                        MODEL_KEYS - set(_MAPPED) - {"model_class_name", "default_version"}
                    )
                    problems.append(
                        f"{where}: unknown key 'podium.{key}' (allowed: {', '.join(allowed)})"
                    )
                else:
                    config[key] = own[key]
    if problems:
        raise DefinitionError("; ".join(problems), problems)
    folder = path.parent.resolve()
    model_config = ModelConfig.from_mapping(config, default_name=folder.name, where=where)
    runtime = {k: v for k, v in data.items() if k != "podium"}
    runtime["name"] = model_config.name
    file = _module_file(folder, str(implementation)) or path.resolve()
    parts = MLServerParts(str(implementation), path.resolve(), runtime)
    return ModelSource(model_config, file.resolve(), folder, Contract.MLSERVER, mlserver=parts)


def runtime_settings(source: ModelSource, settings_module: ModuleType) -> Any:
    """A fresh ``ModelSettings`` for one runtime instance, as MLServer builds it: ``name``
    filled in, ``parameters.uri`` defaulting to the folder, ``_source`` the settings file."""
    parts = source.mlserver_parts()
    data = json.loads(json.dumps(parts.settings))  # a deep copy, per instance
    params = data.get("parameters") or {}
    if params.get("version") is not None:
        params["version"] = str(params["version"])
    params.setdefault("uri", str(source.model_dir))
    if params.get("uri") is None:
        params["uri"] = str(source.model_dir)
    data["parameters"] = params
    data["_source"] = str(parts.settings_path)
    try:
        return settings_module.ModelSettings.model_validate(data)
    except Exception as exc:
        errors = getattr(exc, "errors", None)
        if errors is None:
            raise DefinitionError(f"{parts.settings_path}: {exc}") from exc
        problems = [
            f"{parts.settings_path}: '{'.'.join(str(p) for p in e.get('loc', ()))}': "
            f"{e.get('msg', '')}"
            for e in errors()
        ]
        raise DefinitionError("; ".join(problems), problems) from exc
