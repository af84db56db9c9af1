"""``podium.compat.mlserver``: MLServer's runtime API, so that MLServer runtimes run on Podium.

A runtime file imports from ``mlserver`` as it always did (``from mlserver import MLModel``,
``from mlserver.types import InferenceRequest``, ``from mlserver.codecs import StringCodec``...).
When MLServer itself is installed, its own classes are used; when it is not, Podium makes these
import paths point here (:func:`podium.compat.mlserver.install_import_paths`, called when an
MLServer model is prepared). See ``docs/mlserver.md`` for what differs from MLServer.
"""

from .._aliases import Aliases
from . import codecs, errors, handlers, logging, metrics, settings, types, utils
from .metrics import log, register
from .model import MLModel
from .settings import ModelSettings, Settings
from .version import __version__

# ``mlserver.types`` is this package's ``types``, when MLServer is not installed.
_IMPORT_PATHS = Aliases("mlserver", __name__)
install_import_paths = _IMPORT_PATHS.install

__all__ = [
    "MLModel",
    "ModelSettings",
    "Settings",
    "__version__",
    "codecs",
    "errors",
    "handlers",
    "install_import_paths",
    "log",
    "logging",
    "metrics",
    "register",
    "settings",
    "types",
    "utils",
]
