"""``podium.compat.mlserver`` against MLServer 1.7.1's whole public surface.

tests/mlserver-1.7.1-public-names.json lists every public name of every module of MLServer
1.7.1 (generated from the tag by tests/mlserver_public_names.py, which says how). Each module a
runtime may import is provided under its ``mlserver`` path with every one of its names; the
rest (MLServer's own server: REST, gRPC, Kafka, workers, CLI...) are absent on purpose, each for
the reason below, which docs/mlserver.md repeats.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import uninstall_import_paths

from podium.compat.mlserver import install_import_paths

HERE = Path(__file__).resolve().parent
SURFACE = json.loads((HERE / "mlserver-1.7.1-public-names.json").read_text())["modules"]
DOCS = (HERE.parent / "docs" / "mlserver.md").read_text()

#: Modules (and their submodules) that are MLServer's server, not what a runtime uses.
ABSENT_MODULES = {
    "mlserver.batch_processing": "the `mlserver infer` client command",
    "mlserver.batching": "MLServer's adaptive batcher; Podium batches by model-settings.json",
    "mlserver.cache": "MLServer's response cache",
    "mlserver.cli": "MLServer's command line; `podium serve` replaces it",
    "mlserver.cloudevents": "the REST server's CloudEvents middleware",
    "mlserver.context": "the server's record of which model is running; Podium keeps its own",
    "mlserver.env": "environment tarballs, which Podium refuses",
    "mlserver.grpc": "MLServer's gRPC server; Podium's serves the same protocol",
    "mlserver.handlers.dataplane": "the server's data plane; Podium's replaces it",
    "mlserver.handlers.model_repository": "the server's repository handlers",
    "mlserver.kafka": "MLServer's Kafka server",
    "mlserver.metrics.logging": "the metrics server's logger",
    "mlserver.metrics.prometheus": "the metrics server's set-up",
    "mlserver.metrics.registry": "the metrics server's registry",
    "mlserver.metrics.server": "the metrics server",
    "mlserver.middleware": "the server's inference middlewares",
    "mlserver.parallel": "MLServer's worker pool; Podium's workers replace it",
    "mlserver.raw": "raw tensor contents, decoded by Podium's front ends before a runtime",
    "mlserver.registry": "the server's model registry",
    "mlserver.repository": "the server's model repository; Podium's discovery replaces it",
    "mlserver.rest": "MLServer's REST server; Podium's serves the same protocol",
    "mlserver.server": "the server itself",
    "mlserver.tracing": "the server's tracing set-up",
}

#: Names of provided modules that belong to MLServer's server.
ABSENT_NAMES = {
    ("mlserver", "MLServer"): "the server itself",
    ("mlserver.handlers", "DataPlane"): "the server's data plane; Podium's replaces it",
    ("mlserver.handlers", "ModelRepositoryHandlers"): "the server's repository handlers",
    ("mlserver.logging", "ModelLoggerFormatter"): "the server's logging set-up",
    ("mlserver.logging", "apply_logging_file"): "the server's logging set-up",
    ("mlserver.logging", "configure_logger"): "the server's logging set-up",
    ("mlserver.metrics", "MetricsServer"): "the metrics server",
    ("mlserver.metrics", "REGISTRY"): "the metrics server's registry",
    ("mlserver.metrics", "configure_metrics"): "the metrics server's set-up",
    ("mlserver.utils", "install_uvloop_event_loop"): "the server's event loop",
}


def absent_module(module: str) -> str | None:
    for prefix, reason in ABSENT_MODULES.items():
        if module == prefix or module.startswith(prefix + "."):
            return reason
    return None


PROVIDED = sorted(m for m in SURFACE if absent_module(m) is None)


@pytest.fixture(autouse=True)
def import_paths() -> Iterator[None]:
    assert install_import_paths(), "MLServer must not be installed in the development venv"
    yield
    uninstall_import_paths("mlserver")


def test_the_list_is_mlservers_whole_surface() -> None:
    assert len(SURFACE) == 97
    assert "InputOrOutput" in SURFACE["mlserver.codecs.utils"]
    assert "custom_handler" in SURFACE["mlserver.handlers"]


@pytest.mark.parametrize("module", PROVIDED)
def test_every_name_a_runtime_may_import_is_provided(module: str) -> None:
    imported = importlib.import_module(module)
    assert imported.__name__.startswith("podium.compat.mlserver")
    missing = [
        name
        for name in SURFACE[module]
        if (module, name) not in ABSENT_NAMES and not hasattr(imported, name)
    ]
    assert missing == []
    # and the module's own list says so (from mlserver.x import * gives them)
    exported = set(getattr(imported, "__all__", SURFACE[module]))
    assert {n for n in SURFACE[module] if (module, n) not in ABSENT_NAMES} <= exported | {
        "__version__"
    }


@pytest.mark.parametrize("module", sorted(m for m in SURFACE if absent_module(m)))
def test_the_servers_modules_are_absent(module: str) -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(module)


@pytest.mark.parametrize("module, name", sorted(ABSENT_NAMES))
def test_the_servers_names_are_absent(module: str, name: str) -> None:
    assert name in SURFACE[module]
    assert not hasattr(importlib.import_module(module), name)


@pytest.mark.parametrize("name", sorted(ABSENT_MODULES) + sorted({n for _, n in ABSENT_NAMES}))
def test_every_absence_is_documented(name: str) -> None:
    assert f"`{name}`" in DOCS
