"""``model-settings.json`` → Podium's ``ModelConfig`` and the runtime's own ``ModelSettings``.

Every key MLServer defines is accepted or refused with an error naming the key and the file:

- ``name`` → ``name`` (default: the folder's name); ``parameters.version`` → ``version``;
- ``implementation`` (required): ``module.Class``, imported with the folder first on ``sys.path``;
- ``max_batch_size`` > 1 with ``max_batch_time`` > 0 → ``batch_size`` and ``max_batch_delay``
  (seconds → milliseconds); otherwise no batching, as in MLServer;
- ``parallel_workers``: N ≥ 1 → ``workers: process`` with N workers; 0 → ``workers: thread``;
- ``platform``, ``inputs``, ``outputs``, ``parameters.content_type`` → the model's metadata;
- ``parameters.uri`` (default: the folder), ``format``, ``extra`` and any other parameter reach
  the runtime in ``settings.parameters``; ``versions``, ``warm_workers``,
  ``parameters.inference_pool_gid`` / ``autogenerate_inference_pool_gid`` are accepted and have
  no effect;
- ``cache_enabled: true`` → ``response_cache: {max_entries: 100}`` (MLServer's default
  ``cache_size``; a ``podium.response_cache`` wins), docs/mlserver.md;
- ``parameters.environment_tarball`` (relative to the file's folder) / ``environment_path``: the
  model runs in worker processes from that environment (:func:`declared_environment`);
- ``podium``: Podium's own ``config.yaml`` keys for this model (``predict_concurrency``,
  ``max_queue_size``, ...); unknown top-level keys are an error (MLServer ignores them).

``MLSERVER_MODEL_<KEY>`` environment variables give the keys a file leaves out (and
``MLSERVER_MODEL_<PARAMETER>`` its parameters), as MLServer's pydantic-settings models read them:
names in any case, lists and objects as JSON; the file wins where both say.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from ...config import FIELDS, UNSET, ModelConfig, signature_of
from ...devices import device, gpu_index
from ...errors import DefinitionError
from .._source import Contract, MLServerParts, ModelSource, podium_section, read_json_object

__all__ = [
    "MODEL_ENV_PREFIX",
    "SETTINGS_FILE",
    "declared_environment",
    "environment_model",
    "environment_values",
    "lax_value",
    "read_json_object",
    "read_settings",
    "runtime_settings",
]

logger = logging.getLogger("podium.model")

#: MLServer's default ``cache_size`` (settings.json): how many answers its one cache keeps.
MLSERVER_CACHE_SIZE = 100

SETTINGS_FILE = "model-settings.json"

# Podium keys that model-settings.json sets through MLServer's own keys (the field table's
# mlserver column), and Podium keys that mean nothing for an MLServer runtime.
_MAPPED = {
    key: spec.mlserver.key
    for key, spec in FIELDS.items()
    if spec.mlserver is not None and spec.mlserver.key is not None
}
_NOT_HERE = frozenset({"model_class_name", "default_version"})


MODEL_ENV_PREFIX = "MLSERVER_MODEL_"

# MLServer 1.7.1's ModelSettings and ModelParameters fields (the keys a file may set), by how
# a value is read: "bool", "int", "float", "str" or "json" (pydantic-settings reads lists and
# objects as JSON).
_MODEL_KINDS: Mapping[str, str] = {
    "implementation": "str", "name": "str", "platform": "str", "versions": "json",
    "inputs": "json", "outputs": "json", "parallel_workers": "int", "warm_workers": "bool",
    "max_batch_size": "int", "max_batch_time": "float", "parameters": "json",
    "cache_enabled": "bool",
}  # fmt: skip
_PARAMETER_KINDS: Mapping[str, str] = {
    "uri": "str", "version": "str", "environment_path": "str", "environment_tarball": "str",
    "inference_pool_gid": "str", "autogenerate_inference_pool_gid": "bool", "format": "str",
    "content_type": "str", "extra": "json",
}  # fmt: skip
#: The keys of a model-settings.json: MLServer's, and Podium's own section.
_KEYS = frozenset({*_MODEL_KINDS, "podium"})
_TRUE = frozenset({"1", "true", "t", "yes", "y", "on"})
_FALSE = frozenset({"0", "false", "f", "no", "n", "off"})


def lax_value(kind: str, value: Any) -> Any:
    """``value`` as pydantic's lax mode reads a field of ``kind`` (``bool``, ``int``, ``float``,
    ``str``, ``list`` (of strings, as a tuple), ``json``: anything): a boolean from 0/1 or a true/false word, a number from the
    text of one, an integer from a whole float (MLServer's own examples write ``"debug":
    "true"``, and variables are text); ``ValueError`` otherwise. The one reading of MLServer's
    values, from its files and from its variables."""
    if kind == "json" or (kind == "str" and isinstance(value, str)):
        return value
    if kind == "list" and isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if kind == "bool" and (text in _TRUE or text in _FALSE):
            return text in _TRUE
        if kind in ("int", "float"):
            with contextlib.suppress(ValueError):
                return int(text) if kind == "int" else float(text)
    elif kind == "bool" and isinstance(value, int) and value in (0, 1):  # a bool is an int
        return bool(value)
    elif kind in ("int", "float") and isinstance(value, int | float):
        if kind == "float":
            return float(value)
        if isinstance(value, int) or value.is_integer():  # a boolean too, as pydantic: true is 1
            return int(value)
    raise ValueError(f"not {kind}: {value!r}")


def environment_values(
    environ: Mapping[str, str], prefix: str, kinds: Mapping[str, str]
) -> dict[str, Any]:
    """The fields of ``kinds`` that ``<prefix><FIELD>`` variables of ``environ`` give (names in
    any case), each read as pydantic-settings reads a field of that kind (``kinds``' values:
    ``bool``, ``int``, ``float``, ``str``, ``json``); ``ValueError`` names the variable whose
    text is not one."""
    upper = {name.upper(): value for name, value in environ.items()}
    found: dict[str, Any] = {}
    for key, kind in kinds.items():
        name = prefix + key.upper()
        text = upper.get(name)
        if text is None:
            continue
        try:
            found[key] = json.loads(text) if kind == "json" else lax_value(kind, text)
        except ValueError:
            what = {"bool": "true or false", "json": "JSON"}.get(kind, f"a number ({kind})")
            raise ValueError(f"{name} must be {what}, got {text[:80]!r}") from None
    return found


def _with_environment(data: dict[str, Any], where: str, environ: Mapping[str, str]) -> None:
    """``data`` (a model-settings.json) with what ``MLSERVER_MODEL_*`` variables give where it
    says nothing, in place, as MLServer's ``ModelSettings`` reads them."""
    try:
        top = environment_values(environ, MODEL_ENV_PREFIX, _MODEL_KINDS)
        params = environment_values(environ, MODEL_ENV_PREFIX, _PARAMETER_KINDS)
    except ValueError as exc:
        raise DefinitionError(f"{where}: {exc}") from None
    for key, value in top.items():
        data.setdefault(key, value)
    if params and (data.get("parameters") is None or isinstance(data["parameters"], dict)):
        data["parameters"] = {**params, **(data.get("parameters") or {})}


