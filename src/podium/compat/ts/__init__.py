"""TorchServe's import paths (``ts.context``, ``ts.protocol.otf_message_handler``, ...) for
handlers loaded by Podium when the real ``ts`` package is not installed.

Podium makes ``import ts`` resolve here only then (``podium.model.torchserve.install_ts_shim``):
``ts.context`` is the module ``podium.compat.ts.context`` (``compat/_aliases.py``), whose names
are ``podium.model.torchserve``'s, so however a handler imports them it gets the very same classes.
"""

from podium import __version__

from .._aliases import Aliases

__all__ = ["IMPORT_PATHS", "__version__"]

IMPORT_PATHS = Aliases("ts", __name__)
