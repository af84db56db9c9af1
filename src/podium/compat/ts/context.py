"""``ts.context``: the ``Context`` handed to TorchServe handlers."""

from podium.model.torchserve import Context, RequestProcessor

__all__ = ["Context", "RequestProcessor"]
