"""The cyclic garbage collector's settings in a serving process (the server, a worker process).

Podium's request paths free what they make by reference counting, on success and on every
error, over HTTP and gRPC, in the server and in worker processes
(``tests/server/test_no_cyclic_garbage.py``; the gRPC bridge's calls and the errors of sync
models, batches, streams and process workers made cycles, which held a request's messages and
tensors until a collection, and no longer do): under steady load there is no garbage for the
cyclic collector to find. But CPython starts a generation-0 collection whenever container
objects allocated minus those freed pass a threshold (700 by default), and the objects of the
requests in flight alone pass it: under load the collector ran every few dozen requests, each
time walking the requests' live objects and moving them to older generations, whose collections
then walk them again: a real share of a plain request's server CPU, for nothing.

:func:`settle` is called once a process has started (models loaded, listeners up):

- everything built so far is collected once, then frozen (``gc.freeze()``): kept out of every
  future collection, so that no full collection walks the models and the server (the p99);
- generation 0 is collected after :data:`GEN0_THRESHOLD` net allocations instead of 700. The
  objects of requests in flight stay below it, so the collector runs only when something really
  accumulates (a model's own cycles: they wait for it up to that many allocations). The older
  generations keep their defaults.
"""

from __future__ import annotations

import gc

__all__ = ["GEN0_THRESHOLD", "settle"]

#: Net container allocations between two generation-0 collections (CPython's default: 700).
GEN0_THRESHOLD = 10_000


def settle() -> None:
    """Collect and freeze what start-up built, and raise generation 0's threshold (see the
    module's docstring). Call once, when the process is ready to serve."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, older, oldest)
