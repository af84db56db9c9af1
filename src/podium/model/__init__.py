"""Model contracts: adapt user code to :class:`podium.types.ModelInstance`.

Layout: ``discovery`` finds model versions on disk (each a :class:`ModelSource`, ``_source``,
whose :class:`Contract` says which adapter builds it); one adapter per contract, each with
``is_source`` / ``sources`` / ``prepare`` / ``build``: ``native`` (Podium's own contract, its
rules checked at load time), ``torchserve/`` (TorchServe handlers), ``mlserver/`` (MLServer
runtimes); ``_calls`` calls user code (sync, async, generators) and translates what it raises.

Imports nothing above ``podium.types`` / ``podium.errors`` / ``podium.config`` /
``podium.codecs`` (but ``podium.compat``, the import paths it gives user code), and no web or
gRPC library.
"""

from ._calls import check_results, model_error
from ._owned import Hold, Owned, Shared, release_all
from ._source import Contract, ModelSource
from .discovery import discover, discover_all, import_model, model_paths
from .native import ModelSpec, NativeModel, check_config

__all__ = [
    "Contract",
    "Hold",
    "ModelSource",
    "ModelSpec",
    "NativeModel",
    "Owned",
    "Shared",
    "check_config",
    "check_results",
    "discover",
    "discover_all",
    "import_model",
    "model_error",
    "model_paths",
    "release_all",
]
