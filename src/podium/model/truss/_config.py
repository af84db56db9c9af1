"""A truss's ``config.yaml``, read as Truss reads it at run time.

Truss's config has many keys, most of them for building an image (``requirements``,
``system_packages``, ``base_image``, ``build_commands``, ...). Podium runs nothing at serve
time: the keys Truss reads when it serves are honoured here with Truss's defaults and meaning,
the build-time keys are kept (the model's ``config`` holds them, ``podium check`` lists
unsatisfied requirements) and named once when they ask for something Podium does not do, and a
key Truss does not know is a warning naming it, never a refusal. Podium's own model keys
(``workers``, ``min_workers``, ``max_queue_size``, ...) go in ``podium.yaml`` beside
``config.yaml``, not in it: ``truss push`` refuses keys Truss does not know.
"""

from __future__ import annotations

import copy
import logging
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ...config import ModelConfig, load_yaml, signature_of
from ...errors import DefinitionError
from .._source import Contract, ModelSource, TrussParts, read_requirements

__all__ = ["CONFIG_FILE", "PODIUM_FILE", "TrussSettings", "is_source", "read_truss"]

logger = logging.getLogger("podium.model")

CONFIG_FILE = "config.yaml"
#: Podium's own model keys for a truss (workers, batching, queue...), beside its config.yaml.
PODIUM_FILE = "podium.yaml"

#: Truss's run-time settings (``runtime:``) and their defaults (truss/base/truss_config.py).
RUNTIME_DEFAULTS: Mapping[str, Any] = {
    "predict_concurrency": 1,
    "streaming_read_timeout": 60,
    "enable_tracing_data": False,
    "enable_debug_logs": False,
    "transport": {"kind": "http"},
    "is_websocket_endpoint": False,  # Truss derives it from transport.kind
    "health_checks": {
        "restart_check_delay_seconds": None,
        "restart_threshold_seconds": None,
        "startup_threshold_seconds": None,
        "stop_traffic_threshold_seconds": None,
    },
    "oidc": {"enabled": None},
    "remote_ssh": {"enabled": False},
    "egress_restrictions": None,
    "truss_server_version_override": None,
}

#: The keys Truss fills in when it writes a truss's config for its server (``to_dict(verbose=
#: True)``, Truss 0.18.36), with its defaults: what a model's ``config`` holds when the file
#: leaves them out.
DEFAULTS: Mapping[str, Any] = {
    "model_name": None,
    "model_metadata": {},
    "description": None,
    "examples_filename": "examples.yaml",
    "data_dir": "data",
    "external_data": None,
    "external_package_dirs": [],
    "python_version": "py313",
    "base_image": None,
    "requirements_file": None,
    "requirements": [],
    "system_packages": [],
    "environment_variables": {},
    "secrets": {},
    "resources": {"cpu": "1", "memory": "2Gi", "accelerator": None, "use_gpu": False},
    "runtime": RUNTIME_DEFAULTS,
    "build": {
        "model_server": "TrussServer",
        "arguments": {},
        "secret_to_path_mapping": {},
        "no_cache": False,
    },
    "bdn": {"access": [], "hotload": {"enabled": False}, "mounts": []},
    "build_commands": [],
    "docker_server": None,
    "model_cache": [],
    "weights": [],
    "trt_llm": None,
    "training_checkpoints": None,
    "bis_llm": None,
    "input_type": "Any",
    "model_framework": "custom",
    "model_type": "Model",
    "model_module_dir": "model",
    "model_class_filename": "model.py",
    "model_class_name": "Model",
    "bundled_packages_dir": "packages",
    "use_local_src": False,
    "cache_internal": [],
    "live_reload": False,
    "apply_library_patches": True,
    "spec_version": "2.0",
}

#: Keys Truss knew once and still accepts (its ``from_dict`` renames ``hf_cache``).
LEGACY_KEYS = frozenset({"hf_cache"})

#: Build-time keys: Truss acts on them when it builds an image, never when it serves. Podium
#: builds no image; each that asks for something is named once when the truss is read
#: (``requirements`` and ``python_version`` are named only where this environment does not
#: satisfy them: ``notes`` in the package, ``_notes`` here).
BUILD_KEYS = (
    "system_packages",
    "base_image",
    "build_commands",
    "build",
    "model_cache",
    "hf_cache",
    "weights",
    "external_data",
    "training_checkpoints",
    "cache_internal",
)


