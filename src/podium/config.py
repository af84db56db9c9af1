"""Configuration values: a model's ``config.yaml`` and the server's settings.

Both are plain frozen dataclasses, validated when built (``ValueError`` / ``DefinitionError`` with
the key named), never with ``assert``. YAML is parsed here and nowhere else. Each is one table:
a model's settings :data:`FIELDS` (``_model_fields.py``), the server's :data:`SETTINGS`
(``_server_fields.py``: also ``podium serve``'s flags and their help); each row gives a key,
default, bounds, unit, and its keys in TorchServe's and MLServer's files, and drives every
validator of it.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import yaml

from ._model_fields import FIELDS, UNSET, Field, Kind, ResponseCacheSettings, Spelling, Unit
from ._server_fields import (
    MODEL_DEFAULTS,
    SETTINGS,
    Group,
    Setting,
    foreign,
    normalize_host,
    normalize_origin,
    origin_of,
)
from .errors import DefinitionError, MissingSecret
from .types import DATATYPES, Signature, TensorSpec

__all__ = [
    "FIELDS",
    "MODEL_DEFAULTS",
    "MODEL_KEYS",
    "SETTINGS",
    "UNSET",
    "Auth",
    "ConnectionLimits",
    "Field",
    "Group",
    "GrpcLimits",
    "Kind",
    "Listeners",
    "Logs",
    "ManagementAccess",
    "ModelConfig",
    "Protocols",
    "Registration",
    "ResponseCacheSettings",
    "Secrets",
    "ServerConfig",
    "Serving",
    "Setting",
    "SharedMemory",
    "ShutdownTimes",
    "Spelling",
    "Unit",
    "Web",
    "foreign",
    "load_yaml",
    "read_config_file",
    "normalize_host",
    "normalize_origin",
    "origin_of",
    "signature_of",
]


def load_yaml(path: Path) -> dict[str, Any]:
    """Parse a YAML mapping from ``path``; an empty file is an empty mapping."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise DefinitionError(f"{path}: invalid YAML: {exc}") from exc
    except OSError as exc:
        raise DefinitionError(f"{path}: cannot be read: {exc.strerror}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise DefinitionError(
            f"{path}: must be a mapping of keys to values, not {type(data).__name__}"
        )
    return data


def read_config_file(path: Path) -> dict[str, Any]:
    """``podium serve --config``'s YAML file: its settings under the table's keys (a ``-`` read
    as ``_``), with the paths in it (``models``, ``secrets_dir``) relative to the file, and
    ``triton`` / ``grpc_threads`` left for the caller to take. ``DefinitionError`` for a file
    that is no YAML mapping, an unknown key, or ``models`` that is not a list of paths."""
    data = {str(k).replace("-", "_"): v for k, v in load_yaml(path).items()}
    unknown = sorted(set(data) - SETTINGS.keys() - {"triton", "grpc_threads"})
    if unknown:
        allowed = ", ".join(sorted(SETTINGS))
        raise DefinitionError(
            f"{path}: unknown key(s) {', '.join(unknown)} (allowed: {allowed}, triton)"
        )
    if "models" in data:
        models = data["models"]
        if isinstance(models, str):
            models = [models]
        if not isinstance(models, list):
            raise DefinitionError(f"{path}: 'models' must be a list of paths")
        data["models"] = tuple(str(path.parent / str(m)) for m in models)
    if data.get("secrets_dir") is not None:
        data["secrets_dir"] = path.parent / str(data["secrets_dir"])
    return data


