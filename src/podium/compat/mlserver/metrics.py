"""``mlserver.metrics``: custom metrics a runtime registers and logs.

Accepted and not recorded yet: Podium's metrics endpoint does not exist yet (see docs/mlserver.md).
"""

from __future__ import annotations

from typing import Any

__all__ = ["log", "register"]


def register(name: str, description: str) -> None:
    """Declare a custom metric (recorded nowhere yet)."""


def log(**metrics: Any) -> None:
    """Observe values of custom metrics (recorded nowhere yet)."""
