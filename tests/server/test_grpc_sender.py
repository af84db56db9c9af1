"""Where the relay's hand-overs to grpc run (``bridge._relay.Sender``): on the serving loop's
thread when it is between two polls, else on the sender's own thread, woken for them, or, in a
process that may run on one CPU only, at once on the thread that hands them on. Each runs once,
in order, whichever thread runs it; and a real server on one CPU ends its unary calls without
the sender's thread."""

from __future__ import annotations

import os
import threading
from typing import Any
from unittest import mock

import grpc
import pytest
from test_grpc_relay import Handlers, rpc, running, service

from podium.server.grpc import bridge
from podium.server.grpc._errors import unhandled_status
from podium.server.grpc._server import GrpcServer
from podium.server.grpc._tensors import ModelInferRequest, ModelInferResponse
from podium.server.grpc.bridge import _relay, load


class Recorder:
    """Work items that record the thread that ran them."""

    def __init__(self) -> None:
        self.ran: list[tuple[int, str]] = []
        self.done = threading.Event()

    def item(self, number: int) -> tuple[Any, ...]:
        return (self.run, number)

    def run(self, number: int) -> None:
        self.ran.append((number, threading.current_thread().name))
        self.done.set()


@pytest.fixture
def sender() -> Any:
    made = _relay.Sender(load(), unhandled_status, inline=False)
    yield made
    made.close()


def test_work_handed_on_between_polls_waits_for_the_serving_loop(sender: Any) -> None:
    # The serving loop has taken an event and not polled again yet: it runs what is handed on
    # before its next poll, and the sender's thread is not woken for it.
    sender.polling = False
    recorder = Recorder()
    for number in range(3):
        sender.put(recorder.item(number))
    assert not recorder.done.wait(0.2)
    assert recorder.ran == []
    sender.run_queued()  # as the serving loop does, on its own thread
    me = threading.current_thread().name
    assert recorder.ran == [(0, me), (1, me), (2, me)]


def test_work_handed_on_while_the_serving_loop_polls_wakes_the_sender_thread(sender: Any) -> None:
    assert sender.polling  # no serving loop is between two polls
    recorder = Recorder()
    sender.put(recorder.item(1))
    assert recorder.done.wait(5)
    assert recorder.ran == [(1, "podium-grpc-send")]


def test_on_one_cpu_work_handed_on_while_the_serving_loop_polls_runs_at_once() -> None:
    sender = _relay.Sender(load(), unhandled_status, inline=True)
    try:
        recorder = Recorder()
        sender.put(recorder.item(1))
        assert recorder.ran == [(1, threading.current_thread().name)]
        sender.polling = False  # between two polls, the serving loop's turn even so
        sender.put(recorder.item(2))
        assert recorder.ran == [(1, threading.current_thread().name)]
        sender.polling = True
        sender.put(recorder.item(3))  # runs what waited first, in order
        assert [number for number, _ in recorder.ran] == [1, 2, 3]
    finally:
        sender.close()


def test_an_item_that_raises_is_logged_and_the_next_runs(
    sender: Any, caplog: pytest.LogCaptureFixture
) -> None:
    sender.polling = False

    def broken() -> None:
        raise RuntimeError("lost")

    recorder = Recorder()
    sender.put((broken,))
    sender.put(recorder.item(1))
    sender.run_queued()
    assert [number for number, _ in recorder.ran] == [1]
    assert "failed to end a gRPC call" in caplog.text


def test_close_runs_what_is_queued_first() -> None:
    sender = _relay.Sender(load(), unhandled_status, inline=False)
    sender.polling = False  # nobody would run it but close
    recorder = Recorder()
    sender.put(recorder.item(1))
    sender.close()
    assert recorder.ran == [(1, "podium-grpc-send")]


@pytest.mark.parametrize(("cpus", "one"), [({0}, True), ({0, 1}, False), ({3}, True)])
def test_one_cpu_reads_the_process_affinity(cpus: set[int], one: bool) -> None:
    with mock.patch.object(os, "sched_getaffinity", lambda pid: cpus, create=True):
        assert _relay.one_cpu() is one
        sender = _relay.Sender(load(), unhandled_status)
        sender.close()
        assert sender.inline is one


@pytest.mark.anyio
async def test_on_one_cpu_unary_calls_end_without_the_sender_thread() -> None:
    await bridge.decide(unhandled_status)  # the self-test's calls, before counting
    handlers = Handlers()
    ended: list[str] = []
    real_end = _relay.Relay.end

    def end(self: Any, *args: Any) -> None:
        ended.append(threading.current_thread().name)
        real_end(self, *args)

    with mock.patch.object(_relay.Relay, "end", end):
        async with running(service(handlers), "relayed-one-cpu", handlers, grace=5.0) as it:
            echo = rpc(it.channel, "Echo")
            for number in range(20):
                answer = await echo(ModelInferRequest(model_name="m", id=str(number)))
                assert answer == ModelInferResponse(model_name="m", id=str(number))
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await rpc(it.channel, "Abort")(ModelInferRequest(model_name="x"))
            assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert len(ended) == 21
    assert "podium-grpc-send" not in ended


@pytest.mark.anyio
async def test_a_server_hands_its_sender_the_process_cpus() -> None:
    for one in (True, False):
        server = GrpcServer(
            [service(Handlers())], host="127.0.0.1", port=0, max_message_size=1 << 20
        )
        with mock.patch.object(_relay, "one_cpu", lambda one=one: one):
            await server.start()
        try:
            assert server._bridge is not None and server._bridge._sender is not None
            assert server._bridge._sender.inline is one
        finally:
            await server.stop()
