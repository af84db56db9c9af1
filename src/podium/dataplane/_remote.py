"""Versions whose model runs elsewhere: what a data plane that forwards calls registers.

A data plane in front of models that run in other processes (the Ray Serve ingress of
``podium.ray``: each model version in a deployment of its own) still answers health, metadata
and configuration, finds the version a call addresses and tells the front end what the model
asks for, from a version in its registry that holds the model's config and capabilities. Its
calls never reach that version's scheduler: the data plane that holds it forwards them whole
(``DataPlane.infer`` / ``stream`` overridden), and the version's instance and scheduler here only
describe the model, refusing to run anything should a call reach them all the same.
"""

from __future__ import annotations

from typing import Any, NoReturn

from ..errors import PodiumError
from ..types import Capabilities

__all__ = ["RemoteInstance", "RemoteScheduler"]


def _refuse(self: RemoteInstance | RemoteScheduler, *args: Any) -> NoReturn:
    """Every way to run a call here (should one reach a version that only describes its model)."""
    raise PodiumError(f"{self._label} runs elsewhere: its calls are forwarded, never run here")


class RemoteInstance:
    """A model instance that only describes the model (its ``capabilities``)."""

    calls = None  # it runs no code here

    def __init__(self, label: str, capabilities: Capabilities) -> None:
        self.capabilities = capabilities
        self._label = label

    async def load(self) -> None:
        """Nothing to load here: the model loads where it runs."""

    preprocess = predict = predict_stream = validate = predict_input_stream = _refuse
    postprocess = step = _refuse


class RemoteScheduler:
    """A scheduler that runs nothing (the ``Scheduler`` and ``SequenceScheduling`` protocols):
    its version's calls are forwarded by the data plane that holds it."""

    def __init__(self, label: str) -> None:
        self._label = label

    infer = stream = stream_inputs = infer_in = stream_in = _refuse

    def statistics(self) -> dict[str, int]:
        return {}

    @property
    def in_flight(self) -> int:
        """None here: the calls run (and drain) where the model runs."""
        return 0

    async def start(self) -> None:
        """Nothing runs here."""

    async def close(self) -> None:
        """Nothing runs here."""
