"""Helpers for tests anywhere in the tree (``from helpers import wait_until``)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable


async def wait_until(
    condition: Callable[[], object | Awaitable[object]],
    within: float = 5.0,
    *,
    every: float = 0.001,
    what: str = "",
) -> None:
    """Poll ``condition`` until it is true (an async one is awaited): for plain state that has
    no event to await (a scheduler's statistics, what a model recorded, a file another process
    writes, a server's answers). Fails with ``AssertionError`` after ``within`` seconds: a safety
    net against a hang, not a timing."""
    try:
        async with asyncio.timeout(within):
            while True:
                holds = condition()
                if inspect.isawaitable(holds):
                    holds = await holds
                if holds:
                    return
                await asyncio.sleep(every)
    except TimeoutError:
        raise AssertionError(f"not true within {within} s: {what or condition}") from None