def _default(key: str) -> Any:
    return FIELDS[key].default


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """A model's settings, from its ``config.yaml``. Each attribute is a row of :data:`FIELDS`,
    which gives its key, default, bounds and unit, and how TorchServe and MLServer spell it."""

    name: str
    version: str | None = _default("version")
    model_class_name: str = _default("model_class_name")
    predict_concurrency: int = _default("predict_concurrency")
    batch_size: int = _default("batch_size")
    max_batch_delay_ms: float = _default("max_batch_delay")
    max_queue_size: int = _default("max_queue_size")
    # Overload (docs/scaling.md): the longest queue wait, and priority levels with aging.
    max_queue_delay_ms: float = _default("max_queue_delay")
    priority_levels: int = _default("priority_levels")
    default_priority: int = _default("default_priority")
    priority_aging_ms: float = _default("priority_aging")
    stream_buffer: int = _default("stream_buffer")
    default_version: str | None = _default("default_version")
    workers: str = _default("workers")
    min_workers: int = _default("min_workers")
    max_workers: int = _default("max_workers")
    response_timeout_s: float = _default("response_timeout")
    # Stateful sequences (TorchServe's sequence batching): a sequence's requests run in order on
    # the worker that holds its state.
    sequence_batching: bool = _default("sequence_batching")
    sequence_max_idle_ms: float = _default("sequence_max_idle_ms")
    sequence_timeout_ms: float = _default("sequence_timeout_ms")
    max_sequence_queue_size: int = _default("max_sequence_queue_size")
    max_num_sequences: int = _default("max_num_sequences")
    # Continuous batching: the model's step() advances up to batch_size requests at a time;
    # requests join and leave between steps.
    continuous_batching: bool = _default("continuous_batching")
    metrics_config: Path | None = _default("metrics_config")
    ts_metrics: str = _default("ts_metrics")
    # Devices (docs/devices.md): where the workers run, how many on each, GPUs per worker.
    devices: str | tuple[int, ...] = _default("devices")
    workers_per_device: int = _default("workers_per_device")
    devices_per_worker: int = _default("devices_per_worker")
    predict_concurrency_per: str = _default("predict_concurrency_per")
    # The response cache (docs/scaling.md): None, off.
    response_cache: ResponseCacheSettings | None = _default("response_cache")
    model_metadata: dict[str, Any] = field(default_factory=dict)
    # Ray Serve's options for the model's deployment (podium.ray checks them; docs/ray.md).
    ray: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)  # the parsed file, handed to __init__
    #: The tensors ``model_metadata`` declares (:func:`signature_of`), made when the config is.
    signature: Signature = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        try:
            signature = signature_of(self.model_metadata)
        except ValueError as exc:
            raise DefinitionError(f"model '{self.name}': {exc}") from None
        object.__setattr__(self, "signature", signature)

    @classmethod
    def from_mapping(cls, data: dict[str, Any], *, default_name: str, where: str) -> ModelConfig:
        """Validate ``data`` (a parsed ``config.yaml``); every problem names the key and the file."""
        problems: list[str] = []
        unknown = sorted(set(data) - MODEL_KEYS, key=str)  # YAML keys need not be strings
        for key in unknown:
            allowed = ", ".join(sorted(MODEL_KEYS))
            problems.append(f"{where}: unknown key '{key}' (allowed: {allowed})")
        values: dict[str, Any] = {"name": default_name, "raw": dict(data)}
        for key, spec in FIELDS.items():
            if key in data:
                try:
                    value = spec.check(data[key])
                except ValueError as exc:
                    problems.append(f"{where}: {exc}")
                    continue
                if value is not UNSET:
                    values[spec.attr] = value
        # Between fields: max_workers defaults to min_workers; each pair's first is at most its
        # second.
        if "max_workers" not in values and "min_workers" in values:
            values["max_workers"] = max(values["min_workers"], FIELDS["max_workers"].minimum)
        for low, high in (("min_workers", "max_workers"), ("default_priority", "priority_levels")):
            least, most = (values.get(key, FIELDS[key].default) for key in (low, high))
            if least > most:
                problems.append(f"{where}: '{low}' ({least}) must not exceed '{high}' ({most})")
        if "model_metadata" in values:
            try:
                signature_of(values["model_metadata"])
            except ValueError as exc:
                problems.append(f"{where}: {exc}")
        DefinitionError.check(problems)
        return cls(**values)


#: The keys of a ``config.yaml`` (and of a ``podium:`` section in TorchServe's and MLServer's files).
MODEL_KEYS = frozenset(FIELDS)

#: The keys of one tensor described in ``model_metadata`` (MLServer's ``MetadataTensor``).
TENSOR_KEYS = ("name", "datatype", "shape", "parameters")