@dataclass(frozen=True, slots=True)
class TrussSettings:
    """What Podium reads of a truss's config, with Truss's defaults."""

    root: Path
    model_file: Path  # model_module_dir / model_class_filename
    class_name: str
    data_dir: Path
    package_dirs: tuple[Path, ...]  # bundled_packages_dir, then each external_package_dirs entry
    environment: Mapping[str, str]  # environment_variables, as strings (Truss's rule)
    secrets: Mapping[str, str | None]  # declared secrets and their defaults
    streaming_read_timeout: float  # seconds between two items of a stream
    requirements: tuple[str, ...]  # requirements, or those of requirements_file
    #: What Podium does not do of this config (build-time work, platform settings), said once.
    notes: tuple[str, ...] = field(default=())


def _config_path(path: Path) -> Path | None:
    for name in (CONFIG_FILE, "config.yml"):
        if (path / name).is_file():
            return path / name
    return None


def is_source(path: Path) -> bool:
    """Whether ``path`` is a truss: ``config.yaml`` at its root, no ``model.py`` beside it
    (Podium's own model directory), and the model class file its config names (by default
    ``model/model.py``), or a config that names a custom server or an engine that needs none
    (``docker_server``, ``trt_llm``: refused with a clear error when read)."""
    if not path.is_dir() or (path / "model.py").exists():
        return False
    cfg = _config_path(path)
    if cfg is None:
        return False
    try:
        data = load_yaml(cfg)
    except DefinitionError:
        data = {}
    if _model_file(path, data).is_file():
        return True
    return bool(data.get("docker_server") or data.get("trt_llm"))