def _module_file(folder: Path, implementation: str) -> Path | None:
    module = implementation.rpartition(".")[0]
    base = folder.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _from_mlserver(
    data: dict[str, Any], params: dict[str, Any], where: str, problems: list[str]
) -> dict[str, Any]:
    """Podium's keys from MLServer's: the field table's ``mlserver`` column. Each MLServer key is
    checked once; one that is absent, or fails its check, counts as its default."""
    sections = {"": data, "parameters": params}
    given: dict[str, Any] = {}  # MLServer key → its checked value (or its default)
    config: dict[str, Any] = {}
    for key, spec in FIELDS.items():
        spelling = spec.mlserver
        if spelling is None:
            continue
        if spelling.key is None:
            value = spelling.default
        elif spelling.key in given:
            value = given[spelling.key]
        else:
            section, _, name = spelling.key.rpartition(".")
            value = sections[section].get(name, UNSET)
            if value is None and spelling.optional:
                value = UNSET
            if value is not UNSET:
                try:
                    value = spelling.check(value)
                except ValueError as exc:
                    problems.append(f"{where}: {exc}")
                    value = UNSET
            value = given[spelling.key] = spelling.default if value is UNSET else value
        if value is not UNSET:
            value = spelling.to_field(value, spec.unit)
        if value is not UNSET:
            config[key] = value
    return config


def environment_model(folder: Path, environ: Mapping[str, str] | None = None) -> ModelSource | None:
    """The one model MLServer makes from ``MLSERVER_MODEL_*`` variables alone (its default
    model, when its repository holds no ``model-settings.json``), its code found in ``folder``;
    None when ``MLSERVER_MODEL_IMPLEMENTATION`` is not set (MLServer then serves nothing)."""
    environ = os.environ if environ is None else environ
    if not any(name.upper() == f"{MODEL_ENV_PREFIX}IMPLEMENTATION" for name in environ):
        return None
    return read_settings(folder / SETTINGS_FILE, environ, data={})


