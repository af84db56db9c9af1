"""TorchServe's import paths (``ts.context``, ``ts.protocol.otf_message_handler``, ...) for
handlers loaded by Podium when the real ``ts`` package is not installed.

Podium makes ``import ts`` resolve here only then (``podium.model.torchserve.install_ts_shim``).
Every module re-exports objects defined in ``podium.model.torchserve``, so however a handler imports them
(``ts.context`` or ``podium.compat.ts.context``) it gets the very same classes.
"""

from podium import __version__

__all__ = ["__version__"]