def _filled(data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` with Truss's defaults for the keys it leaves out (a fresh copy of each)."""
    config = {key: copy.deepcopy(value) for key, value in DEFAULTS.items()}
    config["runtime"] = copy.deepcopy(dict(RUNTIME_DEFAULTS))
    for key, value in data.items():
        if key == "runtime" and isinstance(value, dict):
            config["runtime"] = {**config["runtime"], **value}
            transport = config["runtime"].get("transport")
            if isinstance(transport, dict):
                websocket = transport.get("kind") == "websocket"
                if websocket:
                    defaults = {"ping_interval_seconds": None, "ping_timeout_seconds": None}
                    config["runtime"]["transport"] = {**defaults, **transport}
                if "is_websocket_endpoint" not in value:
                    config["runtime"]["is_websocket_endpoint"] = websocket
        elif key == "resources" and isinstance(value, dict):
            resources = {**DEFAULTS["resources"], **value}
            if "use_gpu" not in value:  # Truss derives it from the accelerator
                resources["use_gpu"] = bool(resources.get("accelerator"))
            config["resources"] = resources
        elif key == "hf_cache" and "model_cache" not in data:
            config["model_cache"] = value or []
        else:
            config[key] = value
    # Truss's from_dict: environment variables are strings, booleans as "true" / "false"
    env = config.get("environment_variables") or {}
    if isinstance(env, dict):
        config["environment_variables"] = {
            str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in env.items()
        }
    return config


def _text(where: str, key: str, value: Any, problems: list[str]) -> str:
    if not isinstance(value, str) or not value:
        problems.append(f"{where}: '{key}' must be a non-empty string, got {value!r}")
        return ""
    return value


def _inside(root: Path, relative: str, where: str, key: str, problems: list[str]) -> Path:
    """``root / relative``, which must stay inside the truss (no '..' out of it)."""
    path = (root / relative).resolve()
    if not path.is_relative_to(root):
        problems.append(f"{where}: '{key}' ({relative!r}) points outside the truss")
    return path


def _requirements(
    root: Path, config: Mapping[str, Any], where: str, problems: list[str]
) -> tuple[str, ...]:
    listed = config.get("requirements") or []
    if not isinstance(listed, list) or not all(isinstance(r, str) for r in listed):
        problems.append(f"{where}: 'requirements' must be a list of strings, got {listed!r}")
        listed = []
    file = config.get("requirements_file")
    if not file:
        return tuple(r.strip() for r in listed if r.strip())
    if listed:
        problems.append(f"{where}: 'requirements' and 'requirements_file' exclude each other")
    path = _inside(root, str(file), where, "requirements_file", problems)
    if path.suffix != ".txt":  # pyproject.toml and uv.lock, Truss's other forms, are not read
        return ()
    try:
        return read_requirements(path)
    except OSError as exc:
        problems.append(f"{where}: 'requirements_file' {file!r} cannot be read: {exc.strerror}")
        return ()


def _notes(config: Mapping[str, Any], data: Mapping[str, Any]) -> list[str]:
    """What this config asks for that Podium does not do when it serves, said once."""
    notes = []
    wanted = data.get("python_version")
    running = f"py{sys.version_info.major}{sys.version_info.minor}"
    if isinstance(wanted, str) and wanted.replace(".", "") != running:
        notes.append(
            f"'python_version' asks for {wanted}; this server runs Python "
            f"{sys.version_info.major}.{sys.version_info.minor}"
        )
    for key in BUILD_KEYS:
        if key in data and data[key] not in (None, [], {}, "", DEFAULTS.get(key)):
            notes.append(
                f"'{key}' is build-time configuration: Podium builds no image and runs nothing "
                "for it (install what it names into the environment that serves)"
            )
    runtime = config["runtime"]
    transport = runtime.get("transport") or {}
    if isinstance(transport, dict) and transport.get("kind") == "grpc":
        notes.append(
            "'runtime.transport.kind: grpc' (a custom gRPC server) is not served; the model's "
            "HTTP routes are"
        )
    if runtime.get("enable_debug_logs"):
        notes.append("'runtime.enable_debug_logs' is server-wide in Podium: --log-level debug")
    if runtime.get("enable_tracing_data"):
        notes.append("'runtime.enable_tracing_data' is server-wide in Podium: --otel")
    given = data.get("runtime")
    if not isinstance(given, dict):
        given = {}
    for key in ("health_checks", "oidc", "remote_ssh", "egress_restrictions"):
        if given.get(key) not in (None, {}, RUNTIME_DEFAULTS[key]):
            notes.append(f"'runtime.{key}' is Baseten's platform setting; Podium ignores it")
    return notes


def read_truss(root: Path) -> ModelSource:
    """The truss at ``root`` as a model source; ``DefinitionError`` listing every problem."""
    root = root.resolve()
    cfg = _config_path(root)
    where = str(cfg if cfg is not None else root / CONFIG_FILE)
    data = load_yaml(cfg) if cfg is not None else {}
    problems: list[str] = []
    unknown = sorted(str(k) for k in data if k not in DEFAULTS and k not in LEGACY_KEYS)
    for key in unknown:
        hint = f" (Podium's own keys go in {PODIUM_FILE} beside it)" if key == "podium" else ""
        logger.warning("%s: key '%s' is not one Truss knows; it is ignored%s", where, key, hint)
    if data.get("docker_server"):
        problems.append(
            f"{where}: 'docker_server' runs a custom server of its own, from a Docker image; "
            "Podium serves trusses that define a model class"
        )
    if data.get("trt_llm") and not _model_file(root, data).is_file():
        problems.append(
            f"{where}: 'trt_llm' without a model class runs Baseten's TensorRT-LLM engine, "
            "which Podium does not include; write a model class that loads the engine"
        )
    DefinitionError.check(problems)
    config = _filled(data)
    runtime = config["runtime"]
    module_dir = _text(where, "model_module_dir", config["model_module_dir"], problems)
    filename = _text(where, "model_class_filename", config["model_class_filename"], problems)
    class_name = _text(where, "model_class_name", config["model_class_name"], problems)
    model_dir = _inside(root, module_dir, where, "model_module_dir", problems)
    model_file = _inside(model_dir, filename, where, "model_class_filename", problems)
    data_dir = _inside(root, str(config["data_dir"]), where, "data_dir", problems)
    packages = [
        _inside(root, str(config["bundled_packages_dir"]), where, "bundled_packages_dir", problems)
    ]
    external = config["external_package_dirs"] or []
    if not isinstance(external, list):
        problems.append(f"{where}: 'external_package_dirs' must be a list, got {external!r}")
        external = []
    for entry in external:  # outside the truss by design: shared between trusses
        packages.append((root / str(entry)).resolve())
    env = config["environment_variables"]
    if not isinstance(env, dict):
        problems.append(f"{where}: 'environment_variables' must be a mapping, got {env!r}")
        env = {}
    secrets = config["secrets"] or {}
    if not isinstance(secrets, dict):
        problems.append(
            f"{where}: 'secrets' must be a mapping of names to defaults, got {secrets!r}"
        )
        secrets = {}
    timeout = runtime.get("streaming_read_timeout")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        problems.append(
            f"{where}: 'runtime.streaming_read_timeout' must be a number > 0, got {timeout!r}"
        )
        timeout = 60
    requirements = _requirements(root, config, where, problems)
    podium_file = root / PODIUM_FILE
    podium = load_yaml(podium_file) if podium_file.is_file() else {}
    try:  # its own keys, named in its own file
        ModelConfig.from_mapping(podium, default_name=root.name, where=str(podium_file))
    except DefinitionError as exc:
        problems.extend(exc.problems)
    DefinitionError.check(problems)
    mapped: dict[str, Any] = {"predict_concurrency": runtime.get("predict_concurrency")}
    if isinstance(config.get("model_name"), str) and config["model_name"]:
        mapped["name"] = config["model_name"]
    if "model_class_name" in data:
        mapped["model_class_name"] = class_name
    metadata = config.get("model_metadata") or {}
    if isinstance(metadata, dict):
        try:
            signature_of(metadata)
            mapped["model_metadata"] = metadata
        except ValueError as exc:  # free-form in Truss: kept in `config`, not declared tensors
            logger.warning(
                "%s: model_metadata declares no OIP tensors Podium reads (%s)", where, exc
            )
    try:
        mapped.update(placement_of(config.get("resources") or {}))
    except ValueError as exc:
        raise DefinitionError(f"{where}: {exc}") from None
    mapped.update(podium)  # (its devices, if it names them, win)
    model_config = ModelConfig.from_mapping(mapped, default_name=root.name, where=where)
    model_config = replace(model_config, raw=config)  # the model's `config`: Truss's, whole
    settings = TrussSettings(
        root=root,
        model_file=model_file,
        class_name=class_name,
        data_dir=data_dir,
        package_dirs=tuple(packages),
        environment=dict(env),
        secrets={str(k): (None if v is None else str(v)) for k, v in secrets.items()},
        streaming_read_timeout=float(timeout),
        requirements=requirements,
        notes=tuple(f"{where}: {note}" for note in _notes(config, data)),
    )
    parts = TrussParts(settings=settings)
    return ModelSource(
        model_config,
        model_file,
        root,
        contract=Contract.TRUSS,
        truss=parts,
        process_env=settings.environment,
    )


def placement_of(resources: Mapping[str, Any]) -> dict[str, Any]:
    """Podium's ``devices`` and ``devices_per_worker`` for a truss's ``resources``: an
    ``accelerator`` (``A10G``, ``H100:2``) is that many GPUs for the one model instance (a
    worker holds them all, as Truss's container sees them), of any kind (its name is not
    checked); ``use_gpu: true`` without one is one GPU; neither is the CPU, as Truss runs it."""
    accelerator = resources.get("accelerator")
    if accelerator:
        _, _, count = str(accelerator).partition(":")
        if count and (not count.isdigit() or not 0 < int(count) <= 64):
            raise ValueError(
                f"'resources.accelerator' must be a GPU type with an optional count (A10G:2), "
                f"got {str(accelerator)[:80]!r}"
            )
        return {"devices": "gpu", "devices_per_worker": int(count or 1)}
    if resources.get("use_gpu") is True:
        return {"devices": "gpu", "devices_per_worker": 1}
    return {"devices": "cpu"}


def _model_file(root: Path, data: Mapping[str, Any]) -> Path:
    """Where the model class file is, by the keys of ``data`` (Truss's defaults: model/model.py)."""
    module_dir = data.get("model_module_dir", DEFAULTS["model_module_dir"])
    filename = data.get("model_class_filename", DEFAULTS["model_class_filename"])
    return root / str(module_dir) / str(filename)
