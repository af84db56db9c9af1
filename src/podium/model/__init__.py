"""Model contracts: adapt user code to :class:`podium.types.ModelInstance`.

Imports nothing above ``podium.types`` / ``podium.errors`` / ``podium.config`` / ``podium.codecs``,
and no web or gRPC library.
"""

from ._calls import model_error

__all__ = ["model_error"]
