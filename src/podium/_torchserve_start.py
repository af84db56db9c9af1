"""TorchServe's ``config.properties``, read into Podium's settings (issue 22, section 1).

Each key goes through the settings tables' TorchServe column: a server key sets the Podium
settings whose ``torchserve`` spelling it is (``inference_address`` sets ``host`` and
``http_port``); a server-wide default for models (``default_workers_per_model``,
``job_queue_size``, ``default_response_timeout``) applies to every model whose own config does
not set it; ``models={...}`` gives one model's settings by the model table's TorchServe
spellings (``minWorkers``, ``batchSize``, ...). A key Podium cannot honour is named, with why,
never ignored in silence.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ._model_fields import FIELDS, Kind
from ._properties import PropertiesError, models_of, parse_properties
from ._server_fields import MODEL_DEFAULTS, foreign

__all__ = ["TorchServeConfig", "read_ts_config"]

#: TorchServe's keys that Podium does not honour, and why (the start log names each one set).
NOT_HONOURED: Mapping[str, str] = {
    "number_of_netty_threads": "Podium's listeners run on one event loop (--threads sizes the "
    "pool for sync model code)",
    "netty_client_threads": "no Netty here",
    "number_of_gpu": "each model says where it runs (devices, docs/devices.md); the server "
    "uses every GPU NVML finds: limit them with CUDA_VISIBLE_DEVICES",
    "model_metrics_auto_detect": "every metric a handler records is on /metrics already (as "
    "with model_metrics_auto_detect=true)",
    "disable_system_metrics": "TorchServe's system metric names are read when /metrics is "
    "scraped (--ts-metrics prometheus), never collected in the background",
    "async_logging": "Podium's logging writes once per event-loop turn",
    "keystore": "TLS is not served: put a TLS proxy in front",
    "keystore_pass": "TLS is not served: put a TLS proxy in front",
    "keystore_type": "TLS is not served: put a TLS proxy in front",
    "certificate_file": "TLS is not served: put a TLS proxy in front",
    "private_key_file": "TLS is not served: put a TLS proxy in front",
    "enable_grpc_ssl": "TLS is not served: put a TLS proxy in front",
    "default_service_handler": "a model names its handler in its archive",
    "service_envelope": "envelopes are not supported",
    "model_snapshot": "Podium keeps no snapshots (as with --ncs)",
    "workflow_store": "TorchServe's workflows (.war, /workflows, /wfpredict) are not served: "
    "docs/migrating.md (Workflows) says what to use instead",
    "ipex_enable": "Intel's extension is not managed by Podium",
    "cpu_launcher_enable": "Podium does not launch workers through a CPU launcher",
    "cpu_launcher_args": "Podium does not launch workers through a CPU launcher",
    "token_expiration_min": "set it with --token-expiration (minutes)",
    "enable_model_api": "Podium's management API registers models with its key",
    "default_startup_timeout": "a model loads until it is ready or fails",
    "unregister_model_timeout": "unregistering drains the model's calls",
}

#: Keys TorchServe reads that need no setting here (what they say is Podium's behaviour).
QUIET = frozenset({"model_server_home", "prefer_direct_buffer", "use_native_io", "io_ratio",
                   "initial_worker_port", "initial_distribution_port", "decode_input_request",
                   "blacklist_env_vars", "use_env_allowed_urls", "version"})  # fmt: skip


@dataclass
class TorchServeConfig:
    """What a ``config.properties`` says, in Podium's words."""

    settings: dict[str, Any] = field(default_factory=dict)  # server settings by key
    defaults: dict[str, Any] = field(default_factory=dict)  # model keys, unless a model sets them
    models: dict[str, dict[str, Any]] = field(default_factory=dict)  # model name → model keys
    load_models: list[str] = field(default_factory=list)  # load_models, as listed
    notes: list[str] = field(default_factory=list)  # keys not honoured, with why


def _address(where: str, key: str, value: str) -> tuple[str, int]:
    parts = urlsplit(value if "://" in value else f"http://{value}")
    if parts.scheme == "https":
        raise PropertiesError(
            f"{where}: '{key}' asks for HTTPS ({value}); Podium serves no TLS: give an http:// "
            "address and put a TLS proxy in front"
        )
    if parts.scheme != "http" or parts.hostname is None or parts.port is None:
        raise PropertiesError(f"{where}: '{key}' must be http://HOST:PORT, got {value!r}")
    return parts.hostname, parts.port


