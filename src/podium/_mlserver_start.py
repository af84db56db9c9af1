"""MLServer's server settings, read into Podium's (issue 22, section 1): ``settings.json`` and
the ``MLSERVER_*`` environment variables, as MLServer 1.7.1 reads them.

MLServer's ``Settings`` is a pydantic-settings model (prefix ``MLSERVER_``, names matched without
regard to case, complex fields as JSON): a variable gives a field the file leaves out, and the
file wins where both say. ``mlserver start FOLDER`` reads ``FOLDER/settings.json`` and serves
``FOLDER`` (its ``model_repository_root`` is replaced by the folder).

Each key goes through the settings table's MLServer column (:func:`podium._server_fields.foreign`):
a server key sets the Podium settings whose ``mlserver`` spelling it is, converted where the two
say it differently (``debug`` is a log level, ``metrics_endpoint`` null is no metrics listener);
``parallel_workers`` is the default of every model whose own settings do not say
(:data:`~podium._server_fields.MODEL_DEFAULTS`). A key Podium cannot honour is named with why;
none is ignored in silence.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from .config import FIELDS, MODEL_DEFAULTS, UNSET, foreign
from .errors import DefinitionError
from .model import ModelSource
from .model.mlserver import (
    MLSERVER_CACHE_SIZE,
    environment_model,
    environment_values,
    lax_value,
    read_json_object,
)

__all__ = [
    "MLSERVER_DEFAULTS",
    "SETTINGS_FILE",
    "MLServerConfig",
    "MLServerSettingsError",
    "read_settings_json",
    "server_settings",
]

SETTINGS_FILE = "settings.json"
ENV_PREFIX = "MLSERVER_"

#: MLServer's own defaults where they differ from Podium's, for ``podium mlserver start`` (its
#: gRPC port is Podium's management port: the management API moves to 8085).
MLSERVER_DEFAULTS: Mapping[str, Any] = {
    "grpc_port": 8081,
    "management_port": 8085,
    "grpc_stream_format": "mlserver",
    "gzip": True,  # gzip_enabled's default (docs/migrating.md)
}


class MLServerSettingsError(ValueError):
    """A ``settings.json`` or ``MLSERVER_*`` value MLServer itself would refuse."""


# How a value is read: "bool", "int", "str", "json" (any JSON value); "?": null allowed.
_KINDS: Mapping[str, str] = {
    "debug": "bool", "parallel_workers": "int", "parallel_workers_timeout": "int",
    "environments_dir": "str", "model_repository_implementation": "str?",
    "model_repository_root": "str", "model_repository_implementation_args": "json",
    "load_models_at_startup": "bool", "server_name": "str", "server_version": "str",
    "extensions": "json", "host": "str", "http_port": "int", "root_path": "str",
    "grpc_port": "int", "grpc_max_message_length": "int?", "cors_settings": "json",
    "metrics_endpoint": "str?", "metrics_port": "int", "metrics_rest_server_prefix": "str",
    "metrics_dir": "str", "use_structured_logging": "bool", "logging_settings": "json",
    "kafka_enabled": "bool", "kafka_servers": "str", "kafka_topic_input": "str",
    "kafka_topic_output": "str", "tracing_server": "str?", "cache_enabled": "bool",
    "cache_size": "int", "gzip_enabled": "bool",
}  # fmt: skip

# Keys Podium does not honour, and why; each applies only when the value asks for something
# Podium does not do (the predicate), so a file that repeats MLServer's default is quiet.
_NOT_HONOURED: Mapping[str, tuple[Callable[[Any], bool], str]] = {
    "server_version": (lambda v: True, "GET /v2 answers Podium's version"),
    "extensions": (bool, "GET /v2 lists the extensions Podium serves"),
    "load_models_at_startup": (
        lambda v: not v,
        "Podium loads every model it finds at start; unload one through the repository API "
        "(with --model-control inference) or serve only the models you want",
    ),
    "parallel_workers_timeout": (
        lambda v: v != 5,
        "worker processes stop with the server: --graceful-timeout bounds the calls in flight",
    ),
    "model_repository_implementation": (
        lambda v: v is not None,
        "Podium reads model folders itself (model-settings.json, model.py, archives, trusses)",
    ),
    "model_repository_implementation_args": (
        bool,
        "Podium reads model folders itself (model-settings.json, model.py, archives, trusses)",
    ),
    "metrics_rest_server_prefix": (
        lambda v: v != "rest_server",
        "Podium's HTTP metrics have names of their own (docs/metrics.md)",
    ),
    "logging_settings": (
        lambda v: v is not None,
        "Podium's logging is set with --log-level and --log-format (json)",
    ),
    "kafka_enabled": (bool, "Podium serves no Kafka topics"),
    # MLServer caches a model when both this and its model-settings.json's cache_enabled say
    # so; in Podium each model's own cache_enabled (or response_cache) is enough
    "cache_enabled": (
        lambda v: v is False,
        "each model's own cache_enabled (model-settings.json) turns its response cache on "
        "(docs/mlserver.md)",
    ),
    # one cache of N answers shared by every model in MLServer; one per model in Podium
    "cache_size": (
        lambda v: v != MLSERVER_CACHE_SIZE,
        f"each model's cache keeps {MLSERVER_CACHE_SIZE} answers (MLServer's default); set "
        "podium.response_cache.max_entries in its model-settings.json for another bound",
    ),
}

#: Keys that need nothing here: what they say is Podium's behaviour, or they only matter with a
#: key above that is off.
_QUIET = frozenset({"metrics_dir", "kafka_servers", "kafka_topic_input", "kafka_topic_output"})


@dataclass
class MLServerConfig:
    """What MLServer's settings say, in Podium's words."""

    settings: dict[str, Any] = field(default_factory=dict)  # server settings by key
    defaults: dict[str, Any] = field(default_factory=dict)  # model keys, unless a model sets them
    environ: dict[str, str] = field(default_factory=dict)  # variables set unless already set
    notes: list[str] = field(default_factory=list)  # keys not honoured, with why
    source: str = ""  # what was read (for the start log)
    model: ModelSource | None = None  # mlserver start: the model of MLSERVER_MODEL_* alone


def _checked(where: str, key: str, kind: str, value: Any) -> Any:
    """``value`` (from JSON) as pydantic's lax mode reads it for ``kind`` (``?``: null allowed;
    :func:`~podium.model.mlserver.lax_value`); ``MLServerSettingsError`` otherwise."""
    if value is None:
        if kind.endswith("?") or kind == "json":
            return None
        raise MLServerSettingsError(f"{where}: '{key}' may not be null")
    base = kind.rstrip("?")
    try:
        return lax_value(base, value)
    except ValueError:
        name = {"bool": "true or false", "int": "an integer", "str": "a string"}.get(base)
        name = name or "a list of strings"
        raise MLServerSettingsError(f"{where}: '{key}' must be {name}, got {value!r}") from None


def read_settings_json(
    path: Path | None, environ: Mapping[str, str] | None = None
) -> MLServerConfig:
    """``path`` (a ``settings.json``; None: none) with the ``MLSERVER_*`` variables of
    ``environ`` under it, as Podium's settings; ``MLServerSettingsError`` names the key MLServer
    would refuse."""
    kinds = {key: kind.rstrip("?") for key, kind in _KINDS.items()}
    try:  # MLSERVER_<KEY> variables (any case)
        values = environment_values(os.environ if environ is None else environ, ENV_PREFIX, kinds)
    except ValueError as exc:
        raise MLServerSettingsError(str(exc)) from None
    given_by = dict.fromkeys(values, "the environment")
    found = MLServerConfig()
    sources = [f"{ENV_PREFIX}* variables"] if values else []
    if path is not None:
        where = str(path)
        try:
            data = read_json_object(path)
        except DefinitionError as exc:
            raise MLServerSettingsError(exc.message) from None
        for key, value in data.items():
            if key not in _KINDS:
                found.notes.append(
                    f"{where}: '{key}' is not a setting of MLServer 1.7.1; ignored (as MLServer "
                    "ignores it)"
                )
                continue
            values[key] = _checked(where, key, _KINDS[key], value)
            given_by[key] = where
        sources.insert(0, where)
    found.source = " and ".join(sources)
    for key, value in values.items():
        _apply(found, given_by[key], key, value)
    return found


# MLServer's CORSSettings: each key's kind (null: its default, as Starlette would be given it).
_CORS_KINDS: Mapping[str, str] = {
    "allow_origins": "list?", "allow_origin_regex": "str?", "allow_credentials": "bool?",
    "allow_methods": "list?", "allow_headers": "list?", "expose_headers": "list?",
    "max_age": "int?",
}  # fmt: skip


def _cors(found: MLServerConfig, where: str, value: Any) -> None:
    """``cors_settings`` (MLServer's CORSSettings, an object) into the ``cors_*`` settings."""
    if not isinstance(value, dict):
        raise MLServerSettingsError(f"{where}: 'cors_settings' must be an object, got {value!r}")
    for key, item in value.items():
        kind = _CORS_KINDS.get(key)
        if kind is None:
            found.notes.append(
                f"{where}: 'cors_settings.{key}' is not a setting of MLServer 1.7.1; ignored (as "
                "MLServer ignores it)"
            )
            continue
        item = _checked(where, f"cors_settings.{key}", kind, item)
        for row in foreign("mlserver", f"cors_settings.{key}"):
            if item is not None:  # null: MLServer's default
                found.settings[row.key] = item


#: How a value of MLServer's becomes the value of the Podium setting(s) its table row names,
#: where the two say it differently.
_CONVERT: Mapping[str, Callable[[Any], Any]] = {
    "debug": lambda v: "debug" if v else "info",  # log_level
    "use_structured_logging": lambda v: "json" if v else "text",  # log_format
    "metrics_endpoint": lambda v: v is not None,  # metrics: null is no metrics listener
    "tracing_server": bool,  # otel
    "model_repository_root": lambda v: (v,),  # models (the command may replace it)
}


def _apply(found: MLServerConfig, where: str, key: str, value: Any) -> None:
    """One MLServer key's value, into ``found``."""
    defaults = MODEL_DEFAULTS.get(("mlserver", key))
    if defaults is not None:  # parallel_workers: every model's, unless its own settings say
        if value < 0:
            raise MLServerSettingsError(f"{where}: '{key}' must be 0 or more, got {value}")
        for model_key in defaults:
            spelling = FIELDS[model_key].mlserver
            converted = value if spelling is None else spelling.to_field(value, None)
            if converted is not UNSET:
                found.defaults[model_key] = converted
        return
    if key == "cors_settings":
        if value is not None:
            _cors(found, where, value)
        return
    rows = foreign("mlserver", key)
    if rows:
        if value is None and key not in _CONVERT:
            return  # null: MLServer's default (grpc_max_message_length)
        for row in rows:
            found.settings[row.key] = _CONVERT.get(key, lambda v: v)(value)
        if key == "tracing_server" and value:  # MLServer exports over OTLP/gRPC, no TLS
            endpoint = value if "://" in value else f"http://{value}"
            found.environ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = endpoint
            found.environ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] = "grpc"
        elif key == "metrics_endpoint" and value is not None and value.rstrip("/") != "/metrics":
            found.notes.append(
                f"{where}: 'metrics_endpoint' is {value!r}: Podium serves its metrics at "
                "/metrics on the metrics port"
            )
        return
    if key == "environments_dir":  # where environment tarballs are unpacked
        found.environ["PODIUM_ENVS"] = str(Path(value).resolve())
        return
    rule = _NOT_HONOURED.get(key)
    if rule is not None:
        asks, why = rule
        if asks(value):
            found.notes.append(f"{where}: '{key}' is not honoured: {why}")
    elif key not in _QUIET:
        found.notes.append(f"{where}: '{key}' is not honoured")


