"""``mlserver.types``: the Open Inference Protocol messages a runtime receives and returns."""

from . import dataplane, model_repository
from .dataplane import *  # noqa: F403 (every name of both, as MLServer's package exports them)
from .model_repository import *  # noqa: F403

__all__ = sorted([*dataplane.__all__, *model_repository.__all__])
