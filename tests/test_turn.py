"""TurnBuffer: what is added in one turn of the loop is handed over together, once."""

from __future__ import annotations

import asyncio

import pytest

from podium.turn import TurnBuffer


def test_items_of_one_turn_are_flushed_together_at_its_end() -> None:
    flushed: list[list[int]] = []

    async def main() -> None:
        buffer = TurnBuffer(flushed.append)
        buffer.add(1)
        buffer.add(2)
        assert flushed == []
        await asyncio.sleep(0)  # the turn ends
        assert flushed == [[1, 2]]
        buffer.add(3)
        await asyncio.sleep(0)
        assert flushed == [[1, 2], [3]]

    asyncio.run(main())


def test_flush_hands_over_at_once_and_cancels_the_scheduled_call() -> None:
    flushed: list[list[str]] = []

    async def main() -> None:
        buffer = TurnBuffer(flushed.append)
        buffer.add("a")
        buffer.flush()
        assert flushed == [["a"]]
        await asyncio.sleep(0)
        assert flushed == [["a"]]  # nothing more, nothing twice
        buffer.flush()
        assert flushed == [["a"]]

    asyncio.run(main())


def test_a_loop_closed_mid_turn_leaves_nothing_stuck() -> None:
    flushed: list[list[int]] = []
    buffer = TurnBuffer(flushed.append)

    async def add(item: int) -> None:
        buffer.add(item)

    loop = asyncio.new_event_loop()
    loop.run_until_complete(add(1))  # its callback may not have run before the loop closed
    loop.close()

    async def later() -> None:
        buffer.add(2)
        await asyncio.sleep(0)

    asyncio.run(later())
    assert [item for batch in flushed for item in batch] == [1, 2]


def test_adding_off_a_loop_raises_and_holds_nothing() -> None:
    flushed: list[list[int]] = []
    buffer = TurnBuffer(flushed.append)
    with pytest.raises(RuntimeError):
        buffer.add(1)
    buffer.flush()
    assert flushed == []  # nothing was held
