"""Where the relay's hand-overs to grpc run (``bridge._relay.Sender``): on the serving loop's
thread when it is between two polls, else on the sender's own thread, woken for them. Each runs
once, in order, whichever thread runs it."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from podium.server.grpc._errors import unhandled_status
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
    made = _relay.Sender(load(), unhandled_status)
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
    sender = _relay.Sender(load(), unhandled_status)
    sender.polling = False  # nobody would run it but close
    recorder = Recorder()
    sender.put(recorder.item(1))
    sender.close()
    assert recorder.ran == [(1, "podium-grpc-send")]
