"""Fixtures of the device tests (``pytest_plugins = ["device_fixtures"]``): four fake GPUs."""

from __future__ import annotations

import pytest

from podium.runtime import devices
from podium.runtime.devices import FakeInventory


@pytest.fixture
def gpus(monkeypatch: pytest.MonkeyPatch) -> FakeInventory:
    """The server believes it has four GPUs."""
    fake = FakeInventory(4)
    monkeypatch.setattr(devices, "_inventory", fake)
    return fake
