"""Model contracts: adapt user code to :class:`podium.types.ModelInstance`.

Imports nothing above ``podium.types`` / ``podium.errors`` / ``podium.config`` / ``podium.codecs``,
and no web or gRPC library.
"""

from ._calls import model_error
from ._owned import Hold, Owned, Shared, release_all

__all__ = ["Hold", "Owned", "Shared", "model_error", "release_all"]
