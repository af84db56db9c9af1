"""The shared test helpers (tests/helpers.py)."""

from __future__ import annotations

import asyncio
import socket

import pytest
from helpers import JumpingClockLoop, wait_until

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


def test_the_jumping_clock_meets_timers_in_order_at_their_times() -> None:
    async def main() -> list[tuple[str, float]]:
        loop = asyncio.get_running_loop()
        woke: list[tuple[str, float]] = []

        async def sleeper(name: str, seconds: float) -> None:
            await asyncio.sleep(seconds)
            woke.append((name, loop.time()))

        async with asyncio.timeout(7200):  # an hour's sleep is no hang on this clock
            await asyncio.gather(sleeper("hour", 3600), sleeper("second", 1), sleeper("now", 0))
        return woke

    with asyncio.Runner(loop_factory=JumpingClockLoop) as runner:
        assert runner.run(main()) == [("now", 0.0), ("second", 1.0), ("hour", 3600.0)]


def test_the_jumping_clock_stands_still_while_a_socket_is_ready() -> None:
    async def main() -> tuple[bytes, float]:
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair()
        with ours, theirs:
            reader, writer = await asyncio.open_connection(sock=ours)
            theirs.sendall(b"ready")
            sleeping = asyncio.ensure_future(asyncio.sleep(10))  # a timer it could jump to
            got = await reader.read(5)
            at = loop.time()
            sleeping.cancel()
            writer.close()
        return got, at

    with asyncio.Runner(loop_factory=JumpingClockLoop) as runner:
        assert runner.run(main()) == (b"ready", 0.0)
