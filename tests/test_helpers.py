"""The shared test helpers (tests/helpers.py)."""

from __future__ import annotations

import asyncio

import pytest
from helpers import wait_until

pytestmark = pytest.mark.anyio


async def test_wait_until_returns_once_the_condition_holds() -> None:
    state = {"n": 0}

    async def bump() -> None:
        for _ in range(3):
            await asyncio.sleep(0)
            state["n"] += 1

    task = asyncio.create_task(bump())
    await wait_until(lambda: state["n"] == 3)
    await task
    await wait_until(lambda: True, 0)  # true at once: no wait at all


async def test_wait_until_awaits_an_async_condition() -> None:
    calls: list[int] = []

    async def check() -> bool:
        calls.append(1)
        return len(calls) == 3

    await wait_until(check)
    assert len(calls) == 3


async def test_wait_until_fails_after_within_naming_what() -> None:
    with pytest.raises(AssertionError, match="not true within 0.02 s: the door opened"):
        await wait_until(lambda: False, 0.02, what="the door opened")
