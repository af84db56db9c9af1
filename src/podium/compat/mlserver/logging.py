"""``mlserver.logging``: the ``mlserver`` logger runtimes log through (Podium configures logging)."""

from __future__ import annotations

import logging

__all__ = ["LoggerName", "get_logger", "logger"]

LoggerName = "mlserver"

logger = logging.getLogger(LoggerName)


def get_logger() -> logging.Logger:
    return logger
