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


def test_running_loop_is_the_running_loop_of_the_thread_that_asks() -> None:
    """``running_loop`` answers ``get_running_loop()``'s loop: each loop in turn on one thread,
    two loops at once on two threads, and none (``RuntimeError``) where none runs."""
    import threading

    from podium.turn import running_loop

    async def which() -> tuple[asyncio.AbstractEventLoop, asyncio.AbstractEventLoop]:
        return running_loop(), asyncio.get_running_loop()

    for _ in range(3):  # a new loop each time on this thread: never the last one's
        found, actual = asyncio.run(which())
        assert found is actual
    with pytest.raises(RuntimeError):
        running_loop()  # no loop runs here now (the last one found is kept, stopped)

    started, done = threading.Event(), threading.Event()
    other: list[asyncio.AbstractEventLoop] = []

    async def hold() -> None:
        other.append(running_loop())
        started.set()
        await asyncio.to_thread(done.wait, 10)

    thread = threading.Thread(target=asyncio.run, args=(hold(),))
    thread.start()
    try:
        assert started.wait(10)
        found, actual = asyncio.run(which())  # while the other thread's loop runs
        assert found is actual and found is not other[0]
        with pytest.raises(RuntimeError):
            running_loop()
    finally:
        done.set()
        thread.join(10)


def test_running_loop_is_forgotten_by_a_forked_child() -> None:
    """A child forked while a loop runs has no running loop (as ``get_running_loop()``)."""
    import os

    from podium.turn import running_loop

    if not hasattr(os, "fork"):
        pytest.skip("no fork here")

    async def fork() -> int:
        running_loop()  # found, and kept
        pid = os.fork()
        if pid == 0:  # the child: the parent's loop is not running here
            try:
                running_loop()
            except RuntimeError:
                os._exit(0)
            os._exit(1)
        return pid

    pid = asyncio.run(fork())
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