def _typed(where: str, key: str, kind: Kind, value: str) -> Any:
    try:
        match kind:
            case Kind.INTEGER:
                return int(value)
            case Kind.NUMBER:
                return float(value)
            case Kind.FLAG:
                if value.strip().lower() not in ("true", "false"):
                    raise ValueError(value)
                return value.strip().lower() == "true"
            case Kind.LIST:
                return tuple(v.strip() for v in value.split(",") if v.strip())
            case _:  # text, and paths: ServerConfig makes a Path of it
                return value
    except ValueError:
        raise PropertiesError(f"{where}: '{key}' is not a {kind.value}: {value!r}") from None


_MODEL_KEYS = {spec.torchserve: spec for spec in FIELDS.values() if spec.torchserve}


def _model_settings(where: str, name: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    """One model's ``models={...}`` entry as Podium's model keys."""
    found: dict[str, Any] = {}
    for key, value in settings.items():
        if key in ("marName", "defaultVersion"):
            continue  # where the archive is, which version is default: read by the caller
        spec = _MODEL_KEYS.get(key)
        if spec is None:
            raise PropertiesError(
                f"{where}: 'models.{name}' sets '{key}', which Podium does not read "
                f"(it reads: {', '.join(sorted(_MODEL_KEYS))}, marName, defaultVersion)"
            )
        found[spec.key] = value
    return found


def read_ts_config(path: Path | None, environ: Mapping[str, str] | None = None) -> TorchServeConfig:
    """``path`` (a ``config.properties``; None: none) as Podium's settings; ``PropertiesError``
    names the key it cannot take. With ``enable_envvars_config=true``, ``TS_<KEY>`` environment
    variables win over the file, as in TorchServe."""
    if path is None:
        return TorchServeConfig()
    where = str(path)
    try:
        keys = parse_properties(path.read_text(encoding="utf-8"), where)
    except OSError as exc:
        raise PropertiesError(f"{where}: cannot be read: {exc.strerror}") from None
    environ = os.environ if environ is None else environ
    if keys.get("enable_envvars_config", "").strip().lower() == "true":
        for name, value in environ.items():
            if name.startswith("TS_") and name != "TS_CONFIG_FILE":
                keys[name[3:].lower()] = value
    keys.pop("enable_envvars_config", None)
    found = TorchServeConfig()
    for key, value in keys.items():
        if key == "models":
            for name, versions in models_of(value, where).items():
                for version, given in versions.items():
                    mine = _model_settings(where, name, given)
                    if given.get("marName"):
                        found.load_models.append(f"{name}={given['marName']}")
                    if given.get("defaultVersion"):
                        mine["default_version"] = version
                    found.models.setdefault(name, {}).update(mine)
            continue
        if key == "load_models":
            found.load_models.extend(v.strip() for v in value.split(",") if v.strip())
            continue
        defaults = MODEL_DEFAULTS.get(("torchserve", key))
        if defaults is not None:
            for model_key in defaults:
                spec = FIELDS[model_key]
                found.defaults[model_key] = _typed(where, key, spec.kind, value)
            continue
        rows = foreign("torchserve", key)
        if len(rows) == 2:  # an address: its host and its port
            host, port = _address(where, key, value)
            found.settings[rows[0].key] = host
            found.settings[rows[1].key] = port
        elif len(rows) == 1:
            setting = rows[0]
            typed = _typed(where, key, setting.kind, value)
            if key == "disable_token_authorization":  # TorchServe's says the opposite
                typed = False if typed else None
            elif key == "metrics_mode":  # TorchServe reads it without blanks, in any case
                typed = "".join(str(typed).split()).lower()
            found.settings[setting.key] = typed
        elif key in NOT_HONOURED:
            found.notes.append(f"{where}: '{key}' is not honoured: {NOT_HONOURED[key]}")
        elif key not in QUIET:
            found.notes.append(f"{where}: '{key}' is not a key Podium knows; it is ignored")
    return found
