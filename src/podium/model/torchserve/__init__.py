"""Models written for TorchServe: handlers in ``.mar`` / ``.tar.gz`` archives or model
directories, behind :class:`podium.types.ModelInstance`.

Layout: ``_model`` is the adapter (``is_source`` / ``sources`` / ``prepare`` / ``build``, and
:class:`TorchServeModel`, which gives a handler TorchServe's ``data`` rows and ``Context``);
``_archive`` reads, extracts (traversal-guarded) and writes archives, as torch-model-archiver
does; ``_config`` maps ``model-config.yaml`` onto ``ModelConfig``; ``_handler`` finds and imports
a handler as TorchServe's model loader does, and makes ``import ts`` resolve to
``podium.compat.ts`` when TorchServe is absent; ``_context`` is TorchServe's ``Context``.
``_metrics`` is ``context.metrics`` (what a handler records lands in Podium's ``/metrics``);
``_metrics_yaml`` reads TorchServe's ``metrics.yaml`` (the metrics it declares).
``podium.compat.ts`` re-exports the names below that handlers import from ``ts.*``, so every
import path gives the same classes. What differs from TorchServe: ``docs/torchserve.md``.
"""

from ._archive import ARCHIVE_SUFFIXES, archive_model
from ._context import Context, RequestProcessor
from ._handler import (
    PredictionException,
    install_ts_shim,
    list_classes_from_module,
    load_label_mapping,
)
from ._metrics import Dimension, MetricTypes, TorchServeMetrics, log_line, ts_help
from ._metrics_yaml import TORCHSERVE_DEFAULT, DeclaredMetric, MetricsYaml, read_metrics_yaml
from ._model import (
    ArchiveLimits,
    TorchServeModel,
    build,
    is_source,
    prepare,
    set_archive_limits,
    sources,
)

__all__ = [
    "ARCHIVE_SUFFIXES",
    "TORCHSERVE_DEFAULT",
    "ArchiveLimits",
    "Context",
    "DeclaredMetric",
    "Dimension",
    "MetricTypes",
    "MetricsYaml",
    "PredictionException",
    "RequestProcessor",
    "TorchServeMetrics",
    "TorchServeModel",
    "archive_model",
    "build",
    "install_ts_shim",
    "is_source",
    "list_classes_from_module",
    "load_label_mapping",
    "log_line",
    "prepare",
    "read_metrics_yaml",
    "set_archive_limits",
    "sources",
    "ts_help",
]
