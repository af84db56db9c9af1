"""``ts.context``: the ``Context`` handed to TorchServe handlers."""

from podium.model._ts_context import Context, RequestProcessor

__all__ = ["Context", "RequestProcessor"]
