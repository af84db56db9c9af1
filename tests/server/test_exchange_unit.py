"""The HTTP exchange's disconnect watching (server/http/_exchange.py): on Podium's own listeners
a request whose body is read waits on its connection's LostHook, with no task of its own;
elsewhere (no hook, or a body still to come) a watcher task reads ``receive()``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from podium.errors import InvalidInput, PayloadTooLarge
from podium.server._limits import LOST_HOOK, LostHook
from podium.server.http._exchange import Exchange

BODY = {"type": "http.request", "body": b"{}", "more_body": False}


def receiver(messages: list[dict[str, Any]]) -> Any:
    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop(0)
        await asyncio.Event().wait()  # the client stays
        raise AssertionError

    return receive


@pytest.mark.anyio
async def test_with_a_lost_hook_no_task_watches_and_the_hook_cancels_the_request() -> None:
    hook = LostHook()
    ex = Exchange({"type": "http", "headers": [], LOST_HOOK: hook}, receiver([BODY]), 1024)
    assert await ex.body() == b"{}"
    cancelled = asyncio.Event()

    async def request() -> None:
        ex.watch()
        try:
            await asyncio.Event().wait()  # the model runs
        except asyncio.CancelledError:
            cancelled.set()
            raise

    task = asyncio.create_task(request())
    await asyncio.sleep(0.01)
    assert hook.callback is not None
    assert ex._watcher is None and ex._pending is None  # no task, nothing scheduled
    hook.callback()  # the connection is lost
    await asyncio.wait_for(cancelled.wait(), 5)
    assert ex.disconnected
    with pytest.raises(asyncio.CancelledError):
        await task
    ex.close()
    assert hook.callback is None


@pytest.mark.anyio
async def test_without_a_hook_a_watcher_task_reads_the_disconnect() -> None:
    disconnect = {"type": "http.disconnect"}
    ex = Exchange({"type": "http", "headers": []}, receiver([BODY, disconnect]), 1024)
    assert await ex.body() == b"{}"

    async def request() -> None:
        ex.watch()
        await asyncio.Event().wait()

    task = asyncio.create_task(request())
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    assert ex.disconnected
    ex.close()


def test_the_length_check_answers_the_header_asked_for_on_the_same_walk() -> None:
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", b"12"),
        (b"inference-header-content-length", b"5"),
        (b"inference-header-content-length", b"7"),  # the first one counts, as header()'s
    ]
    ex = Exchange({"type": "http", "headers": headers}, receiver([]), 1024)
    assert ex.check_length(b"inference-header-content-length") == b"5"
    assert ex.check_length(b"content-type") == b"application/json"
    assert ex.check_length(b"accept") is None
    assert ex.check_length() is None  # (nothing asked)


@pytest.mark.parametrize(
    ("headers", "error"),
    [
        ([(b"content-type", b"x"), (b"content-length", b"2048")], PayloadTooLarge),
        ([(b"content-length", b"12a"), (b"content-type", b"x")], InvalidInput),
        # the first Content-Length is the one checked, whatever header is asked for
        ([(b"content-length", b"4096"), (b"content-length", b"1")], PayloadTooLarge),
    ],
)
def test_the_length_check_still_refuses_whatever_header_it_answers(
    headers: list[tuple[bytes, bytes]], error: type[Exception]
) -> None:
    ex = Exchange({"type": "http", "headers": headers}, receiver([]), 1024)
    for asked in (b"", b"content-type", b"content-length"):
        with pytest.raises(error):
            ex.check_length(asked)
