"""The wire, as a client sees it: one HTTP/1.1 exchange per fresh connection, read with h11 so
that every chunk of a chunked answer is recorded as the server framed it (TCP may merge or split
them; h11's ``chunk_start``/``chunk_end`` say where each chunk begins and ends), bodies decoded by
their content type (JSON; Truss's MessagePack with numpy, decoded by Truss's own
``serialization`` module), and the websocket exchanges of ``/v1/websocket``.

Nothing here raises on a server's misbehaviour: a refused connection, a timeout or a body cut
short are observations (``error``, ``incomplete``)."""

from __future__ import annotations

import base64
import json
import math
import socket
import time
from typing import Any

import h11

TIMEOUT = 30.0
_NOTHING = object()

# Headers compared between the servers: the content type, Truss's error headers and any header a
# scenario names (what a model sets itself). Everything else (date, server, content-length, which
# follows from the body, Podium's x-request-id) is kept in the raw record only.
COMPARED_HEADERS = ("content-type", "x-baseten-error-source", "x-baseten-error-code")


def request(
    addr: str,
    method: str,
    path: str,
    *,
    json_body: Any = _NOTHING,
    msgpack_body: Any = _NOTHING,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    keep: tuple[str, ...] = (),
    timeout: float = TIMEOUT,
    decode_as: str = "",
) -> dict[str, Any]:
    """One exchange; ``{"status", "headers", "framing", "chunks"?, "body"}``.

    ``json_body`` sends JSON (``content-type: application/json``), ``msgpack_body`` Truss's
    MessagePack (``content-type: application/octet-stream``), ``body`` raw bytes. Keys starting
    with ``_`` are recorded but not compared."""
    hdrs = {"host": addr, "user-agent": "podium-truss-conformance"}
    if json_body is not _NOTHING:
        body = json.dumps(json_body).encode()
        hdrs["content-type"] = "application/json"
    elif msgpack_body is not _NOTHING:
        body = _msgpack_dumps(msgpack_body)
        hdrs["content-type"] = "application/octet-stream"
    hdrs.update({k.lower(): v for k, v in (headers or {}).items()})
    if body or method in ("POST", "PUT", "PATCH"):
        hdrs["content-length"] = str(len(body))
    host, port = addr.rsplit(":", 1)
    deadline = time.monotonic() + timeout
    started = time.monotonic()
    conn = h11.Connection(h11.CLIENT)
    out: dict[str, Any] = {}
    try:
        sock = socket.create_connection((host, int(port)), timeout=timeout)
    except OSError as exc:
        return {"error": f"connect: {type(exc).__name__}"}
    chunks: list[bytearray] = []
    plain = bytearray()
    response = None
    try:
        sock.sendall(conn.send(h11.Request(method=method, target=path, headers=list(hdrs.items()))))
        if body:
            sock.sendall(conn.send(h11.Data(data=body)))
        sock.sendall(conn.send(h11.EndOfMessage()))
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                sock.settimeout(left)
                data = sock.recv(65536)
                conn.receive_data(data)
                continue
            if isinstance(event, h11.InformationalResponse):
                continue
            if isinstance(event, h11.Response):
                response = event
                out["_first_byte_s"] = round(time.monotonic() - started, 2)
                continue
            if isinstance(event, h11.Data):
                if event.chunk_start or not chunks:
                    chunks.append(bytearray())
                chunks[-1] += event.data
                plain += event.data
                continue
            if isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                break
    except TimeoutError:
        out["incomplete"] = "timeout"
    except h11.RemoteProtocolError as exc:
        # The server closed the connection in the middle of a body (a stream that broke off).
        out["incomplete"] = "closed mid-body" if response is not None else f"protocol: {exc}"
    except OSError as exc:
        out["incomplete"] = f"{type(exc).__name__}"
    finally:
        sock.close()
    out["_seconds"] = round(time.monotonic() - started, 2)
    if response is None:
        out["error"] = out.pop("incomplete", "no response")
        return out
    all_headers: dict[str, list[str]] = {}
    for name, value in response.headers:
        all_headers.setdefault(name.decode().lower(), []).append(value.decode("latin-1"))
    wanted = set(COMPARED_HEADERS) | {k.lower() for k in keep}
    out["status"] = response.status_code
    out["headers"] = {k: v for k, v in sorted(all_headers.items()) if k in wanted}
    out["_headers"] = all_headers
    te = ",".join(all_headers.get("transfer-encoding", [])).lower()
    out["framing"] = "chunked" if "chunked" in te else "length"
    ctype = (all_headers.get("content-type") or [""])[0]
    if out["framing"] == "chunked":
        out["chunks"] = [decode_text(bytes(c)) for c in chunks]
    # A stream's body is the items' bytes one after the other (Truss labels it octet-stream):
    # text, never MessagePack.
    streamed = out["framing"] == "chunked" and ctype.startswith("application/octet-stream")
    out["body"] = decode(bytes(plain), decode_as or ("text/plain" if streamed else ctype))
    out["_bytes"] = decode_text(bytes(plain[:2000]))
    return out


