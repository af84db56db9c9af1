"""What a Podium application on Ray Serve is built from: the builder's arguments
(:class:`AppSettings`), what each replica and the ingress are given (:class:`ReplicaSettings`,
:class:`IngressSettings`), and each model version's deployment options
(:func:`deployment_options`: its ``min_workers`` / ``max_workers`` as replicas, its config's
``ray:`` section).

Nothing here imports Ray: the options are plain mappings that ``podium.ray._app`` hands to
``Deployment.options``, so that they can be checked (and tested) without a cluster.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import SETTINGS, Kind, ModelConfig, ServerConfig, read_config_file
from ..errors import DefinitionError, model_label

__all__ = [
    "ACTOR_KEYS",
    "DEPLOYMENT_KEYS",
    "INGRESS_NAME",
    "ROUTER_CLASS",
    "AppSettings",
    "IngressSettings",
    "ReplicaSettings",
    "deployment_name",
    "deployment_options",
    "ray_section",
]

#: The keys of a model's ``ray:`` section that are its replicas' ``ray_actor_options``.
ACTOR_KEYS = frozenset(
    {"num_cpus", "num_gpus", "memory", "resources", "accelerator_type", "runtime_env"}
)
#: The keys of a model's ``ray:`` section that are its deployment's own options.
DEPLOYMENT_KEYS = frozenset(
    {
        "num_replicas",
        "autoscaling_config",
        "max_ongoing_requests",
        "max_queued_requests",
        "max_replicas_per_node",
        "graceful_shutdown_timeout_s",
        "graceful_shutdown_wait_loop_s",
        "health_check_period_s",
        "health_check_timeout_s",
    }
)

#: The request router of a model with ``sequence_batching`` (``_router.py``).
ROUTER_CLASS = "podium.ray._router:SequenceRouter"
#: The ingress deployment's name (model deployments are named ``model:<name>[:<version>]``).
INGRESS_NAME = "podium-ingress"


@dataclass(frozen=True, slots=True)
class ReplicaSettings:
    """What every model replica runs with: the pool for sync model code, where secrets are
    read after the environment (``--secrets-dir``), Podium's log level."""

    threads: int = SETTINGS["threads"].default
    secrets_dir: str | None = None
    log_level: str = SETTINGS["log_level"].default


@dataclass(frozen=True, slots=True)
class IngressSettings:
    """What the ingress's front end runs with (as ``podium serve``'s HTTP listener)."""

    max_request_size: int = SETTINGS["max_request_size"].default
    sequence_header: str = SETTINGS["sequence_header"].default
    log_level: str = SETTINGS["log_level"].default


@dataclass(frozen=True, slots=True)
class AppSettings:
    """The builder's arguments, checked: the model ``paths`` (absolute), what replicas and the
    ingress run with, and how many ingress replicas (``ingress_replicas``)."""

    paths: tuple[str, ...]
    replica: ReplicaSettings
    ingress: IngressSettings
    ingress_replicas: int = 1

    @classmethod
    def from_args(cls, args: Mapping[str, Any]) -> AppSettings:
        """From what ``serve run podium.ray:app KEY=VALUE...`` or a Serve config's ``args``
        give (``ValueError`` naming the argument and the rule):

        - ``paths``: model paths, as ``podium serve`` takes them (a list, or one string with
          paths separated by commas);
        - ``config``: ``podium serve``'s ``--config`` file (its ``models``, ``secrets_dir``,
          ``threads``, ``max_request_size``, ``sequence_header``, ``log_level`` apply);
        - any of those settings by name (they win over the file), and ``ingress_replicas``.
        """
        known = {"paths", "config", "ingress_replicas", *_SETTINGS}
        unknown = sorted(set(args) - known, key=str)
        if unknown:
            raise ValueError(
                f"unknown argument(s) {', '.join(map(str, unknown))} for podium.ray:app "
                f"(allowed: {', '.join(sorted(known))})"
            )
        values: dict[str, Any] = {}
        paths: list[str] = []
        config_file = args.get("config")
        if config_file is not None:
            file = Path(str(config_file))
            values, paths = _from_file(file)
        for key in _SETTINGS:
            if args.get(key) is not None:
                values[key] = _argument(key, args[key])
        paths += _paths(args.get("paths"))
        if not paths:
            raise ValueError(
                "no models given: pass paths=PATH[,PATH...] (or 'models' in the config file)"
            )
        ingress_replicas = _integer("ingress_replicas", args.get("ingress_replicas", 1), 1)
        try:
            server = ServerConfig(**values)
        except (TypeError, ValueError) as exc:
            raise ValueError(str(exc)) from None
        serving = server.serving
        return cls(
            paths=tuple(str(Path(p).resolve()) for p in paths),
            replica=ReplicaSettings(
                threads=serving.threads,
                secrets_dir=str(serving.secrets_dir.resolve()) if serving.secrets_dir else None,
                log_level=server.logs.level,
            ),
            ingress=IngressSettings(
                max_request_size=server.protocols.max_request_size,
                sequence_header=server.protocols.sequence_header,
                log_level=server.logs.level,
            ),
            ingress_replicas=ingress_replicas,
        )


def _integer(key: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"'{key}' must be an integer >= {minimum}, got {value!r}")
    return value


#: ``podium serve``'s settings that apply on Ray, checked as it checks them (``ServerConfig``).
_SETTINGS = ("secrets_dir", "threads", "max_request_size", "sequence_header", "log_level")


