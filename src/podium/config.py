"""Configuration values: a model's ``config.yaml`` and the server's settings.

Both are plain frozen dataclasses, validated when built (``ValueError`` / ``DefinitionError`` with
the key named), never with ``assert``. YAML is parsed here and nowhere else.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .errors import DefinitionError, MissingSecret

__all__ = ["MODEL_KEYS", "ModelConfig", "Secrets", "ServerConfig", "load_yaml"]


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


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """A model's settings, from its ``config.yaml``. Defaults are the documented ones."""

    name: str
    version: str | None = None
    model_class_name: str = "Model"
    predict_concurrency: int = 1
    batch_size: int = 1
    max_batch_delay: float = 5.0  # milliseconds
    max_queue_size: int = 1000
    stream_buffer: int = 16
    default_version: str | None = None  # which version unversioned routes use (else the highest)
    workers: str = "thread"  # "thread": instances in the server process; "process": one per process
    min_workers: int = 1  # instances started (TorchServe's minWorkers)
    max_workers: int = 1  # the most instances a scale request may ask for (maxWorkers)
    response_timeout: float = 120.0  # seconds a predict may run (responseTimeout); 0 = no limit
    # Stateful sequences (TorchServe's sequence batching): a sequence's requests run in order on
    # the worker that holds its state.
    sequence_batching: bool = False
    sequence_max_idle_ms: float = 60_000.0  # a sequence idle this long ends; 0 = never
    sequence_timeout_ms: float = 0.0  # a sequence older than this ends; 0 = no absolute limit
    max_sequence_queue_size: int = 1  # requests one sequence may have waiting
    max_num_sequences: int = 0  # open sequences at once; 0 = max_workers x batch_size x 4
    # Continuous batching: the model's step() advances up to batch_size requests at a time;
    # requests join and leave between steps.
    continuous_batching: bool = False
    model_metadata: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)  # the parsed file, handed to __init__

    @classmethod
    def from_mapping(cls, data: dict[str, Any], *, default_name: str, where: str) -> ModelConfig:
        """Validate ``data`` (a parsed ``config.yaml``); every problem names the key and the file."""
        problems: list[str] = []
        unknown = sorted(set(data) - MODEL_KEYS, key=str)  # YAML keys need not be strings
        for key in unknown:
            allowed = ", ".join(sorted(MODEL_KEYS))
            problems.append(f"{where}: unknown key '{key}' (allowed: {allowed})")
        values: dict[str, Any] = {"name": default_name, "raw": dict(data)}

        def positive_int(key: str, minimum: int) -> None:
            if key in data:
                value = data[key]
                if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                    problems.append(
                        f"{where}: '{key}' must be an integer >= {minimum}, got {value!r}"
                    )
                else:
                    values[key] = value

        if "name" in data:
            if not isinstance(data["name"], str) or not data["name"].strip():
                problems.append(f"{where}: 'name' must be a non-empty string, got {data['name']!r}")
            elif "/" in data["name"]:
                problems.append(f"{where}: 'name' must not contain '/', got {data['name']!r}")
            else:
                values["name"] = data["name"]
        for key in ("version", "default_version"):
            if key in data and data[key] is not None:
                version = data[key]
                if (
                    isinstance(version, bool)
                    or not isinstance(version, str | int)
                    or "/" in str(version)
                    or not str(version).strip()  # "" would read as "no version" in every route
                ):
                    problems.append(
                        f"{where}: '{key}' must be a non-empty string or an integer, without '/', got {version!r}"
                    )
                else:
                    values[key] = str(version)
        if "model_class_name" in data:
            if not isinstance(data["model_class_name"], str) or not data["model_class_name"]:
                problems.append(f"{where}: 'model_class_name' must be a non-empty string")
            else:
                values["model_class_name"] = data["model_class_name"]
        positive_int("predict_concurrency", 1)
        positive_int("batch_size", 1)
        positive_int("max_queue_size", 1)
        positive_int("stream_buffer", 1)
        positive_int("min_workers", 0)
        positive_int("max_workers", 1)
        if "max_workers" not in values and "min_workers" in values:
            values["max_workers"] = max(values["min_workers"], 1)  # max defaults to min
        if values.get("min_workers", 1) > values.get("max_workers", 1):
            problems.append(
                f"{where}: 'min_workers' ({values['min_workers']}) must not exceed "
                f"'max_workers' ({values['max_workers']})"
            )
        if "workers" in data:
            if data["workers"] not in ("thread", "process"):
                problems.append(
                    f"{where}: 'workers' must be 'thread' or 'process', got {data['workers']!r}"
                )
            else:
                values["workers"] = data["workers"]
        positive_int("max_sequence_queue_size", 1)
        positive_int("max_num_sequences", 0)
        for key in ("sequence_batching", "continuous_batching"):
            if key in data:
                if not isinstance(data[key], bool):
                    problems.append(f"{where}: '{key}' must be true or false, got {data[key]!r}")
                else:
                    values[key] = data[key]
        for key in ("sequence_max_idle_ms", "sequence_timeout_ms"):
            if key in data:
                value = data[key]
                if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                    problems.append(
                        f"{where}: '{key}' must be a number of milliseconds >= 0, got {value!r}"
                    )
                else:
                    values[key] = float(value)
        if "response_timeout" in data:
            timeout = data["response_timeout"]
            if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout < 0:
                problems.append(
                    f"{where}: 'response_timeout' must be a number of seconds >= 0, got {timeout!r}"
                )
            else:
                values["response_timeout"] = float(timeout)
        if "max_batch_delay" in data:
            delay = data["max_batch_delay"]
            if isinstance(delay, bool) or not isinstance(delay, int | float) or delay < 0:
                problems.append(
                    f"{where}: 'max_batch_delay' must be a number of milliseconds >= 0, got {delay!r}"
                )
            else:
                values["max_batch_delay"] = float(delay)
        if "model_metadata" in data and data["model_metadata"] is not None:
            if not isinstance(data["model_metadata"], dict):
                problems.append(f"{where}: 'model_metadata' must be a mapping")
            else:
                values["model_metadata"] = data["model_metadata"]
        if problems:
            raise DefinitionError("; ".join(problems), problems)
        return cls(**values)


