"""What a TorchServe handler receives, row by row: its request's id, its body as TorchServe's
frontend would have handed it over (a form's fields, JSON, bytes), the sequence contexts of a
batch, and the sequence headers a handler's answer may carry."""

from __future__ import annotations

import uuid
from email import message_from_bytes
from email.policy import HTTP
from typing import Any
from urllib.parse import parse_qsl

import msgspec

from ...codecs import JSON_ERRORS
from ...types import Context as SequenceContext
from ...types import WireInput, WireProtocol, current_context
from ._context import Context, RequestProcessor

__all__ = [
    "Refused",
    "contexts_for",
    "end_sequences",
    "request_id_of",
    "row_of",
    "unwrap",
]


def request_id_of(value: Any) -> str:
    """A request's id: the one it came with (:class:`WireInput`), else a fresh uuid."""
    found = value.request_id if isinstance(value, WireInput) else None
    return found or str(uuid.uuid4())


def unwrap(value: Any) -> tuple[WireProtocol, Any]:
    """A request's protocol and payload. The data plane hands a handler a :class:`WireInput`
    (``InputKind.WIRE``); a bare payload (a direct call, as in tests) is TorchServe's REST body."""
    if isinstance(value, WireInput):
        return value.protocol, value.payload
    return WireProtocol.TORCHSERVE_REST, value


def _form(body: bytes, content_type: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The fields of a multipart/form-data body, and each one's content type."""
    message = message_from_bytes(
        b"Content-Type: " + content_type.encode("latin-1") + b"\r\n\r\n" + body, policy=HTTP
    )
    fields: dict[str, Any] = {}
    types: dict[str, Any] = {}
    for part in message.iter_parts() if message.is_multipart() else ():
        name = part.get_param("name", header="content-disposition")
        if not isinstance(name, str):
            continue
        payload = part.get_payload(decode=True) or b""
        ctype = part.get("content-type")
        fields[name] = _value(bytes(payload), (ctype or "").split(";")[0].strip().lower())
        types[name] = {"content-type": ctype}
    return fields, types


def _value(body: bytes, content_type: str) -> Any:
    """A body as TorchServe's backend hands it over: JSON parsed, text decoded, else bytearray."""
    if content_type == "application/json":
        try:
            return msgspec.json.decode(body)
        except (*JSON_ERRORS, RecursionError):  # as TorchServe: what does not parse stays bytes
            return bytearray(body)
    if content_type.startswith("text"):
        try:
            return body.decode("utf-8")
        except UnicodeDecodeError:
            return bytearray(body)
    return bytearray(body)


class Refused(Exception):
    """A handler raised TorchServe's ``PredictionException``: its requests get that status."""

    def __init__(self, exc: Exception) -> None:
        super().__init__(str(exc))
        self.exc = exc


def row_of(
    value: Any, request: Any, sequence: SequenceContext | None
) -> tuple[WireProtocol, dict[str, Any], dict[str, Any]]:
    """A request's protocol, its element of TorchServe's ``data`` list, and its headers for the
    context: for a request of a sequence, with those TorchServe's frontend adds (its id, the
    start flag on the sequence's first request, the end flag when the client ends it, on any
    protocol)."""
    protocol, payload = unwrap(value)
    row, headers = _row(protocol, payload, request)
    if sequence is not None:
        headers[Context.header_key_sequence_id] = sequence.sequence_id
        if sequence.first:
            headers[Context.header_key_sequence_start] = "true"
        if sequence.last:
            headers[Context.header_key_sequence_end] = "true"
    return protocol, row, headers


def _row(
    protocol: WireProtocol, payload: Any, request: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    headers: dict[str, Any] = {}
    raw_headers = getattr(request, "headers", None)
    if raw_headers is not None:
        headers = {k.lower(): v for k, v in raw_headers.items()}
    if protocol is WireProtocol.TORCHSERVE_GRPC:
        if isinstance(payload, dict):
            row = {k: bytearray(v) if isinstance(v, bytes) else v for k, v in payload.items()}
        else:
            row = {"data": bytearray(payload or b"")}  # what TorchServe's gRPC clients send
        return row, headers
    # TorchServe 0.12's /predictions (and KServe v1 :predict) pass no query parameters: only
    # its legacy /{model}/predict route did, which neither serves.
    row = {}
    content_type = str(headers.get("content-type", "")).split(";")[0].strip().lower()
    if isinstance(payload, bytes | bytearray):
        if content_type == "multipart/form-data":
            fields, types = _form(bytes(payload), str(headers["content-type"]))
            row.update(fields)
            return row, {**types, **headers}
        if content_type == "application/x-www-form-urlencoded":
            for key, value in parse_qsl(bytes(payload).decode("latin-1"), keep_blank_values=True):
                row[key] = bytearray(value.encode())
            return row, headers
        row["body"] = _value(bytes(payload), content_type)
    else:
        row["body"] = payload  # parsed JSON, or the OIP request as JSON
    return row, {"body": {"content-type": content_type or None}, **headers}


def contexts_for(count: int) -> list[SequenceContext | None] | None:
    """The sequence contexts of a call's ``count`` requests (read on the event loop: the
    handler's thread does not see the task's context variables); None outside sequences."""
    found = current_context.get()
    if found is None:
        return None
    items: list[SequenceContext | None] = (
        [found] if isinstance(found, SequenceContext) else list(found)
    )
    if len(items) != count:
        raise RuntimeError(
            f"{len(items)} sequence contexts for a call of {count} requests: the scheduler "
            "must set one per request"
        )
    return items


def end_sequences(
    processors: list[RequestProcessor], contexts: list[SequenceContext | None]
) -> None:
    """End each sequence whose handler set ``ts_request_sequence_end`` (any value: TorchServe's
    handlers set the sequence id) on its response, as TorchServe's frontend does."""
    key = Context.header_key_sequence_end
    for processor, sequence in zip(processors, contexts, strict=True):
        if sequence is None or not processor.touched:
            continue
        headers = processor.get_response_headers()
        if key in headers or any(k.lower() == key for k in headers):
            sequence.end()