def signature_of(metadata: Mapping[str, Any], *, prefix: str = "model_metadata.") -> Signature:
    """The tensors a model's ``model_metadata`` declares: ``inputs`` and ``outputs`` (lists of
    ``{name, datatype, shape[, parameters]}``; ``-1`` in a shape is a dimension of any size) and
    ``max_batch_size`` (0 when absent: when above 0, every declared shape starts with ``-1``,
    the batch dimension, as Triton's metadata shapes do). ``ValueError`` names the first
    problem, with ``prefix`` before the keys it names (``model_metadata.inputs[1].datatype``)."""
    lists: dict[str, tuple[TensorSpec, ...]] = {}
    for key in ("inputs", "outputs"):
        entries = metadata.get(key)
        if entries is None:
            lists[key] = ()
            continue
        if not isinstance(entries, list):
            raise ValueError(
                f"'{prefix}{key}' must be a list of tensors ({{name, datatype, shape}}), "
                f"got {entries!r}"
            )
        specs = [_tensor_spec(f"{prefix}{key}[{i}]", e) for i, e in enumerate(entries)]
        names = [spec.name for spec in specs]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"'{prefix}{key}' names {', '.join(twice)} more than once")
        lists[key] = tuple(specs)
    batch = metadata.get("max_batch_size", 0)
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 0:
        raise ValueError(f"'{prefix}max_batch_size' must be an integer >= 0, got {batch!r}")
    if batch:
        for key, declared in lists.items():
            for spec in declared:
                if not spec.shape or spec.shape[0] != -1:
                    raise ValueError(
                        f"'{prefix}max_batch_size' is {batch}, so every declared shape starts "
                        f"with the batch dimension -1; {key} {spec.name} has shape "
                        f"{list(spec.shape)}"
                    )
    return Signature(lists["inputs"], lists["outputs"], batch)


def _tensor_spec(where: str, entry: Any) -> TensorSpec:
    if not isinstance(entry, dict):
        raise ValueError(f"'{where}' must be a mapping of name, datatype and shape, got {entry!r}")
    unknown = sorted(str(key) for key in entry if key not in TENSOR_KEYS)
    if unknown:
        raise ValueError(
            f"'{where}' has unknown key(s) {', '.join(unknown)} (allowed: {', '.join(TENSOR_KEYS)})"
        )
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"'{where}.name' must be a non-empty string, got {name!r}")
    datatype = entry.get("datatype")
    if datatype not in DATATYPES:
        raise ValueError(
            f"'{where}.datatype' must be an OIP datatype ({', '.join(sorted(DATATYPES))}), "
            f"got {datatype!r}"
        )
    shape = entry.get("shape")
    if not isinstance(shape, list) or not all(
        isinstance(dim, int) and not isinstance(dim, bool) and dim >= -1 for dim in shape
    ):
        raise ValueError(
            f"'{where}.shape' must be a list of integers >= -1 (-1: any size), got {shape!r}"
        )
    parameters = entry.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        raise ValueError(f"'{where}.parameters' must be a mapping, got {parameters!r}")
    return TensorSpec(name, datatype, tuple(shape))


def _setting(key: str) -> Any:
    return SETTINGS[key].default


class _Group:
    """A group of ``ServerConfig``: each field a row of :data:`SETTINGS` (by ``attr``), checked
    and converted by it when the group is made."""

    __slots__ = ()
    GROUP: ClassVar[Group]

    def __post_init__(self) -> None:
        for setting in _BY_GROUP[self.GROUP]:
            object.__setattr__(self, setting.attr, setting.check(getattr(self, setting.attr)))


@dataclass(frozen=True, slots=True)
class Listeners(_Group):
    """Where each listener binds; ``metrics``: whether the metrics listener runs at all."""

    GROUP = Group.LISTENERS
    host: str = _setting("host")
    http_port: int = _setting("http_port")
    management_host: str = _setting("management_host")
    management_port: int = _setting("management_port")
    metrics_host: str = _setting("metrics_host")
    metrics_port: int = _setting("metrics_port")
    metrics: bool = _setting("metrics")
    grpc_port: int = _setting("grpc_port")
    grpc_management_port: int = _setting("grpc_management_port")


