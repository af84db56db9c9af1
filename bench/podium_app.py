"""Podium's own ASGI app for the echo model, built for a third-party HTTP server.

``granian --interface asgi --factory podium_app:make_app`` (from bench/) serves exactly the
application ``podium serve`` serves, so the benchmark can compare HTTP servers under Podium's
real request path, not only under a hello app.
"""

from __future__ import annotations

import asyncio
import gc
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from podium.dataplane import DataPlane
from podium.runtime.loading import register_paths
from podium.runtime.registry import ModelState, Registry
from podium.server.http import HttpApp

ECHO = Path(__file__).resolve().parent.parent / "examples" / "echo"


def make_app() -> HttpApp:
    registry = Registry()
    register_paths(registry, [ECHO], secrets={}, executor=ThreadPoolExecutor(4))
    # Start the workers (echo's thread worker: nothing bound to a loop but what it creates
    # per request), as `podium serve` does before it reports ready.
    asyncio.new_event_loop().run_until_complete(registry.load_all())
    if not all(mv.state is ModelState.READY for mv in registry):
        raise RuntimeError("the echo model did not load")
    gc.collect()
    gc.freeze()
    return HttpApp(DataPlane(registry))
