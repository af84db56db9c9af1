"""Models written for MLServer: runtimes (classes written to ``mlserver.MLModel``'s contract)
found through ``model-settings.json``, behind :class:`podium.types.ModelInstance`.

Layout: ``_model`` is the adapter (``is_source`` / ``sources`` / ``prepare`` / ``build``);
``_settings`` maps ``model-settings.json`` onto ``ModelConfig`` and the runtime's own
``ModelSettings``; ``_runtime`` runs a runtime behind the instance interface
(``MLServerModel``); ``_batch`` merges a batch into the one request MLServer hands a runtime,
and splits its answer. ``podium.compat.mlserver`` provides ``mlserver.*`` when MLServer is
absent. What differs from MLServer: ``docs/mlserver.md``.

Nothing here imports pydantic, ``podium.compat.mlserver`` or ``_runtime`` until a model is
prepared or built: discovery stays cheap and native models never pay for them.
"""

from ._model import build, is_source, prepare, sources
from ._settings import (
    MLSERVER_CACHE_SIZE,
    declared_environment,
    environment_model,
    environment_values,
    lax_value,
    read_json_object,
)

__all__ = [
    "MLSERVER_CACHE_SIZE",
    "build",
    "declared_environment",
    "environment_model",
    "environment_values",
    "is_source",
    "lax_value",
    "prepare",
    "read_json_object",
    "sources",
]
