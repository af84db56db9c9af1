"""Configuration values: a model's ``config.yaml`` and the server's settings.

Both are plain frozen dataclasses, validated when built (``ValueError`` / ``DefinitionError`` with
the key named), never with ``assert``. YAML is parsed here and nowhere else. A model's settings
are one table, :data:`FIELDS` (each field's key, default, bounds, unit, and its keys in
TorchServe's and MLServer's files), which drives every validator of them.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from ._model_fields import FIELDS, UNSET, Field, Kind, Spelling, Unit
from .errors import DefinitionError, MissingSecret
from .types import DATATYPES, Signature, TensorSpec

__all__ = [
    "FIELDS",
    "MODEL_CONTROLS",
    "MODEL_KEYS",
    "UNSET",
    "Field",
    "Kind",
    "ModelConfig",
    "Secrets",
    "ServerConfig",
    "Spelling",
    "Unit",
    "load_yaml",
    "normalize_host",
    "normalize_origin",
    "origin_of",
    "signature_of",
]


def load_yaml(path: Path) -> dict[str, Any]:
    """Parse a YAML mapping from ``path``; an empty file is an empty mapping."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
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
        # Between fields: max_workers defaults to min_workers, and is at least it.
        low, high = FIELDS["min_workers"], FIELDS["max_workers"]
        if high.attr not in values and low.attr in values:
            values[high.attr] = max(values[low.attr], high.minimum)
        if values.get(low.attr, low.default) > values.get(high.attr, high.default):
            problems.append(
                f"{where}: '{low.key}' ({values[low.attr]}) must not exceed "
                f"'{high.key}' ({values[high.attr]})"
            )
        if "model_metadata" in values:
            try:
                signature_of(values["model_metadata"])
            except ValueError as exc:
                problems.append(f"{where}: {exc}")
        if problems:
            raise DefinitionError("; ".join(problems), problems)
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


