"""``ts.handler_utils.timer``: ``@timed``, a handler method's time as a metric when asked.

With ``handler: {profile: true}`` in the model's ``model-config.yaml``, each call of a decorated
method records ``ts_handler_<method>`` (milliseconds) through ``context.metrics``; otherwise the
method just runs. Needs nothing but the standard library (torch, when present, for CUDA timing).
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable
from typing import Any

__all__ = ["timed"]


def _profiling(handler: Any) -> bool:
    context = getattr(handler, "context", None)
    if not context:
        return False
    section = (getattr(context, "model_yaml_config", None) or {}).get("handler")
    return isinstance(section, dict) and bool(section.get("profile"))


def _cuda() -> Any:
    """torch, if it is imported and sees a GPU (then the time is taken on the device)."""
    torch = sys.modules.get("torch")
    return torch if torch is not None and torch.cuda.is_available() else None


def timed(func: Callable[..., Any]) -> Callable[..., Any]:
    """Time ``func`` (a handler method) into ``ts_handler_<name>`` when profiling is on."""

    @functools.wraps(func)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not _profiling(self):
            return func(self, *args, **kwargs)
        torch = _cuda()
        if torch is not None:
            start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            start.record()
            result = func(self, *args, **kwargs)
            end.record()
            torch.cuda.synchronize()
            elapsed = start.elapsed_time(end)
        else:
            began = time.perf_counter()
            result = func(self, *args, **kwargs)
            elapsed = (time.perf_counter() - began) * 1000
        self.context.metrics.add_time("ts_handler_" + func.__name__, elapsed)
        return result

    return wrapper
