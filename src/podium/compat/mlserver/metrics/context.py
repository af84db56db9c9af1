"""``mlserver.metrics.context`` (and ``mlserver.metrics``): custom metrics a runtime registers and logs, exported on Podium's
``/metrics`` with the model's labels.

As in MLServer, each metric is a histogram; ``log(name=value)`` makes one if ``register`` did
not. The metrics belong to the model version whose runtime
calls them (its ``load``, ``predict``, ``predict_stream``); their labels are Podium's
``model`` and ``version`` (MLServer's are ``model_name`` and ``model_version``).
"""

from __future__ import annotations

from typing import Any

from podium import metrics as _metrics

from .errors import MetricNotFound

__all__ = ["SELDON_MODEL_NAME_LABEL", "SELDON_MODEL_VERSION_LABEL", "log", "register"]

# MLServer's label names; Podium's own labels are ``model`` and ``version`` (docs/metrics.md).
SELDON_MODEL_NAME_LABEL = "model_name"
SELDON_MODEL_VERSION_LABEL = "model_version"


def register(name: str, description: str) -> Any:
    """Declare a custom metric (a histogram) of the model version running now; returns it
    (``observe(value)``). Registering an existing name returns the one there is."""
    return _metrics.histogram(name, description)


def log(**metrics: Any) -> None:
    """Observe one value of each custom metric named (made if not registered)."""
    store = _metrics.current_store()
    if store is None:
        return
    for name, value in metrics.items():
        family = store.families.get(name)
        if family is None:
            _metrics.histogram(name, f"{name} (mlserver.log)").observe(value)
        elif family.kind is not _metrics.Kind.HISTOGRAM or family.labelnames:
            raise MetricNotFound(name, family)
        else:
            store.observe(family, (), float(value))