MODEL_KEYS = frozenset(f.name for f in dataclasses.fields(ModelConfig) if f.name not in {"raw"})


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """The server's settings. The CLI merges defaults, ``--config FILE`` and flags, flags last."""

    host: str = "0.0.0.0"
    http_port: int = 8080
    management_host: str = "127.0.0.1"
    management_port: int = 8081
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 8082
    grpc_port: int = 7070
    grpc_management_port: int = 7071
    # The management API (REST and gRPC): where `url`s are found, which remote ones may be fetched.
    model_store: Path | None = None  # TorchServe's --model-store: registration looks here first
    allowed_urls: tuple[str, ...] = ()  # regexes a remote url must match in full; none: refused
    max_download_size: int = 1024 * 1024 * 1024  # bytes an allowed url may download
    auth: bool = False  # token authorization (TorchServe's): keys in key_file
    key_file: Path | None = None  # where --auth writes the keys; None: ./key_file.json
    token_expiration: float = 0  # minutes a key lasts; 0: until the server stops or it is rotated
    max_request_size: int = 64 * 1024 * 1024
    grpc_max_message_size: int = 64 * 1024 * 1024  # either way; larger: RESOURCE_EXHAUSTED
    grpc_stream_format: str = "mlserver"  # ModelStreamInfer's framing: mlserver or triton
    grpc_threads: int = 128  # gRPC calls not relayed (reflection); 0: grpc.aio on the loop
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
    models: tuple[str, ...] = ()

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
        if (
            not isinstance(self.sequence_header, str)
            or not self.sequence_header
            or not all(c.isalnum() or c in "-_" for c in self.sequence_header)
        ):
            raise ValueError(
                "sequence-header must be a header name (letters, digits, '-' and '_'), "
                f"got {self.sequence_header!r}"
            )
        if self.log_level not in ("debug", "info", "warning", "error"):
            raise ValueError(
                f"log-level must be debug, info, warning or error, got {self.log_level!r}"
            )
        self._check_management()

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
        if not isinstance(self.auth, bool):
            raise ValueError(f"auth must be true or false, got {self.auth!r}")

    @classmethod
    def keys(cls) -> frozenset[str]:
        """The keys a ``--config`` YAML file may set (the flags' names with ``_``)."""
        return frozenset(f.name for f in dataclasses.fields(cls))


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
