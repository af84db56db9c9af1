"""Fixtures of the device tests (``pytest_plugins = ["device_fixtures"]``): four fake GPUs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from podium.runtime import devices
from podium.runtime.devices import FakeInventory


@pytest.fixture
def gpus() -> Iterator[FakeInventory]:
    """The server believes it has four GPUs."""
    fake = FakeInventory(4)
    devices.set_inventory(fake)
    try:
        yield fake
    finally:
        devices.set_inventory(None)
