"""Helpers for the TorchServe adapter tests: archive a test handler, load it, fake a request."""

from __future__ import annotations

from concurrent.futures import Executor
from pathlib import Path
from typing import Any

from conftest import TEST_MODELS

from podium.model.discovery import discover
from podium.model.torchserve import ArchiveLimits, archive_model
from podium.model.torchserve._archive import extract_owned
from podium.runtime.loading import build_instance, prepare

TS_MODELS = TEST_MODELS / "torchserve"


def archive(name: str, dest: Path, fmt: str = "no-archive", **extra: Any) -> Path:
    """The test handler ``name`` as a TorchServe model (a directory, .mar or .tar.gz)."""
    src = TS_MODELS / name
    config = src / "model-config.yaml"
    return archive_model(
        model_name=extra.pop("model_name", name),
        handler=src / "handler.py",
        export_path=dest,
        config_file=config if config.exists() else None,
        archive_format=fmt,
        **extra,
    )


def extract(path: Path, limits: ArchiveLimits | None = None) -> Path:
    """``path`` extracted, its hold never released: kept until the process exits."""
    return extract_owned(path, limits)[0]


async def load(path: Path, executor: Executor) -> Any:
    """Discover, prepare, build and load the model at ``path``: its ModelInstance."""
    (source,) = discover(path)
    instance = build_instance(source, prepare(source), secrets={}, executor=executor)
    await instance.load()
    return instance


class FakeRequest:
    """What the adapter reads of a request: headers and the ASGI scope's path and query."""

    def __init__(
        self,
        headers: dict[str, str] | None = None,
        path: str = "/predictions/m",
        query: bytes = b"",
    ) -> None:
        self.headers = {k.lower(): v for k, v in (headers or {}).items()}
        self.scope = {"path": path, "query_string": query}