def read_settings(
    path: Path, environ: Mapping[str, str] | None = None, *, data: dict[str, Any] | None = None
) -> ModelSource:
    """The model version a ``model-settings.json`` describes (``data``: its keys, instead of
    reading ``path``), with what ``MLSERVER_MODEL_*`` variables of ``environ`` (default: the
    process's) give where it says nothing; ``DefinitionError`` listing every problem, each
    naming the key and the file."""
    where = str(path) if data is None else f"{MODEL_ENV_PREFIX}* variables ({path.parent})"
    data = read_json_object(path) if data is None else data
    _with_environment(data, where, os.environ if environ is None else environ)
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
    for key, kind in _PARAMETER_KINDS.items():
        if kind != "str" or key == "version":  # (the version: the field table's check)
            continue
        if params.get(key) is not None and not isinstance(params[key], str):
            problems.append(f"{where}: 'parameters.{key}' must be a string, got {params[key]!r}")
    if params.get("extra") is not None and not isinstance(params["extra"], dict):
        problems.append(f"{where}: 'parameters.extra' must be an object, got {params['extra']!r}")

    config = _from_mlserver(data, params, where, problems)
    # MLServer batches adaptively only when both are set: otherwise no batching.
    size, delay = config.pop("batch_size"), config.pop("max_batch_delay")
    if size > 1 and delay > 0:
        config.update(batch_size=size, max_batch_delay=delay)
    elif size > 1:
        logger.warning(
            "%s: max_batch_size is %d but max_batch_time is 0: no batching (as in MLServer)",
            where,
            size,
        )
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
    # The metadata MLServer answers for the model: its platform ("" unless set) and its
    # `versions` list as the file says them (dependency versions, not the served versions).
    metadata["platform"] = data.get("platform") or ""
    if isinstance(data.get("versions"), list):
        metadata["versions"] = list(data["versions"])
    if params.get("content_type"):
        metadata["content_type"] = params["content_type"]
    if metadata:
        config["model_metadata"] = metadata
        try:
            signature_of(metadata, prefix="")  # named as this file names them
        except ValueError as exc:
            problems.append(f"{where}: {exc}")
    refused = {key: f"cannot be set here; use '{spelling}'" for key, spelling in _MAPPED.items()}
    if data.get("cache_enabled") is True:  # MLServer's cache: an LRU of cache_size entries
        config["response_cache"] = {"max_entries": MLSERVER_CACHE_SIZE}
    config.update(podium_section(data.get("podium"), where, problems, refused, _NOT_HERE))
    DefinitionError.check(problems)
    folder = path.parent.resolve()
    model_config = ModelConfig.from_mapping(config, default_name=folder.name, where=where)
    runtime = {k: v for k, v in data.items() if k != "podium"}
    runtime["name"] = model_config.name
    file = _module_file(folder, str(implementation)) or path.resolve()
    parts = MLServerParts(str(implementation), path.resolve(), runtime)
    return ModelSource(model_config, file.resolve(), folder, Contract.MLSERVER, mlserver=parts)


def runtime_settings(source: ModelSource, settings_module: ModuleType) -> Any:
    """A fresh ``ModelSettings`` for one runtime instance, as MLServer builds it: ``name``
    filled in, ``parameters.uri`` defaulting to the folder, ``_source`` the settings file; on
    a GPU, ``parameters.extra.device`` its number unless the file sets it."""
    parts = source.mlserver_parts()
    data = json.loads(json.dumps(parts.settings))  # a deep copy, per instance
    params = data.get("parameters") or {}
    if params.get("version") is not None:
        params["version"] = str(params["version"])
    if params.get("uri") is None:  # absent or null: the folder
        params["uri"] = str(source.model_dir)
    # the worker's GPU (docs/devices.md) where MLServer's runtimes look for it: HuggingFace's
    # reads parameters.extra.device (a number; its default -1 is the CPU)
    gpu = gpu_index(device())
    extra = params.get("extra")
    if gpu is not None and (extra is None or (isinstance(extra, dict) and "device" not in extra)):
        params["extra"] = {**(extra or {}), "device": gpu}
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
        raise DefinitionError.of(problems) from exc


def declared_environment(source: ModelSource) -> tuple[str, Path] | None:
    """The Python environment an MLServer model declares, as MLServer finds it:
    ``("path", folder)`` for ``parameters.environment_path`` (variables and ``~`` expanded,
    relative to the working directory), else ``("tarball", file)`` for
    ``parameters.environment_tarball`` (relative to the ``model-settings.json``'s folder); None
    for any other model."""
    if source.mlserver is None:
        return None
    params = source.mlserver.settings.get("parameters") or {}
    folder = params.get("environment_path")
    if folder:
        return "path", Path(os.path.abspath(os.path.expanduser(os.path.expandvars(folder))))
    tarball = params.get("environment_tarball")
    if tarball:
        return "tarball", source.mlserver.settings_path.parent / tarball
    return None