def server_settings(
    settings_file: Path | None,
    paths: list[Path],
    *,
    start: bool = False,
    environ: Mapping[str, str] | None = None,
) -> MLServerConfig:
    """MLServer's server settings for ``podium serve`` / ``podium mlserver start``: those of
    ``settings_file``, else of the ``settings.json`` in the one folder of ``paths``, with the
    ``MLSERVER_*`` variables under them; empty when there is no such file (for ``start``, as
    ``mlserver start`` reads them: the variables alone, over MLServer's own defaults; and
    where FOLDER holds no ``model-settings.json``, the model of ``MLSERVER_MODEL_*`` variables
    alone, MLServer's default model). With model paths given, ``model_repository_root`` is
    not read (``mlserver start FOLDER``
    replaces it with the folder). The variables it asks for (``environments_dir``,
    ``tracing_server``) are set here unless already set. ``click.UsageError`` for a value
    MLServer would refuse."""
    path = settings_file
    if path is None and len(paths) == 1 and (paths[0] / SETTINGS_FILE).is_file():
        path = paths[0] / SETTINGS_FILE
    if path is None and not start:
        return MLServerConfig()
    try:
        found = read_settings_json(path, environ)
    except MLServerSettingsError as exc:
        raise click.UsageError(str(exc)) from None
    if start:
        found.settings = {**MLSERVER_DEFAULTS, **found.settings}
        folder = paths[0]
        if not any(folder.glob("**/model-settings.json")):  # MLServer's default model
            try:
                found.model = environment_model(folder, environ)
            except DefinitionError as exc:
                raise click.UsageError(exc.message) from None
    if paths:
        found.settings.pop("models", None)
    for name, value in found.environ.items():
        os.environ.setdefault(name, value)
    return found