#: ``model_control``'s values: which listeners may load and unload models.
MODEL_CONTROLS = ("management", "inference")
#: ``shared_memory``'s values: whether clients may register system shared memory regions.
SHARED_MEMORY = ("off", "system")


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """The server's settings. The CLI merges defaults, ``--config FILE`` and flags, flags last."""

    host: str = "0.0.0.0"
    http_port: int = 8080
    management_host: str = "127.0.0.1"
    management_port: int = 8081
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 8082
    metrics: bool = True  # the metrics listener (GET /metrics); the counters run either way
    grpc_port: int = 7070
    grpc_management_port: int = 7071
    # The management API (REST and gRPC): where `url`s are found, which remote ones may be fetched.
    model_store: Path | None = None  # TorchServe's --model-store: registration looks here first
    allowed_urls: tuple[str, ...] = ()  # regexes a remote url must match in full; none: refused
    max_download_size: int = 1024 * 1024 * 1024  # bytes an allowed url may download
    # Token authorization (TorchServe's), keys in key_file. None (default): the management API
    # needs its key (if the key file can be written); True: every listener; False: none.
    auth: bool | None = None
    key_file: Path | None = None  # where the keys are written; None: ./key_file.json
    token_expiration: float = 0  # minutes a key lasts; 0: until the server stops or it is rotated
    # Who may call the management API (REST): names Host may carry besides IP literals and
    # localhost, and web origins whose pages may call it (default: none).
    management_allowed_hosts: tuple[str, ...] = ()
    management_allowed_origins: tuple[str, ...] = ()
    # Start with the management API on a non-loopback address without token authorization.
    allow_open_management: bool = False
    # Which listeners may load and unload models (OIP's repository load/unload): "management"
    # (the management listeners only) or "inference" (the inference listeners too).
    model_control: str = "management"
    # System shared memory (Triton's extension; docs/security.md): "off" or "system" (clients
    # on the server's host may register regions of POSIX shared memory objects); only objects
    # whose names start with shm_key_prefix (empty: any); at most max_shm_regions regions and
    # max_shm_size bytes mapped at once.
    shared_memory: str = "off"
    shm_key_prefix: str = ""
    max_shm_regions: int = 64
    max_shm_size: int = 16 << 30
    max_request_size: int = 64 * 1024 * 1024
    # Every HTTP listener's connection limits (docs/security.md, server/_limits.py).
    max_url_size: int = 8 * 1024  # bytes of a request target; longer: 414
    max_header_size: int = 64 * 1024  # bytes of a request head; larger: 431
    max_headers: int = 100  # header fields of a request; more: 431
    header_timeout: float = 10.0  # seconds to send a complete request head; later: 408
    keep_alive_timeout: float = 30.0  # seconds a connection may stay idle between requests
    body_timeout: float = 10.0  # a request body must bring min_body_rate in each such period
    min_body_rate: int = 1024  # bytes/s; 0: only a body that stalls for body_timeout is closed
    max_connections: int | None = None  # per HTTP listener; None: 1000 or what fds allow
    grpc_max_message_size: int = 64 * 1024 * 1024  # either way; larger: RESOURCE_EXHAUSTED
    grpc_stream_format: str = "triton"  # ModelStreamInfer's framing: triton or mlserver
    # OIP gRPC answers: "request" (raw_output_contents when the request used raw inputs, typed
    # contents otherwise) or "raw" (always raw_output_contents, as Triton).
    grpc_output_contents: str = "request"
    grpc_threads: int = 128  # gRPC calls not relayed (reflection); 0: grpc.aio on the loop
    # Both gRPC listeners' limits (docs/security.md "gRPC limits", server/grpc/_limits.py);
    # seconds. Their connections are capped by max_connections, the handshake by header_timeout.
    grpc_max_concurrent_streams: int = 100  # calls at once per connection; more wait (HTTP/2)
    grpc_max_connection_idle: float = 300.0  # a connection without calls is closed; 0: never
    grpc_max_connection_age: float = 1800.0  # then GOAWAY: new calls on a new connection; 0: never
    grpc_max_connection_age_grace: float | None = None  # then calls in flight are cut; None: never
    grpc_keepalive_time: float = 60.0  # the server pings a connection quiet this long; 0: never
    grpc_keepalive_timeout: float = 20.0  # an unanswered ping closes the connection
    grpc_min_ping_interval: float = 5.0  # a client pinging more often gets GOAWAY (3rd strike)
    # The headers of a stateful sequence: the id, and NAME_start / NAME_end (TorchServe's names).
    sequence_header: str = "ts_request_sequence_id"
    # What registration may read and fetch, and how much (docs/security.md, "Archives and
    # downloads"): a download's deadline in seconds; how far a TorchServe archive may expand,
    # in bytes and as a multiple of its own size; local urls outside the model store and the
    # start paths.
    download_timeout: float = 300.0
    max_archive_size: int = 4 << 30
    max_archive_ratio: float = 100.0
    allow_any_local_path: bool = False
    secrets_dir: Path | None = None
    threads: int = 64
    log_level: str = "info"
    # Logs and traces (docs/operations.md): one access line per request (podium.access, INFO);
    # every line as text or as JSON; OpenTelemetry spans (also on when the standard OTEL_*
    # variables name an exporter or an endpoint).
    access_log: bool = True
    log_format: str = "text"
    otel: bool = False
    models: tuple[str, ...] = ()
    # Shutdown (docs/operations.md): seconds calls in flight get to finish after SIGTERM, and
    # seconds between readiness turning false and new connections being refused (None: 5 in a
    # Kubernetes pod, where endpoints learn of it late, else 0).
    graceful_timeout: float = 30.0
    shutdown_delay: float | None = None
    # Serving one truss whose model cannot load: exit 1, as Truss's server does (False), or
    # stay up, not ready, with the reason in readiness and the log, as for any other model.
    keep_running: bool = False
    # Models that declare requirements (a truss's, a TorchServe archive's) run in worker
    # processes from an environment of their own with them installed (runtime/environments.py).
    install_model_requirements: bool = False

    def _check_archives(self) -> None:
        timeout = self.download_timeout
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise ValueError(f"download-timeout must be a number of seconds > 0, got {timeout!r}")
        object.__setattr__(self, "download_timeout", float(timeout))
        size = self.max_archive_size
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"max-archive-size must be >= 1 byte (an integer), got {size!r}")
        ratio = self.max_archive_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not ratio >= 1:
            raise ValueError(f"max-archive-ratio must be a number >= 1, got {ratio!r}")
        object.__setattr__(self, "max_archive_ratio", float(ratio))
        if not isinstance(self.allow_any_local_path, bool):
            raise ValueError(
                f"allow-any-local-path must be true or false, got {self.allow_any_local_path!r}"
            )

    def __post_init__(self) -> None:
        self._check_archives()
        for name in (
            "http_port",
            "management_port",
            "metrics_port",
            "grpc_port",
            "grpc_management_port",
        ):
            port = getattr(self, name)
            if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
                raise ValueError(
                    f"{name.replace('_', '-')} must be a port number 0-65535, got {port!r}"
                )
        for name, unit in (
            ("max_request_size", " byte"),
            ("grpc_max_message_size", " byte"),
            ("threads", ""),
            ("max_shm_regions", ""),
            ("max_shm_size", " byte"),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"{name.replace('_', '-')} must be >= 1{unit} (an integer), got {value!r}"
                )

        if (
            isinstance(self.grpc_threads, bool)
            or not isinstance(self.grpc_threads, int)
            or self.grpc_threads < 0
        ):
            raise ValueError(
                f"grpc-threads must be an integer >= 0 (0: grpc.aio), got {self.grpc_threads!r}"
            )
        if self.grpc_max_message_size > 2**31 - 1:  # grpc's options are C ints
            raise ValueError(
                "grpc-max-message-size must be at most 2147483647 bytes, "
                f"got {self.grpc_max_message_size!r}"
            )
        if self.grpc_stream_format not in ("mlserver", "triton"):
            raise ValueError(
                f"grpc-stream-format must be mlserver or triton, got {self.grpc_stream_format!r}"
            )
        if self.grpc_output_contents not in ("request", "raw"):
            raise ValueError(
                f"grpc-output-contents must be request or raw, got {self.grpc_output_contents!r}"
            )
        if (
            not isinstance(self.sequence_header, str)
            or not self.sequence_header
            or not all(c.isalnum() or c in "-_" for c in self.sequence_header)
        ):
            raise ValueError(
                "sequence-header must be a header name (letters, digits, '-' and '_'), "
                f"got {self.sequence_header!r}"
            )
        if not isinstance(self.install_model_requirements, bool):
            raise ValueError(
                "install-model-requirements must be true or false, "
                f"got {self.install_model_requirements!r}"
            )
        if not isinstance(self.keep_running, bool):
            raise ValueError(f"keep-running must be true or false, got {self.keep_running!r}")
        if not isinstance(self.metrics, bool):
            raise ValueError(f"metrics must be true or false, got {self.metrics!r}")
        if self.shared_memory not in SHARED_MEMORY:
            raise ValueError(
                f"shared-memory must be {' or '.join(SHARED_MEMORY)}, got {self.shared_memory!r}"
            )
        if self.shared_memory == "system" and not os.path.isdir("/dev/shm"):
            raise ValueError(
                "shared-memory system needs POSIX shared memory objects in /dev/shm (Linux); "
                "this system has none"
            )
        prefix = self.shm_key_prefix
        if not isinstance(prefix, str) or "/" in prefix.lstrip("/"):
            raise ValueError(
                f"shm-key-prefix must be the start of an object name (no '/'), got {prefix!r}"
            )
        if self.log_level not in ("debug", "info", "warning", "error"):
            raise ValueError(
                f"log-level must be debug, info, warning or error, got {self.log_level!r}"
            )
        if self.log_format not in ("text", "json"):
            raise ValueError(f"log-format must be text or json, got {self.log_format!r}")
        for name in ("access_log", "otel"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(
                    f"{name.replace('_', '-')} must be true or false, got {getattr(self, name)!r}"
                )
        self._check_management()
        self._check_connection_limits()
        self._check_grpc_limits()
        self._check_shutdown()

    def _check_shutdown(self) -> None:
        for name in ("graceful_timeout", "shutdown_delay"):
            value = getattr(self, name)
            if value is None and name == "shutdown_delay":
                continue
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not 0 <= value < 1e6
            ):
                raise ValueError(
                    f"{name.replace('_', '-')} must be a number of seconds >= 0, got {value!r}"
                )
            object.__setattr__(self, name, float(value))

    def _check_connection_limits(self) -> None:
        for name in ("max_url_size", "max_header_size", "max_headers", "min_body_rate"):
            value = getattr(self, name)
            least = 0 if name == "min_body_rate" else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(
                    f"{name.replace('_', '-')} must be an integer >= {least}, got {value!r}"
                )
        for name in ("header_timeout", "keep_alive_timeout", "body_timeout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1e9:
                raise ValueError(
                    f"{name.replace('_', '-')} must be a number of seconds > 0 (and < 1e9), "
                    f"got {value!r}"
                )
            object.__setattr__(self, name, float(value))
        cap = self.max_connections
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
            raise ValueError(f"max-connections must be an integer >= 1, got {cap!r}")

    def _check_grpc_limits(self) -> None:
        streams = self.grpc_max_concurrent_streams
        if isinstance(streams, bool) or not isinstance(streams, int) or not 1 <= streams < 2**31:
            raise ValueError(
                f"grpc-max-concurrent-streams must be an integer >= 1, got {streams!r}"
            )
        for name in (
            "grpc_max_connection_idle",
            "grpc_max_connection_age",
            "grpc_max_connection_age_grace",
            "grpc_keepalive_time",
            "grpc_keepalive_timeout",
            "grpc_min_ping_interval",
        ):
            value = getattr(self, name)
            if value is None and name == "grpc_max_connection_age_grace":
                continue
            least = 0.001 if name == "grpc_keepalive_timeout" else 0
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not least <= value < 1e9
            ):
                raise ValueError(
                    f"{name.replace('_', '-')} must be a number of seconds >= {least:g} "
                    f"(and < 1e9), got {value!r}"
                )
            object.__setattr__(self, name, float(value))

    def _check_management(self) -> None:
        # YAML gives strings and lists: normalise them (a frozen dataclass, hence __setattr__).
        for name in ("model_store", "key_file"):
            value = getattr(self, name)
            if isinstance(value, str):
                object.__setattr__(self, name, Path(value))
        urls = self.allowed_urls
        if isinstance(urls, str):
            urls = (urls,)
        if not isinstance(urls, list | tuple) or not all(isinstance(u, str) for u in urls):
            raise ValueError(f"allowed-urls must be a list of regular expressions, got {urls!r}")
        for pattern in urls:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(
                    f"allowed-urls: {pattern!r} is not a regular expression: {exc}"
                ) from None
        object.__setattr__(self, "allowed_urls", tuple(urls))
        size = self.max_download_size
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"max-download-size must be >= 1 byte (an integer), got {size!r}")
        expiration = self.token_expiration
        if (
            isinstance(expiration, bool)
            or not isinstance(expiration, int | float)
            or expiration < 0
        ):
            raise ValueError(
                f"token-expiration must be a number of minutes >= 0, got {expiration!r}"
            )
        if self.auth is not None and not isinstance(self.auth, bool):
            raise ValueError(
                "auth must be true (every listener), false (none) or null (the default: "
                f"the management API), got {self.auth!r}"
            )
        if self.model_control not in MODEL_CONTROLS:
            raise ValueError(
                f"model-control must be {' or '.join(MODEL_CONTROLS)}, got {self.model_control!r}"
            )
        if not isinstance(self.allow_open_management, bool):
            raise ValueError(
                f"allow-open-management must be true or false, got {self.allow_open_management!r}"
            )
        for name, normalize in (
            ("management_allowed_hosts", normalize_host),
            ("management_allowed_origins", normalize_origin),
        ):
            values = getattr(self, name)
            if isinstance(values, str):
                values = (values,)
            if not isinstance(values, list | tuple):
                raise ValueError(f"{name.replace('_', '-')} must be a list, got {values!r}")
            object.__setattr__(self, name, tuple(dict.fromkeys(normalize(v) for v in values)))

    @property
    def management_auth(self) -> bool:
        """Whether the management API asks for its key (unless the key file cannot be written
        where none was named: see ``docs/security.md``)."""
        return self.auth is not False

    @classmethod
    def keys(cls) -> frozenset[str]:
        """The keys a ``--config`` YAML file may set (the flags' names with ``_``)."""
        return frozenset(f.name for f in dataclasses.fields(cls))