def decode(content: bytes, content_type: str) -> Any:
    """A body as a comparable value: JSON parsed, MessagePack unpacked, otherwise text."""
    media = content_type.partition(";")[0].strip().lower()
    if media == "application/json":
        try:
            # NaN and Infinity are no JSON, though Python writes and reads them: marked as such
            # (and comparable: NaN is not equal to itself).
            return {"json": json.loads(content, parse_constant=lambda c: f"<not JSON: {c}>")}
        except ValueError:
            return {"text": decode_text(content)}
    if media == "application/octet-stream" and content:
        try:
            return {"msgpack": jsonable(_msgpack_loads(content))}
        except Exception:
            return {"text": decode_text(content)}
    return {"text": decode_text(content)}


def decode_text(content: bytes) -> str:
    try:
        return content.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(content).decode()


def jsonable(value: Any) -> Any:
    """A decoded MessagePack value with numpy arrays and scalars spelled out (dtype, shape)."""
    import numpy as np

    if isinstance(value, np.ndarray):
        return {"ndarray": str(value.dtype), "shape": list(value.shape), "data": value.tolist()}
    if isinstance(value, np.generic):
        return {"numpy": str(value.dtype), "value": jsonable(value.item())}
    if isinstance(value, float) and not math.isfinite(value):
        return {"float": repr(value)}  # comparable: NaN is not equal to itself
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, bytes):
        return {"bytes": decode_text(value)}
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return {type(value).__name__: str(value)}


def _msgpack_dumps(value: Any) -> bytes:
    # Truss's own encoder (numpy arrays, datetimes, decimals, uuids), as its clients use it.
    from truss.templates.shared.serialization import truss_msgpack_serialize

    return truss_msgpack_serialize(value)


def _msgpack_loads(content: bytes) -> Any:
    from truss.templates.shared.serialization import truss_msgpack_deserialize

    return truss_msgpack_deserialize(content)


def websocket(
    addr: str,
    messages: list[str | bytes],
    *,
    receive: int | None = None,
    timeout: float = 10.0,
    linger: float = 3.0,
) -> dict[str, Any]:
    """Open ``/v1/websocket``, send ``messages`` one by one (reading one answer after each
    unless ``receive`` says how many to read after sending them all), then read until the server
    closes (or ``timeout``). Records what came back and the close code and reason."""
    from websockets.exceptions import ConnectionClosed, InvalidStatus
    from websockets.sync.client import connect

    out: dict[str, Any] = {"received": []}
    try:
        ws = connect(f"ws://{addr}/v1/websocket", open_timeout=timeout, close_timeout=timeout)
    except InvalidStatus as exc:
        return {"refused": exc.response.status_code, "body": decode_text(exc.response.body or b"")}
    except OSError as exc:
        return {"error": f"connect: {type(exc).__name__}"}
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    try:
        try:
            for message in messages:
                ws.send(message)
                if receive is None:
                    out["received"].append(_ws_text(ws.recv(timeout=timeout)))
            for _ in range(receive or 0):
                out["received"].append(_ws_text(ws.recv(timeout=timeout)))
            # Then whatever else comes, up to the close (``linger`` seconds at most).
            while True:
                out["received"].append(_ws_text(ws.recv(timeout=linger)))
        except ConnectionClosed:
            pass
        except TimeoutError:
            out["still_open"] = True
    finally:
        ws.close()
    # The close frame the server sent (1006 where it sent none and dropped the connection).
    rcvd = ws.protocol.close_rcvd
    out["close"] = (
        {"code": rcvd.code, "reason": rcvd.reason}
        if rcvd
        else {"code": ws.close_code, "reason": ws.close_reason}
    )
    return out


def _ws_text(message: str | bytes) -> Any:
    if isinstance(message, bytes):
        return {"bytes": decode_text(message)}
    return message


def leave_after_first_chunk(addr: str, path: str, value: Any, timeout: float = 10.0) -> dict:
    """POST ``value`` as JSON, read up to the first chunk of the answer's body, then close the
    connection (a client that goes away mid-stream). Returns what was read."""
    body = json.dumps(value).encode()
    host, port = addr.rsplit(":", 1)
    conn = h11.Connection(h11.CLIENT)
    headers = [
        ("host", addr),
        ("content-type", "application/json"),
        ("content-length", str(len(body))),
    ]
    out: dict[str, Any] = {}
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(conn.send(h11.Request(method="POST", target=path, headers=headers)))
        sock.sendall(conn.send(h11.Data(data=body)))
        sock.sendall(conn.send(h11.EndOfMessage()))
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(sock.recv(65536))
                continue
            if isinstance(event, h11.Response):
                out["status"] = event.status_code
                continue
            if isinstance(event, h11.Data):
                out["first_chunk"] = decode_text(bytes(event.data))
                break
            if isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                out["ended_before_a_chunk"] = True
                break
    return out