def _argument(key: str, value: Any) -> Any:
    """An argument as ``serve run ... KEY=VALUE`` gives it (a string), as the setting's kind."""
    if SETTINGS[key].kind is Kind.INTEGER and isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return value


def _paths(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [p.strip() for p in value.split(",") if p.strip()]
    if isinstance(value, list | tuple) and all(isinstance(p, str) for p in value):
        return list(value)
    raise ValueError(f"'paths' must be a list of paths or a string of them, got {value!r}")


def _from_file(file: Path) -> tuple[dict[str, Any], list[str]]:
    """The settings of ``podium serve``'s config file that apply on Ray, and its models (each
    relative to the file). Settings that open something Serve cannot give are refused: token
    authorization, system shared memory, loading models through the inference listener."""
    try:
        data = read_config_file(file)
    except DefinitionError as exc:
        raise ValueError(exc.message) from None
    unknown = sorted({"triton", "grpc_threads"} & data.keys())
    if unknown:
        raise ValueError(f"{file}: unknown key(s) {', '.join(unknown)}")
    refused = []
    if data.get("auth"):
        refused.append("auth (token authorization: put it in front of Serve's HTTP proxy)")
    if data.get("shared_memory", "off") != "off":
        refused.append("shared_memory (replicas do not share the clients' host)")
    if data.get("model_control", "management") != "management":
        refused.append("model_control (what Serve serves changes by deploying the application)")
    if refused:
        raise ValueError(f"{file}: not available on Ray Serve: {'; '.join(refused)}")
    values = {k: data[k] for k in _SETTINGS if data.get(k) is not None}
    return values, list(data.get("models") or ())


def ray_section(config: ModelConfig, label: str) -> dict[str, Any]:
    """A model's ``ray:`` section, checked lightly (``DefinitionError`` naming the model and
    the key): its keys are Serve's deployment options (:data:`DEPLOYMENT_KEYS`) and its
    replicas' actor options (:data:`ACTOR_KEYS`), which Serve validates in full."""
    section = dict(config.ray)
    problems = []
    for key in sorted(set(section) - ACTOR_KEYS - DEPLOYMENT_KEYS, key=str):
        allowed = ", ".join(sorted(ACTOR_KEYS | DEPLOYMENT_KEYS))
        problems.append(f"{label}: unknown key 'ray.{key}' (allowed: {allowed})")
    for key in ("num_cpus", "num_gpus", "memory"):
        value = section.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            problems.append(f"{label}: 'ray.{key}' must be a number, got {value!r}")
    for key in ("resources", "runtime_env", "autoscaling_config"):
        if key in section and not isinstance(section[key], dict):
            problems.append(f"{label}: 'ray.{key}' must be a mapping, got {section[key]!r}")
    DefinitionError.check(problems)
    return section


def deployment_name(config: ModelConfig) -> str:
    """``model:<name>`` or ``model:<name>:<version>``: one deployment per version."""
    return f"model:{config.name}" + (f":{config.version}" if config.version else "")


def deployment_options(config: ModelConfig) -> dict[str, Any]:
    """The ``Deployment.options`` of one model version:

    - replicas: ``num_replicas = min_workers`` when it equals ``max_workers``, else an
      ``autoscaling_config`` from ``min_workers`` to ``max_workers`` (0: scale to zero) that
      keeps each replica's ``predict_concurrency × batch_size`` slots busy;
    - ``max_ongoing_requests``: twice those slots (at least Serve's 5), so that a replica's own
      batching fills its batches;
    - the ``ray:`` section on top (``num_cpus`` etc. as ``ray_actor_options``; its
      ``autoscaling_config`` merged into the one above);
    - with ``sequence_batching``, the request router that keeps sequences sticky
      (:data:`ROUTER_CLASS`, named by import path so that nothing here imports Ray).
    """
    label = model_label(config.name, config.version)
    section = ray_section(config, label)
    slots = config.predict_concurrency * config.batch_size
    options: dict[str, Any] = {
        "name": deployment_name(config),
        "max_ongoing_requests": max(5, 2 * slots),
        "ray_actor_options": {k: section[k] for k in sorted(ACTOR_KEYS & set(section))},
    }
    low, high = config.min_workers, max(config.max_workers, config.min_workers)
    scaling = section.pop("autoscaling_config", None)
    if "num_replicas" in section:
        pass  # the section's own choice, below
    elif low == high and scaling is None:
        options["num_replicas"] = low
    else:
        options["autoscaling_config"] = {
            "min_replicas": low,
            "max_replicas": high,
            "target_ongoing_requests": max(1, slots),
            **(scaling or {}),
        }
    for key in sorted(DEPLOYMENT_KEYS & set(section)):
        options[key] = section[key]
    if config.sequence_batching:
        options["request_router_config"] = {
            "request_router_class": ROUTER_CLASS,
            "request_router_kwargs": {"deployment": options["name"], "label": label},
        }
    return options


def local_cpus(needed: float) -> int:
    """The logical CPUs of a local Ray instance for an application whose replicas reserve
    ``needed``: the machine's cores, or more when the replicas ask for more (one each by
    default), so that every model of a directory such as ``examples/`` starts on one machine."""
    cores = os.cpu_count() or 1
    return max(cores, int(needed + 0.999))
