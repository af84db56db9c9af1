"""Podium: a fast Python model inference server.

Layers, from the top (imports only point down; docs/architecture.md draws them, and
tests/test_layers.py holds every module to it)::

    server/*, cli                 front ends: wire formats in and out, nothing else
    dataplane/                    the one entry every front end calls
    runtime/registry, loading     models × versions; sources on disk → workers and a scheduler
    runtime/{direct,batcher,continuous,sequences/}   scheduling
    runtime/workers, process/     execution: thread workers, worker processes
    model/*, compat/              model contracts: adapt user code to ``types.ModelInstance``
    types, codecs/, errors, config    foundations

Users import from here: ``from podium import InferenceRequest, InferenceResponse``.
"""

from .devices import device
from .errors import (
    InvalidInput,
    ModelError,
    NotFound,
    PodiumError,
    Unavailable,
)
from .types import (
    Context,
    Generation,
    InferenceRequest,
    InferenceResponse,
    RequestInput,
    RequestOutput,
    ResponseOutput,
    request_id,
)

__version__ = "0.1.0"

__all__ = [
    "Context",
    "Generation",
    "InferenceRequest",
    "InferenceResponse",
    "InvalidInput",
    "ModelError",
    "NotFound",
    "PodiumError",
    "RequestInput",
    "RequestOutput",
    "ResponseOutput",
    "Unavailable",
    "__version__",
    "device",
    "request_id",
]
