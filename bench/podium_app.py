"""Podium's own ASGI app for the echo model, built for a third-party HTTP server.

``granian --interface asgi --factory podium_app:make_app`` (from bench/) serves exactly the
application ``podium serve`` serves, so the benchmark can compare HTTP servers under Podium's
real request path, not only under a hello app.
"""

from __future__ import annotations

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
    for mv in registry:  # echo has no load(): ready at once
        mv.state = ModelState.READY
    gc.collect()
    gc.freeze()
    return HttpApp(DataPlane(registry))
