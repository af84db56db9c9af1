"""The HTTP exchange's disconnect watching (server/http/_exchange.py): on Podium's own listeners
a request whose body is read waits on its connection's LostHook, with no task of its own;
elsewhere (no hook, or a body still to come) a watcher task reads ``receive()``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from podium.errors import InvalidInput, PayloadTooLarge
from podium.server._limits import LOST_HOOK, LostHook
from podium.server.http._access import HttpAccess
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
async def test_the_task_serving_the_request_is_the_connections_or_looked_up_once() -> None:
    # What the HTTP app hands the data plane (its calls in flight are kept by task): the task
    # the connection noted on the hook, else (no hook, or a hook without one) the current one.
    async def served(scope: dict[str, Any]) -> Any:
        ex = Exchange(scope, receiver([BODY]), 1024)
        await ex.body()
        ex.watch()
        task = ex.task
        ex.close()
        assert ex.task is None  # let go with the request
        return task

    noted = LostHook()
    noted.task = asyncio.current_task()  # as _start_asgi_task notes it
    inner = asyncio.create_task(served({"type": "http", "headers": [], LOST_HOOK: noted}))
    assert await inner is noted.task  # the connection's, not the task it ran in
    for scope in (
        {"type": "http", "headers": [], LOST_HOOK: LostHook()},
        {"type": "http", "headers": []},
    ):
        inner = asyncio.create_task(served(scope))
        assert await inner is inner


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


def counting_access(receive: Any) -> HttpAccess:
    """A request's access as the access middleware makes it with the log on: its ``receive``
    counts the body's bytes (``counting``) over the server's ``receive``."""
    access = HttpAccess("id", False, 0)
    access._receive, access._send, access.counting = receive, None, True
    return access


@pytest.mark.anyio
async def test_the_body_read_under_the_access_middleware_is_counted_here_not_by_its_wrapper() -> (
    None
):
    server = receiver(
        [
            {"type": "http.request", "body": b"12345", "more_body": True},
            {"type": "http.request", "body": b"678", "more_body": False},
        ]
    )
    access = counting_access(server)
    ex = Exchange({"type": "http", "headers": []}, access.receive, 1024)
    assert ex._receive is server  # the server's own, read with no coroutine between
    assert await ex.body() == b"12345678"
    assert access.bytes_in == 8
    ex.close()


@pytest.mark.anyio
async def test_a_body_over_the_limit_is_counted_as_far_as_it_was_read() -> None:
    access = counting_access(receiver([{"type": "http.request", "body": b"x" * 20}]))
    ex = Exchange({"type": "http", "headers": []}, access.receive, 10)
    with pytest.raises(PayloadTooLarge):
        await ex.body()
    assert access.bytes_in == 20  # what the client sent, as the access middleware counted it


@pytest.mark.anyio
async def test_a_body_the_models_request_reads_itself_is_counted() -> None:
    access = counting_access(receiver([{"type": "http.request", "body": b"abc"}]))
    ex = Exchange({"type": "http", "headers": []}, access.receive, 1024)
    message = await ex.app_receive()  # (a model's starlette Request, Podium read nothing)
    assert message["body"] == b"abc" and access.bytes_in == 3
    ex.close()


@pytest.mark.anyio
async def test_a_receive_wrapped_again_above_the_access_middleware_is_read_through() -> None:
    server = receiver([{"type": "http.request", "body": b"abc"}])
    access = counting_access(server)

    async def wrapped() -> dict[str, Any]:  # another middleware's, between the two
        return await access.receive()

    ex = Exchange({"type": "http", "headers": []}, wrapped, 1024)
    assert ex._receive is wrapped
    assert await ex.body() == b"abc"
    assert access.bytes_in == 3  # counted once, by the access middleware's receive
