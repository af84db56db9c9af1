"""Sending responses over raw ASGI: JSON, bytes, errors, chunked streams and SSE."""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Callable
from types import MethodType
from typing import Any

import msgspec

from ... import codecs
from ...errors import PodiumError, ValidationFailed, http_status
from ...types import Reply
from .._asgi import Send
from .._headers import Headers, http_headers
from .._ts_errors import torchserve_error
from ._access import HttpAccess

logger = logging.getLogger("podium.http")

JSON = [(b"content-type", b"application/json")]
TEXT = [(b"content-type", b"text/plain; charset=utf-8")]
OCTETS = [(b"content-type", b"application/octet-stream")]
HTML = [(b"content-type", b"text/html; charset=utf-8")]
SSE = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]

encoder = msgspec.json.Encoder(enc_hook=codecs.json_default)


def encode_json(value: Any) -> bytes:
    """JSON for a model's value; numpy arrays and scalars included."""
    try:
        return encoder.encode(value)
    except TypeError as exc:
        from ...errors import UnsupportedRepresentation

        raise UnsupportedRepresentation(f"value cannot be encoded as JSON: {exc}") from exc


async def send_body(
    send: Send,
    status: int,
    headers: list[tuple[bytes, bytes]],
    body: bytes,
    model_headers: Headers | None = None,
) -> None:
    """A whole response, with ``Content-Length`` (so the server need not chunk it); after
    ``headers``, those a model set (``model_headers``: an answer's, ``Answer.headers``), which
    ``http_headers`` checks."""
    length = (b"content-length", str(len(body)).encode())
    if model_headers:
        headers = [*headers, *http_headers(model_headers), length]
    else:
        headers = [*headers, length]
    if type(send) is MethodType and type(send.__self__) is HttpAccess:
        # the access middleware's own send (no other wrapper between): its part is done once
        # for both messages, on the list just made, and they go to the server's send
        send = send.__self__.whole(status, headers, body)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def send_json(send: Send, status: int, value: Any) -> None:
    await send_body(send, status, JSON, encoder.encode(value))


def error_body(exc: PodiumError) -> dict[str, Any]:
    body: dict[str, Any] = {"error": exc.message}
    if isinstance(exc, ValidationFailed) and exc.details:
        body["details"] = exc.details
    return body


def retry_headers(exc: PodiumError) -> list[tuple[bytes, bytes]]:
    """``Retry-After`` (whole seconds) for a refusal that says when to retry (an overloaded
    model's: docs/scaling.md, "Overload"); none for any other error."""
    retry_after = getattr(exc, "retry_after", None)
    if retry_after is None:
        return []
    return [(b"retry-after", b"%d" % max(1, math.ceil(retry_after)))]


async def send_error(
    send: Send,
    exc: PodiumError,
    extra: list[tuple[bytes, bytes]] | None = None,
    *,
    torchserve: bool = False,
) -> None:
    """``exc`` as Podium's error body, or (``torchserve``) TorchServe's: the management API's,
    and the inference API's under ``/predictions``."""
    status = http_status(exc)
    retry = retry_headers(exc)
    if status >= 500 and not retry:  # an overloaded model's refusals are counted, not logged
        logger.warning("%s %s", status, exc.message)
    headers = JSON + (extra or []) + retry
    body = torchserve_error(exc)[1] if torchserve else error_body(exc)
    await send_body(send, status, headers, encoder.encode(body))


def chunk_of(item: Any) -> bytes:
    """One chunk of a chunked (Truss/TorchServe) stream: str/bytes as they are, else a JSON line."""
    if isinstance(item, Reply):  # its status and headers went with the first chunk
        item = item.body
    if isinstance(item, bytes | bytearray):
        return bytes(item)
    if isinstance(item, str):
        return item.encode()
    return encode_json(item) + b"\n"


_REPLY_SKIP = frozenset({"content-type", "content-length", "transfer-encoding", "connection"})


def reply_start(
    reply: Reply, default: list[tuple[bytes, bytes]]
) -> tuple[int, list[tuple[bytes, bytes]]]:
    """The status and headers of a :class:`Reply`: its content type, else ``default``'s."""
    headers = (
        [(b"content-type", reply.content_type.encode("latin-1"))]
        if reply.content_type
        else list(default)
    )
    kept = {k: v for k, v in reply.headers.items() if k.lower() not in _REPLY_SKIP}
    headers.extend(http_headers(kept))  # what HTTP cannot carry is left out, with a warning
    return reply.status, headers


async def send_reply(send: Send, reply: Reply) -> None:
    """A whole :class:`Reply`: bytes and text as they are, anything else as JSON."""
    body = reply.body
    if isinstance(body, bytes | bytearray):
        data, default = bytes(body), OCTETS
    elif isinstance(body, str):
        data, default = body.encode(), TEXT
    else:
        data, default = encode_json(body), JSON
    status, headers = reply_start(reply, default)
    await send_body(send, status, headers, data)


#: The first item of a stream without items (``anext(items, NOTHING)``).
NOTHING: Any = object()


async def send_stream(
    send: Send,
    first: Any,
    items: AsyncIterator[Any],
    headers: list[tuple[bytes, bytes]],
    encode: Callable[[Any], bytes],
    failed: Callable[[Exception], bytes | None],
    done: bytes = b"",
) -> None:
    """A streamed answer: ``first`` (taken before, so that its errors still have their status)
    and the rest of ``items``, each ``encode``d, then ``done``; a :class:`Reply` first sets the
    status and headers. ``failed(exc)``: the last bytes of a stream the model failed, in place
    of ``done`` (None: none), or it re-raises."""
    status = 200
    if isinstance(first, Reply):  # the status and headers a handler set go first
        status, headers = reply_start(first, headers)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    end = done
    if first is not NOTHING:
        await send({"type": "http.response.body", "body": encode(first), "more_body": True})
        try:
            async for item in items:
                await send({"type": "http.response.body", "body": encode(item), "more_body": True})
        except Exception as exc:
            end = failed(exc) or b""
    await send({"type": "http.response.body", "body": end, "more_body": False})


def sse_event(value: Any) -> bytes:
    return b"data: " + encode_json(value) + b"\n\n"


def sse_event_raw(data: bytes) -> bytes:
    return b"data: " + data + b"\n\n"
