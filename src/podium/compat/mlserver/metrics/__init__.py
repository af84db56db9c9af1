"""``mlserver.metrics``: custom metrics a runtime registers and logs (``context``), exported on
Podium's ``/metrics``; MLServer's metrics server, registry and set-up are Podium's own
(docs/mlserver.md, "Not provided")."""

from .context import log, register

__all__ = ["log", "register"]