def normalize_host(name: str) -> str:
    """A ``management_allowed_hosts`` entry, lower-cased, without a trailing dot; ``ValueError``
    if it is not a host name."""
    if not isinstance(name, str):
        raise ValueError(f"management-allowed-hosts: {name!r} is not a host name")
    host = name.strip().lower().rstrip(".")
    if not host or not all(
        label and len(label) <= 63 and all(c.isalnum() or c == "-" for c in label)
        for label in host.split(".")
    ):
        raise ValueError(
            f"management-allowed-hosts: {name!r} is not a host name (letters, digits, '-' and "
            "'.', without port or wildcard)"
        )
    return host


def normalize_origin(origin: str) -> str:
    """A ``management_allowed_origins`` entry as :func:`origin_of` gives it; ``ValueError`` for
    anything else, ``*`` included: a wildcard would let every web page drive the API."""
    found = origin_of(origin) if isinstance(origin, str) else None
    if found is None:
        raise ValueError(
            f"management-allowed-origins: {origin!r} is not a web origin; give scheme://host[:port] "
            "(http or https, no path; '*' and 'null' are refused: they would admit every page)"
        )
    return found


def origin_of(value: str) -> str | None:
    """A web origin (an ``Origin`` header's value) as ``scheme://host[:port]``: lower-cased,
    without the scheme's default port; None if ``value`` is not an http(s) origin."""
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    host = parts.hostname
    if scheme not in ("http", "https") or not host or "@" in parts.netloc:
        return None
    if parts.path or parts.query or parts.fragment:
        return None
    if ":" in host:
        host = f"[{host}]"
    if port is None or port == {"http": 80, "https": 443}[scheme]:
        return f"{scheme}://{host}"
    return f"{scheme}://{host}:{port}"


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