@dataclass(frozen=True, slots=True)
class Protocols(_Group):
    """How the front ends read requests and answer them."""

    GROUP = Group.PROTOCOLS
    grpc_max_message_size: int = _setting("grpc_max_message_size")
    grpc_stream_format: str = _setting("grpc_stream_format")
    grpc_output_contents: str = _setting("grpc_output_contents")
    sequence_header: str = _setting("sequence_header")
    grpc_aio: bool = _setting("grpc_aio")
    server_name: str = _setting("server_name")
    max_request_size: int = _setting("max_request_size")


@dataclass(frozen=True, slots=True)
class ConnectionLimits(_Group):
    """What every HTTP listener allows each connection and request (``server/_limits.py``);
    ``max_connections`` None: 1000, or fewer where the open-files limit is low (decided at
    start)."""

    GROUP = Group.HTTP
    max_url_size: int = _setting("max_url_size")
    max_header_size: int = _setting("max_header_size")
    max_headers: int = _setting("max_headers")
    header_timeout: float = _setting("header_timeout")
    keep_alive_timeout: float = _setting("keep_alive_timeout")
    body_timeout: float = _setting("body_timeout")
    min_body_rate: int = _setting("min_body_rate")
    max_connections: int | None = _setting("max_connections")


#: GrpcLimits' fields that are no settings, checked as settings are: the HTTP listeners'
#: connection cap and handshake time (``ServerConfig`` gives it theirs), and two fixed limits.
_GRPC_OWN: dict[str, Setting] = {
    s.key: s
    for s in (
        Setting("max_connections", Kind.INTEGER, 1000, Group.GRPC, "", minimum=1, below=2**31),
        Setting("handshake_timeout", Kind.NUMBER, _setting("header_timeout"), Group.GRPC, "",
                minimum=0.001, below=math.inf, unit=Unit.SECONDS),
        Setting("max_ping_strikes", Kind.INTEGER, 2, Group.GRPC, "", below=2**31),
        Setting("max_metadata_size", Kind.INTEGER, 16 * 1024, Group.GRPC, "", minimum=1,
                below=2**31),
    )
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class GrpcLimits(_Group):
    """What a gRPC listener allows its clients (``server/grpc/_limits.py``); times in seconds
    (grpc counts whole milliseconds, up to about 24 days: longer is unlimited), 0 meaning never
    where the setting says so. Besides the ``--grpc-*`` settings: the connection cap and the
    handshake time (the HTTP listeners' ``max_connections`` and ``header_timeout``), and two
    limits that are not settings."""

    GROUP = Group.GRPC
    max_concurrent_streams: int = _setting("grpc_max_concurrent_streams")
    max_connection_idle: float = _setting("grpc_max_connection_idle")
    max_connection_age: float = _setting("grpc_max_connection_age")
    max_connection_age_grace: float | None = _setting("grpc_max_connection_age_grace")
    keepalive_time: float = _setting("grpc_keepalive_time")
    keepalive_timeout: float = _setting("grpc_keepalive_timeout")
    min_ping_interval: float = _setting("grpc_min_ping_interval")
    max_connections: int = _GRPC_OWN["max_connections"].default
    handshake_timeout: float = _GRPC_OWN["handshake_timeout"].default
    max_ping_strikes: int = _GRPC_OWN["max_ping_strikes"].default  #: 0: never GOAWAY for pings
    max_metadata_size: int = _GRPC_OWN["max_metadata_size"].default


@dataclass(frozen=True, slots=True)
class Serving(_Group):
    """The models given in the config file (``paths``, relative to it), where their secrets
    are, the threads for sync model code and their scheduling policy, what a lone truss that
    cannot load does, and whether models run from environments of their own with their
    requirements installed."""

    GROUP = Group.SERVING
    paths: tuple[str, ...] = _setting("models")
    secrets_dir: Path | None = _setting("secrets_dir")
    threads: int = _setting("threads")
    sched_batch: bool = _setting("sched_batch")
    keep_running: bool = _setting("keep_running")
    install_model_requirements: bool = _setting("install_model_requirements")


@dataclass(frozen=True, slots=True)
class Registration(_Group):
    """What the management API's registration may read and fetch, and how much."""

    GROUP = Group.REGISTRATION
    model_store: Path | None = _setting("model_store")
    allowed_urls: tuple[str, ...] = _setting("allowed_urls")
    download_timeout: float = _setting("download_timeout")
    max_archive_size: int = _setting("max_archive_size")
    max_archive_ratio: float = _setting("max_archive_ratio")
    allow_any_local_path: bool = _setting("allow_any_local_path")
    max_download_size: int = _setting("max_download_size")


@dataclass(frozen=True, slots=True)
class Auth(_Group):
    """Token authorization: ``enabled`` None (the default) for the management API (if the key
    file can be written), True for every listener, False for none."""

    GROUP = Group.AUTH
    enabled: bool | None = _setting("auth")
    key_file: Path | None = _setting("key_file")
    token_expiration: float = _setting("token_expiration")


@dataclass(frozen=True, slots=True)
class ManagementAccess(_Group):
    """Who may call the management API (REST) besides its key, and which listeners may load
    and unload models."""

    GROUP = Group.MANAGEMENT
    allowed_hosts: tuple[str, ...] = _setting("management_allowed_hosts")
    allowed_origins: tuple[str, ...] = _setting("management_allowed_origins")
    allow_open: bool = _setting("allow_open_management")
    model_control: str = _setting("model_control")


@dataclass(frozen=True, slots=True)
class SharedMemory(_Group):
    """Triton's system shared memory extension: off, or on (``mode`` "system") for objects
    whose names start with ``key_prefix``, within ``max_regions`` and ``max_size`` bytes."""

    GROUP = Group.SHARED_MEMORY
    mode: str = _setting("shared_memory")
    key_prefix: str = _setting("shm_key_prefix")
    max_regions: int = _setting("max_shm_regions")
    max_size: int = _setting("max_shm_size")

    def __post_init__(self) -> None:
        _Group.__post_init__(self)
        if self.mode == "system" and not os.path.isdir("/dev/shm"):
            raise ValueError(
                "shared-memory system needs POSIX shared memory objects in /dev/shm (Linux); "
                "this system has none"
            )


@dataclass(frozen=True, slots=True)
class ShutdownTimes(_Group):
    """Seconds calls in flight get after SIGTERM, and seconds between readiness turning false
    and new connections being refused (None: 5 in a Kubernetes pod, else 0)."""

    GROUP = Group.SHUTDOWN
    graceful_timeout: float = _setting("graceful_timeout")
    shutdown_delay: float | None = _setting("shutdown_delay")


@dataclass(frozen=True, slots=True)
class Logs(_Group):
    """The log's level and format, the access log, OpenTelemetry spans, TorchServe's metric
    names (``ts_metrics``) and its ``metrics.yaml``."""

    GROUP = Group.LOGS
    level: str = _setting("log_level")
    format: str = _setting("log_format")
    access_log: bool = _setting("access_log")
    otel: bool = _setting("otel")
    ts_metrics: str = _setting("ts_metrics")
    metrics_config: Path | None = _setting("metrics_config")

    def torchserve_fields(self) -> dict[str, Any]:
        """The model keys every TorchServe model takes from these settings (its handler's
        ``context.metrics`` reads them): ``metrics_config`` (made absolute) and ``ts_metrics``,
        where they differ from the defaults."""
        found: dict[str, Any] = {}
        if self.metrics_config is not None:
            found["metrics_config"] = self.metrics_config.resolve()
        if self.ts_metrics != "off":
            found["ts_metrics"] = self.ts_metrics
        return found


@dataclass(frozen=True, slots=True)
class Web(_Group):
    """What browsers and proxies meet on the HTTP inference listener (``server/http/_web.py``):
    CORS (on when an origin or ``allow_origin_regex`` is given), gzip of answers, and the path
    prefix a proxy serves it under ("": none)."""

    GROUP = Group.WEB
    allow_origins: tuple[str, ...] = _setting("cors_allow_origins")
    allow_origin_regex: str | None = _setting("cors_allow_origin_regex")
    allow_credentials: bool = _setting("cors_allow_credentials")
    allow_methods: tuple[str, ...] = _setting("cors_allow_methods")
    allow_headers: tuple[str, ...] = _setting("cors_allow_headers")
    expose_headers: tuple[str, ...] = _setting("cors_expose_headers")
    max_age: int = _setting("cors_max_age")
    gzip: bool = _setting("gzip")
    gzip_min_size: int = _setting("gzip_min_size")
    root_path: str = _setting("root_path")

    @property
    def cors(self) -> bool:
        """Whether the listener speaks CORS at all."""
        return bool(self.allow_origins) or self.allow_origin_regex is not None


_BY_GROUP: dict[Group, tuple[Setting, ...]] = {
    group: tuple(s for s in (*SETTINGS.values(), *_GRPC_OWN.values()) if s.group is group)
    for group in Group
}


@dataclass(frozen=True, slots=True, init=False)
class ServerConfig:
    """The server's settings, made from keys of :data:`SETTINGS` (``ServerConfig(http_port=0,
    max_url_size=4096)``; ``ValueError`` naming the flag of a value that does not hold), held
    in frozen groups that go as they are to what uses them. The CLI merges defaults,
    ``--config FILE`` and flags, flags last."""

    listeners: Listeners
    protocols: Protocols
    http: ConnectionLimits
    grpc: GrpcLimits
    serving: Serving
    registration: Registration
    auth: Auth
    management: ManagementAccess
    shared_memory: SharedMemory
    shutdown: ShutdownTimes
    logs: Logs
    web: Web

    def __init__(self, **values: Any) -> None:
        unknown = sorted(set(values) - set(SETTINGS))
        if unknown:
            raise TypeError(f"no such server setting(s): {', '.join(unknown)}")
        given: dict[Group, dict[str, Any]] = {group: {} for group in Group}
        for key, value in values.items():
            setting = SETTINGS[key]
            given[setting.group][setting.attr] = value
        made: dict[Group, Any] = {}
        for group, cls in _GROUPS.items():
            if group is Group.GRPC:  # the HTTP listeners' handshake time and connection cap
                http = made[Group.HTTP]
                given[group]["handshake_timeout"] = http.header_timeout
                if http.max_connections is not None:
                    given[group]["max_connections"] = http.max_connections
            made[group] = cls(**given[group])
            object.__setattr__(self, group.value, made[group])


#: Each group's class, in the order ``ServerConfig`` makes them (HTTP's before gRPC's).
_GROUPS: dict[Group, type[_Group]] = {
    cls.GROUP: cls
    for cls in (Listeners, Protocols, ConnectionLimits, GrpcLimits, Serving, Registration, Auth,
                ManagementAccess, SharedMemory, ShutdownTimes, Logs, Web)
}  # fmt: skip


class Secrets(Mapping[str, str]):
    """Read-only secrets: ``PODIUM_SECRET_<NAME>`` from the environment, else a file in ``directory``.

    A missing secret raises :class:`podium.errors.MissingSecret` naming it. Values are read on
    access, so rotating a mounted secret file needs no restart.
    """

    def __init__(
        self, directory: Path | None = None, environ: Mapping[str, str] | None = None
    ) -> None:
        self._directory = directory
        self._environ = os.environ if environ is None else environ

    @property
    def directory(self) -> Path | None:
        """The directory secrets are read from after the environment (``--secrets-dir``)."""
        return self._directory

    @staticmethod
    def env_name(name: str) -> str:
        return "PODIUM_SECRET_" + re.sub(r"[^A-Za-z0-9]", "_", name).upper()

    def __getitem__(self, name: str) -> str:
        value = self._environ.get(self.env_name(name))
        if value is not None:
            return value
        if self._directory is not None and "/" not in name and name not in {".", ".."}:
            path = self._directory / name
            if path.is_file():
                return path.read_text(encoding="utf-8").rstrip("\n")
        where = f" or a file '{name}' in {self._directory}" if self._directory else ""
        raise MissingSecret(
            f"secret '{name}' is not set: expected environment variable {self.env_name(name)}{where}"
        )

    def __iter__(self) -> Iterator[str]:
        names = {
            k[len("PODIUM_SECRET_") :].lower()
            for k in self._environ
            if k.startswith("PODIUM_SECRET_")
        }
        if self._directory is not None and self._directory.is_dir():
            names.update(p.name for p in self._directory.iterdir() if p.is_file())
        return iter(sorted(names))

    def __len__(self) -> int:
        return sum(1 for _ in self)
