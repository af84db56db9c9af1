"""``mlserver.settings``: what a runtime knows about itself (``ModelSettings``) and the server.

Plain pydantic models: unlike MLServer, values are not read from ``MLSERVER_MODEL_*`` environment
variables or ``.env`` files (Podium reads ``model-settings.json`` only; see docs/mlserver.md).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, PrivateAttr

from .types import MetadataTensor
from .version import __version__

__all__ = [
    "DEFAULT_ENVIRONMENTS_DIR",
    "DEFAULT_METRICS_DIR",
    "DEFAULT_PARALLEL_WORKERS",
    "ENV_FILE_SETTINGS",
    "ENV_PREFIX_MODEL_SETTINGS",
    "ENV_PREFIX_SETTINGS",
    "BaseSettings",
    "CORSSettings",
    "ModelParameters",
    "ModelSettings",
    "Settings",
]

# MLServer's names for its settings' sources and defaults (Podium's loader reads none of the
# environment or .env: docs/mlserver.md).
ENV_FILE_SETTINGS = ".env"
ENV_PREFIX_SETTINGS = "MLSERVER_"
ENV_PREFIX_MODEL_SETTINGS = "MLSERVER_MODEL_"
DEFAULT_PARALLEL_WORKERS = 1
DEFAULT_ENVIRONMENTS_DIR = os.path.join(os.getcwd(), ".envs")
DEFAULT_METRICS_DIR = os.path.join(os.getcwd(), ".metrics")


def _import_path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__name__}"


def _import_string(path: str) -> Any:
    module_name, _, attribute = path.rpartition(".")
    if not module_name:
        raise ImportError(f"'{path}' is not an import path of the form 'module.Class'")
    return getattr(importlib.import_module(module_name), attribute)


@contextlib.contextmanager
def _on_sys_path(folder: str) -> Iterator[None]:
    sys.path.insert(0, folder)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(folder)


class BaseSettings(BaseModel):
    """The base of settings a runtime declares for itself (MLServer's is pydantic-settings'):
    a field not given is read from the environment variable ``<env_prefix><FIELD>`` (any case;
    JSON for a value that is not text), ``env_prefix`` set in ``model_config``. Unlike
    pydantic-settings, ``.env`` files are not read."""

    model_config = ConfigDict(protected_namespaces=(), extra="ignore")

    def __init__(self, **values: Any) -> None:
        prefix = str(self.model_config.get("env_prefix", "")).upper()
        environ = {key.upper(): value for key, value in os.environ.items()}
        for name, field in type(self).model_fields.items():
            if name in values or (field.alias and field.alias in values):
                continue
            raw = environ.get(prefix + name.upper())
            if raw is None:
                continue
            try:
                values[name] = json.loads(raw) if field.annotation is not str else raw
            except ValueError:
                values[name] = raw
        super().__init__(**values)


class CORSSettings(BaseModel):
    """MLServer's ``cors_settings`` (what its REST server's CORS middleware is given)."""

    model_config = ConfigDict(extra="ignore")

    allow_origins: list[str] | None = []
    allow_origin_regex: str | None = None
    allow_credentials: bool | None = False
    allow_methods: list[str] | None = ["GET"]
    allow_headers: list[str] | None = []
    expose_headers: list[str] | None = []
    max_age: int | None = 600


class Settings(BaseModel):
    """Server-wide settings, for runtimes that read them; Podium's own come from its CLI."""

    model_config = ConfigDict(protected_namespaces=(), extra="ignore")

    debug: bool = True
    parallel_workers: int = 1
    parallel_workers_timeout: int = 5
    model_repository_root: str = "."
    load_models_at_startup: bool = True
    server_name: str = "mlserver"
    server_version: str = __version__
    extensions: list[str] = []
    host: str = "0.0.0.0"
    http_port: int = 8080
    root_path: str = ""
    grpc_port: int = 8081
    grpc_max_message_length: int | None = None
    metrics_endpoint: str | None = "/metrics"
    metrics_port: int = 8082
    use_structured_logging: bool = False
    cache_enabled: bool = False
    cache_size: int = 100
    gzip_enabled: bool = True


class ModelParameters(BaseModel):
    """Per-instance parameters: ``uri`` of the artefacts, ``version``, ``content_type`` (the
    default codec), ``extra`` (free-form, for the runtime); unknown keys are kept."""

    model_config = ConfigDict(protected_namespaces=(), extra="allow")

    uri: str | None = None
    version: str | None = None
    environment_path: str | None = None
    environment_tarball: str | None = None
    inference_pool_gid: str | None = None
    autogenerate_inference_pool_gid: bool = False
    format: str | None = None
    content_type: str | None = None
    extra: dict[str, Any] | None = {}


class ModelSettings(BaseModel):
    """A model's ``model-settings.json``, as the runtime receives it in ``__init__``."""

    model_config = ConfigDict(protected_namespaces=(), extra="ignore")

    _source: str | None = PrivateAttr(default=None)
    _implementation: Any = PrivateAttr(default=None)

    name: str = ""
    platform: str = ""
    versions: list[str] = []
    inputs: list[MetadataTensor] = []
    outputs: list[MetadataTensor] = []
    parallel_workers: int | None = None
    warm_workers: bool = False
    max_batch_size: int = 0
    max_batch_time: float = 0.0
    implementation_: str = Field(
        validation_alias=AliasChoices("implementation", "MLSERVER_MODEL_IMPLEMENTATION"),
        serialization_alias="implementation",
    )
    parameters: ModelParameters | None = None
    cache_enabled: bool = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # ModelSettings(implementation=SomeModel) works with the class itself, as in MLServer.
        implementation = kwargs.get("implementation")
        if inspect.isclass(implementation):
            kwargs["implementation"] = _import_path(implementation)
        super().__init__(*args, **kwargs)
        if inspect.isclass(implementation):
            self._implementation = implementation

    @classmethod
    def parse_file(cls, path: str) -> ModelSettings:  # type: ignore[override]
        """Read a ``model-settings.json``; relative ``implementation`` imports resolve next to it."""
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        data["_source"] = str(path)
        return cls.model_validate(data)

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> ModelSettings:
        source = None
        if isinstance(obj, dict) and "_source" in obj:
            obj = dict(obj)
            source = obj.pop("_source")
        settings = super().model_validate(obj, *args, **kwargs)
        if source:
            settings._source = str(source)
        return settings

    @property
    def implementation(self) -> Any:
        """The runtime class (imported with the settings file's folder on ``sys.path``)."""
        if self._implementation is not None:
            return self._implementation
        if not self._source:
            return _import_string(self.implementation_)
        with _on_sys_path(str(Path(self._source).parent)):
            return _import_string(self.implementation_)

    @implementation.setter
    def implementation(self, value: type) -> None:
        self.implementation_ = _import_path(value)
        self._implementation = value

    @property
    def version(self) -> str | None:
        return self.parameters.version if self.parameters is not None else None
