"""The data plane's calls in flight (``dataplane._flight``), as a shutdown uses them: readiness
turns false while calls go on; calls that end while draining are counted; a cut fails the calls
still running with ``ShuttingDown`` (a stream too), cancels again those that held on, and
refuses new ones; a client's own cancellation stays a cancellation."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from podium.config import ModelConfig
from podium.dataplane import DataPlane, FlightReport
from podium.errors import ShuttingDown, Unavailable, grpc_code, http_status
from podium.runtime.registry import ModelVersion, Registry
from podium.types import Call, Capabilities, ModelState, WireProtocol

pytestmark = pytest.mark.anyio

# protocols whose answers are the model's own values
REST, GRPC = WireProtocol.TRUSS, WireProtocol.TORCHSERVE_GRPC


class Instance:
    capabilities = Capabilities(needs_inputs=False)


class Held:
    """A scheduler whose calls wait for ``release`` (``stubborn``: the first cancellation is
    ignored, as sync code in a thread holds its caller until the thread returns)."""

    def __init__(self, *, stubborn: bool = False) -> None:
        self.release = asyncio.Event()
        self.stubborn = stubborn
        self.started = 0
        self.cancelled = 0

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    def statistics(self) -> dict[str, int]:
        return {}

    async def _hold(self) -> None:
        self.started += 1
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            if not self.stubborn:
                raise
            await self.release.wait()  # a second cancellation ends this

    async def infer(self, inputs: Any, request: Any) -> Any:
        await self._hold()
        return "answer"

    async def stream(self, inputs: Any, request: Any) -> AsyncGenerator[Any, None]:
        yield "first"
        await self._hold()
        yield "second"


def served(**schedulers: Held) -> DataPlane:
    registry = Registry()
    for name, scheduler in schedulers.items():
        mv = ModelVersion(ModelConfig(name=name), Instance(), scheduler)  # type: ignore[arg-type]
        mv.state = ModelState.READY
        registry.add(mv)
    return DataPlane(registry)


async def until(condition: Any) -> None:
    async with asyncio.timeout(5):
        while not condition():  # noqa: ASYNC110 - plain state, polled
            await asyncio.sleep(0)


def test_shutting_down_is_503_and_unavailable_and_a_kind_of_unavailable() -> None:
    exc = ShuttingDown("server shutting down")
    assert isinstance(exc, Unavailable)
    assert (http_status(exc), grpc_code(exc)) == (503, "UNAVAILABLE")


async def test_readiness_turns_false_at_once_while_calls_go_on() -> None:
    held = Held()
    dp = served(m=held)
    call = asyncio.ensure_future(dp.infer(Call("m", None, REST)))
    await until(lambda: held.started)
    assert dp.ready() and not dp.flight.stopping
    dp.flight.begin()
    assert not dp.ready() and dp.flight.stopping and dp.live()
    assert dp.flight.report.running == {"truss model 'm'": 1}
    # Calls still come in, and run, until the cut.
    second = asyncio.ensure_future(dp.infer(Call("m", None, GRPC)))
    await until(lambda: held.started == 2)
    held.release.set()
    assert (await call).value == "answer" and (await second).value == "answer"
    assert dp.flight.report.drained == {"truss model 'm'": 1, "torchserve_grpc model 'm'": 1}
    assert not dp.flight.running


async def test_idle_returns_once_the_calls_in_flight_end() -> None:
    held = Held()
    dp = served(m=held)
    await dp.flight.idle()  # none: at once
    call = asyncio.ensure_future(dp.infer(Call("m", None, REST)))
    await until(lambda: held.started)
    dp.flight.begin()
    waiting = asyncio.ensure_future(dp.flight.idle())
    await asyncio.sleep(0.01)
    assert not waiting.done()
    held.release.set()
    await call
    async with asyncio.timeout(5):
        await waiting


async def test_the_cut_fails_calls_with_shutting_down_and_refuses_new_ones() -> None:
    held = Held()
    dp = served(m=held)
    call = asyncio.ensure_future(dp.infer(Call("m", None, REST)))
    await until(lambda: held.started)
    assert dp.flight.cut("did not finish within --graceful-timeout 2 s") == 1
    with pytest.raises(ShuttingDown) as cut:
        await call
    assert cut.value.message == (
        "server shutting down: the call to model 'm' did not finish within --graceful-timeout 2 s"
    )
    assert held.cancelled == 1
    report = dp.flight.report
    assert report.cut == {"truss model 'm'": 1} and not report.drained
    assert FlightReport.describe(report.cut) == "1 (truss model 'm': 1)"
    assert FlightReport.describe(report.drained) == "0"
    with pytest.raises(ShuttingDown, match="no new calls are taken"):
        await dp.infer(Call("m", None, REST))
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0


async def test_a_stream_is_cut_between_its_items() -> None:
    held = Held()
    dp = served(m=held)
    got: list[Any] = []

    async def read() -> None:
        async for item in dp.stream(Call("m", None, REST)):
            got.append(item)

    reader = asyncio.ensure_future(read())
    await until(lambda: held.started)
    dp.flight.cut("did not finish within --graceful-timeout 1 s")
    with pytest.raises(ShuttingDown, match="the call to model 'm' did not finish"):
        await reader
    assert got == ["first"]
    assert dp.flight.report.cut == {"truss model 'm'": 1} and not dp.flight.running


async def test_a_call_that_holds_on_at_the_first_cut_is_cut_by_the_second() -> None:
    held = Held(stubborn=True)
    dp = served(m=held)
    call = asyncio.ensure_future(dp.infer(Call("m", None, REST)))
    await until(lambda: held.started)
    dp.flight.cut("did not finish within --graceful-timeout 1 s")
    await until(lambda: held.cancelled)
    await asyncio.sleep(0.01)
    assert not call.done()
    assert dp.flight.cut("another reason") == 1
    with pytest.raises(ShuttingDown, match="did not finish within --graceful-timeout 1 s"):
        await call
    assert dp.flight.report.cut == {"truss model 'm'": 1}


async def test_a_client_that_leaves_is_still_a_cancellation() -> None:
    held = Held()
    dp = served(m=held)
    dp.flight.begin()
    call = asyncio.ensure_future(dp.infer(Call("m", None, REST)))
    await until(lambda: held.started)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert dp.flight.report.drained == {"truss model 'm'": 1}
    assert not dp.flight.running


async def test_a_task_running_a_call_already_is_counted_once() -> None:
    held = Held()
    dp = served(m=held, n=Held())
    flight = dp.flight
    outer = flight.enter(Call("m", None, REST))
    assert outer is asyncio.current_task()
    assert flight.enter(Call("n", None, REST)) is None  # nested: the outer one stands for both
    assert len(flight.running) == 1
    assert flight.counts() == {"truss model 'm'": 1}
    flight.leave(outer)
    version = flight.enter(Call("m", "2", GRPC))
    assert version is not None
    assert flight.counts() == {"torchserve_grpc model 'm' version '2'": 1}
    flight.leave(version)
    assert not flight.running


async def test_a_call_runs_in_flight_under_the_task_its_front_end_names() -> None:
    # The HTTP front end hands over the task serving the request (its connection's): the call
    # is registered, and cut, under it with no look-up of its own; nested calls count once.
    held = Held()
    dp = served(m=held, n=Held())
    flight = dp.flight
    flight.loop = None  # (a look-up notes the loop: none is made)

    async def serve() -> Any:
        return await dp.infer(Call("m", None, REST), None, asyncio.current_task())

    call = asyncio.ensure_future(serve())
    await until(lambda: held.started)
    assert list(flight.running) == [call] and flight.loop is None
    assert flight.enter(Call("n", None, REST), call) is None  # the outer one stands for both
    assert flight.cut("did not finish within --graceful-timeout 1 s") == 1
    with pytest.raises(ShuttingDown, match="the call to model 'm' did not finish"):
        await call
    assert flight.report.cut == {"truss model 'm'": 1} and not flight.running
    assert flight.loop is None
