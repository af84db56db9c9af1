"""The guarded protocol's request cycle in process (``server/_cycle.py``): its memory of response
header pairs is bounded and never holds a refused pair, a pair its maker checked (the request
id) is written as it is and not remembered, and its ``message_event`` keeps
asyncio.Event's promises. What it sends is pinned against uvicorn by
``test_cycle_differential.py``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from podium.server import _cycle
from podium.server._access import RequestIds, client_id
from podium.server._cycle import MAX_PAIR_BYTES, MAX_PAIRS, CheckedPair, Cycle, Signal
from podium.server._limits_setup import check_uvicorn
from podium.server.http._access import HttpAccess


class _Transport:
    def __init__(self) -> None:
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass


class _Flow:
    write_paused = False
    read_paused = False

    def resume_reading(self) -> None:
        pass


class _State:
    default_headers: list[tuple[bytes, bytes]] = [(b"date", b"Sun, 29 Nov 2026 21:00:00 GMT")]


class _Protocol:
    """What a cycle takes from its protocol."""

    flow = _Flow()
    logger = access_logger = None
    access_log = False
    server_state = _State()
    expect_100_continue = False

    def on_response_complete(self) -> None:
        pass


def _cycle_for(transport: _Transport) -> Cycle:
    return Cycle(_Protocol(), transport, {"method": "GET", "http_version": "1.1"}, True)


async def _head(headers: list[Any]) -> bytes:
    transport = _Transport()
    cycle = _cycle_for(transport)
    await cycle.send({"type": "http.response.start", "status": 200, "headers": headers})
    return transport.written[0]


@pytest.fixture(autouse=True)
def _empty_memory() -> None:
    _cycle._known.clear()


@pytest.mark.anyio
async def test_the_memory_of_pairs_is_bounded() -> None:
    for n in range(MAX_PAIRS * 3):
        head = await _head([(b"x-id", str(n).encode()), (b"content-length", b"0")])
        assert b"\r\nx-id: %d\r\n" % n in head
        assert len(_cycle._known) <= MAX_PAIRS
    long = b"v" * MAX_PAIR_BYTES
    assert b"x-long: " + long in await _head([(b"x-long", long), (b"content-length", b"0")])
    assert (b"x-long", long) not in _cycle._known


@pytest.mark.anyio
async def test_answers_of_ever_new_lengths_keep_the_other_pairs_and_skip_the_checks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a model's answers vary in length: each length is a pair never seen before
    checked: list[Any] = []
    searched: list[bytes] = []
    check = _cycle._check

    def counted_check(pair: Any) -> Any:
        checked.append(pair)
        return check(pair)

    class CountedSearch:
        def __init__(self, pattern: Any) -> None:
            self.pattern = pattern

        def search(self, text: bytes) -> Any:
            searched.append(text)
            return self.pattern.search(text)

    monkeypatch.setattr(_cycle, "_check", counted_check)
    monkeypatch.setattr(_cycle, "HEADER_RE", CountedSearch(_cycle.HEADER_RE))
    monkeypatch.setattr(_cycle, "HEADER_VALUE_RE", CountedSearch(_cycle.HEADER_VALUE_RE))
    kind = (b"content-type", b"application/json")
    for n in range(MAX_PAIRS * 3):
        transport = _Transport()
        cycle = _cycle_for(transport)
        length = b"%d" % (1000 + n)
        await cycle.send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [kind, (b"content-length", length)],
            }
        )
        assert transport.written[0].endswith(b"content-length: %s\r\n\r\n" % length)
        assert (cycle.chunked_encoding, cycle.expected_content_length) == (False, 1000 + n)
        assert len(_cycle._known) <= MAX_PAIRS
    # the content type and the date were checked once: no length emptied the memory
    assert checked.count(kind) == 1 and sum(name == b"date" for name, _ in checked) == 1
    assert not any(text.isdigit() or text == b"content-length" for text in searched)
    assert sorted(searched) == sorted(
        [b"content-type", b"application/json", b"date", _State.default_headers[0][1]]
    )


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("pair", "message"),
    [
        ((b"x (bad)", b"1"), "Invalid HTTP header name."),
        ((b"x-bad", b"a\x01b"), "Invalid HTTP header value."),
        ((b"x-bad", b"a\nb"), "Invalid HTTP header value."),
    ],
)
async def test_a_refused_pair_is_refused_every_time_and_never_remembered(
    pair: tuple[bytes, bytes], message: str
) -> None:
    for _ in range(3):
        with pytest.raises(RuntimeError, match=message):
            await _head([pair])
    assert pair not in _cycle._known


@pytest.mark.anyio
async def test_a_checked_pair_is_written_as_it_is_and_never_remembered() -> None:
    # the access middleware's request id: a new value on every response, which would fill the
    # memory and cost each response uvicorn's checks
    for n in range(3):
        pair = CheckedPair((b"x-request-id", b"3f9a2c71b0e4-%x" % n))
        head = await _head([(b"content-type", b"application/json"), pair])
        assert head.endswith(
            b"content-type: application/json\r\nx-request-id: %s\r\n" % pair[1]
            + b"transfer-encoding: chunked\r\n\r\n"
        )
    assert (b"content-type", b"application/json") in _cycle._known
    assert not any(name == b"x-request-id" for name, _ in _cycle._known)


def test_every_request_id_makes_a_pair_uvicorn_would_check_and_pass() -> None:
    # the promise a CheckedPair rests on: the ids the middleware answers with (its own, or a
    # client's it accepted) pass uvicorn's checks, and the pair is marked only then
    from uvicorn.protocols.http.httptools_impl import HEADER_RE, HEADER_VALUE_RE

    ids = [RequestIds().make() for _ in range(3)]
    ids += [client_id(b"0-9AZaz._:;=/+@-" * 8), client_id("a" * 128)]
    assert client_id(b"a\r\nb") is None and client_id("a b") is None
    for request_id in ids:
        assert request_id is not None
        access = HttpAccess(request_id, False, 0)
        access.counting = False
        access._send = None
        headers: list[tuple[bytes, bytes]] = []
        access.whole(200, headers, b"")
        (pair,) = headers
        assert type(pair) is CheckedPair and pair == (b"x-request-id", request_id.encode())
        assert not HEADER_RE.search(pair[0]) and not HEADER_VALUE_RE.search(pair[1])
        assert pair[0] == pair[0].lower()


@pytest.mark.anyio
async def test_a_remembered_length_frames_the_body_as_uvicorn_reads_it() -> None:
    headers = [(b"Content-Length", b"3")]
    for _ in range(2):  # checked, then remembered
        transport = _Transport()
        cycle = _cycle_for(transport)
        await cycle.send({"type": "http.response.start", "status": 200, "headers": headers})
        assert (cycle.chunked_encoding, cycle.expected_content_length) == (False, 3)
        with pytest.raises(RuntimeError, match="shorter than Content-Length"):
            await cycle.send({"type": "http.response.body", "body": b"ab"})
    # a second length does not count, as in uvicorn; a chunked encoding first neither
    head = await _head([(b"content-length", b"1"), (b"content-length", b"2")])
    assert head.endswith(b"content-length: 1\r\ncontent-length: 2\r\n\r\n")
    head = await _head([(b"transfer-encoding", b"chunked"), (b"content-length", b"x")])
    assert head.endswith(b"transfer-encoding: chunked\r\ncontent-length: x\r\n\r\n")


@pytest.mark.anyio
async def test_a_signal_keeps_asyncio_events_promises() -> None:
    signal = Signal()
    assert not signal.is_set()
    waiters = [asyncio.ensure_future(signal.wait()) for _ in range(3)]
    await asyncio.sleep(0)
    waiters[1].cancel()
    await asyncio.sleep(0)
    signal.set()
    assert signal.is_set()
    assert await waiters[0] is True and await waiters[2] is True
    assert waiters[1].cancelled()
    assert signal._waiters == []  # every waiter left, the cancelled one too
    assert await signal.wait() is True  # set: at once
    signal.clear()
    waiter = asyncio.ensure_future(signal.wait())
    await asyncio.sleep(0)
    assert not waiter.done()
    signal.set()
    assert await waiter is True


def test_a_uvicorn_cycle_with_state_the_cycle_does_not_make_fails_the_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def init(self: Any, scope: Any) -> None:
        self.scope = scope
        self.novel = True

    check_uvicorn()  # the installed uvicorn's cycle: all made
    monkeypatch.setattr(RequestResponseCycle, "__init__", init)
    with pytest.raises(RuntimeError, match=r"RequestResponseCycle\.novel"):
        check_uvicorn()
