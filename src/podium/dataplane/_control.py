"""Who may change what is served: :class:`ControlPolicy`.

Loading and unloading a model changes what every client gets, so it belongs to the management
listeners (loopback by default, behind the management key), as registering, unregistering and
scaling do. The inference listeners are open to every client of the service: there the
repository may be read (OIP's repository index) but not changed, unless the operator opens it
with ``--model-control inference`` (:attr:`ModelControl.INFERENCE`). Every operation of the
:class:`~podium.dataplane.ModelRepository` that changes what is served takes the front end the
call came through (``via``: a :class:`~podium.types.WireProtocol`, or None for a management
listener) and asks this policy first, so a new route cannot forget the rule.
"""

from __future__ import annotations

import enum

from ..errors import Forbidden
from ..types import WireProtocol

__all__ = ["ControlPolicy", "ModelControl"]


class ModelControl(enum.Enum):
    """Which listeners may load and unload models (``--model-control``)."""

    MANAGEMENT = "management"  # the management listeners only (the default)
    INFERENCE = "inference"  # the inference listeners too: any of their clients (--auth advised)


class ControlPolicy:
    """The rule for one server: ``control`` says which listeners may change what is served;
    ``management`` names where the management API listens, for the refusal's message (the
    server sets it once its listeners are bound)."""

    __slots__ = ("control", "management")

    def __init__(
        self, control: ModelControl = ModelControl.MANAGEMENT, management: str = ""
    ) -> None:
        self.control = control
        self.management = management

    def check(self, action: str, via: WireProtocol | None) -> None:
        """Raise :class:`~podium.errors.Forbidden` (403 / ``PERMISSION_DENIED``) if ``action``
        (words such as ``"unloading model 'm'"``) may not be done through ``via``, an inference
        front end (None: a management listener, always allowed)."""
        if via is None or self.control is ModelControl.INFERENCE:
            return
        where = f" ({self.management})" if self.management else ""
        raise Forbidden(
            f"{action} is refused on the inference listener ({via.value}): what is served is "
            f"changed only through the management API{where}, which registers, unregisters and "
            "scales models; to load and unload models through the inference listeners, start "
            "the server with --model-control inference (with --auth)"
        )
