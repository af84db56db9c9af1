"""TorchServe's ``Context``: what a handler sees of its model and of the requests of a batch.

The same methods as ``ts.context.Context`` (``get_request_header``, ``set_response_status``,
...), so a handler written for TorchServe calls it unmodified. TorchServe has one worker per
process and one batch at a time, so its per-batch state sits on the context; Podium may run
several instances' handle calls in threads, so the per-batch state (request ids, request
headers, response headers and status, the streaming channel) is kept per thread, and a handler
that stored the context in ``initialize`` still sees its own batch.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable
from typing import Any

from ._metrics import TorchServeMetrics
from ._metrics_yaml import TORCHSERVE_DEFAULT

__all__ = ["Context", "RequestProcessor", "decode_predict_response"]


class RequestProcessor:
    """One request's headers in, and the status and headers the handler sets for its response."""

    def __init__(self, request_header: dict[str, Any]) -> None:
        self._status_code = 200
        self._reason_phrase: str | None = None
        self._response_header: dict[str, str] = {}
        self._request_header = request_header
        self.touched = False  # whether the handler set a status or a header (cheap check)

    def get_request_property(self, key: str) -> Any:
        found = self._request_header.get(key)
        if found is None and isinstance(key, str):
            found = self._request_header.get(key.lower())  # HTTP header names are case-blind
        return found

    def get_request_properties(self) -> dict[str, Any]:
        return self._request_header

    def report_status(self, code: int, reason_phrase: str | None = None) -> None:
        self._status_code = code
        self._reason_phrase = reason_phrase
        self.touched = True

    def get_response_status_code(self) -> int:
        return self._status_code

    def get_response_status_phrase(self) -> str | None:
        return self._reason_phrase

    def add_response_property(self, key: str, value: str) -> None:
        self._response_header[key] = value
        self.touched = True

    def get_response_headers(self) -> dict[str, str]:
        return self._response_header

    def get_response_header(self, key: str) -> str | None:
        return self._response_header.get(key)


class _Batch(threading.local):
    request_ids: dict[int, str] | None = None
    request_processor: list[RequestProcessor] | None = None
    # streaming: called with (index, value) for each intermediate response; None when the
    # call cannot stream (the values are then kept and sent together with the final one)
    emit: Callable[[int, Any], None] | None = None
    kept: dict[int, list[Any]] | None = None


class Context:
    """What a TorchServe handler receives in ``initialize(context)`` and ``handle(data, context)``."""

    header_key_sequence_id = "ts_request_sequence_id"
    header_key_sequence_start = "ts_request_sequence_start"
    header_key_sequence_end = "ts_request_sequence_end"

    def __init__(
        self,
        model_name: str,
        model_dir: str,
        manifest: dict[str, Any] | None,
        batch_size: int,
        gpu: int | None,
        server_version: str,
        limit_max_image_pixels: bool = True,
        metrics: Any = None,
        model_yaml_config: dict[str, Any] | None = None,
    ) -> None:
        self.model_name = model_name
        self.manifest = manifest
        self._system_properties = {
            "model_dir": model_dir,
            "gpu_id": gpu,
            "batch_size": batch_size,
            "server_name": "Podium",
            "server_version": server_version,
            "limit_max_image_pixels": limit_max_image_pixels,
        }
        self._batch = _Batch()
        if metrics is None:  # TorchServe's metrics API, recording nowhere
            metrics = TorchServeMetrics(None, model_name, TORCHSERVE_DEFAULT.model_metrics)
        self.metrics = metrics
        self.model_yaml_config = model_yaml_config if model_yaml_config is not None else {}
        self.cache: dict[Any, Any] = {}
        self.stopping_criteria: Any = None
        self.cl_socket = _Socket(self)  # what the real ts send_intermediate_predict_response uses

    @property
    def system_properties(self) -> dict[str, Any]:
        return self._system_properties

    @property
    def request_ids(self) -> dict[int, str] | None:
        return self._batch.request_ids

    @request_ids.setter
    def request_ids(self, value: dict[int, str] | None) -> None:
        self._batch.request_ids = value

    @property
    def request_processor(self) -> list[RequestProcessor] | None:
        return self._batch.request_processor

    @request_processor.setter
    def request_processor(self, value: list[RequestProcessor] | None) -> None:
        self._batch.request_processor = value

    @property
    def _request_processor(self) -> list[RequestProcessor]:
        found = self._batch.request_processor
        if found is None:
            raise RuntimeError(
                f"model '{self.model_name}': request headers and responses exist only inside "
                "handle() (there is no request during initialize)"
            )
        return found

    def get_request_id(self, idx: int = 0) -> str | None:
        ids = self._batch.request_ids
        return None if ids is None else ids.get(idx)

    def get_request_header(self, idx: int, key: str) -> Any:
        return self._request_processor[idx].get_request_property(key)

    def get_all_request_header(self, idx: int) -> dict[str, Any]:
        return self._request_processor[idx].get_request_properties()

    def set_response_content_type(self, idx: int, value: str) -> None:
        self.set_response_header(idx, "content-type", value)

    def get_response_content_type(self, idx: int) -> str | None:
        return self.get_response_headers(idx).get("content-type")

    def get_response_status(self, idx: int) -> tuple[int, str | None]:
        processor = self._request_processor[idx]
        return processor.get_response_status_code(), processor.get_response_status_phrase()

    def set_response_status(self, code: int = 200, phrase: str = "", idx: int = 0) -> None:
        processors = self._batch.request_processor
        if processors is not None and processors[idx] is not None:
            processors[idx].report_status(code, reason_phrase=phrase)

    def set_all_response_status(self, code: int = 200, phrase: str = "") -> None:
        for processor in self._request_processor:
            processor.report_status(code, reason_phrase=phrase)

    def get_response_headers(self, idx: int) -> dict[str, str]:
        return self._request_processor[idx].get_response_headers()

    def set_response_header(self, idx: int, key: str, value: str) -> None:
        self._request_processor[idx].add_response_property(key, value)

    def get_sequence_id(self, idx: int) -> Any:
        return self._request_processor[idx].get_request_property(self.header_key_sequence_id)

    # -- streaming (ts.protocol.otf_message_handler.send_intermediate_predict_response) -----

    def send_intermediate(self, ret: list[Any], req_id_map: dict[int, str]) -> None:
        """One intermediate response per request of the batch (``ret[idx]`` for each idx)."""
        batch = self._batch
        for idx in req_id_map:
            value = ret[idx]
            if batch.emit is not None:
                batch.emit(idx, value)
            else:
                if batch.kept is None:
                    batch.kept = {}
                batch.kept.setdefault(idx, []).append(value)

    def __eq__(self, other: object) -> bool:
        return self is other

    __hash__ = object.__hash__


class _Socket:
    """``context.cl_socket`` for the real ``ts`` package's ``send_intermediate_predict_response``,
    which encodes the responses in TorchServe's backend wire format and calls ``sendall``."""

    def __init__(self, context: Context) -> None:
        self._context = context

    def sendall(self, message: bytes | bytearray) -> None:
        ids = self._context.request_ids or {}
        by_id = {req_id: idx for idx, req_id in ids.items()}
        ret: dict[int, Any] = {}
        for req_id, body in decode_predict_response(bytes(message)):
            if req_id in by_id:
                ret[by_id[req_id]] = body
        self._context.send_intermediate(ret, {idx: ids[idx] for idx in ret})  # type: ignore[arg-type]


def decode_predict_response(message: bytes) -> list[tuple[str, bytes]]:
    """(request id, body) of each prediction in a TorchServe backend predict response."""

    def take_int(at: int) -> tuple[int, int]:
        return struct.unpack_from("!i", message, at)[0], at + 4

    def take_bytes(at: int) -> tuple[bytes, int]:
        length, at = take_int(at)
        return message[at : at + max(length, 0)], at + max(length, 0)

    at = 4  # the batch's code
    _, at = take_bytes(at)  # the batch's message
    found: list[tuple[str, bytes]] = []
    while True:
        length, at = take_int(at)
        if length == -1:
            return found
        req_id, at = message[at : at + length].decode(), at + length
        _, at = take_bytes(at)  # content type
        _, at = take_int(at)  # status code
        _, at = take_bytes(at)  # reason phrase
        count, at = take_int(at)
        for _ in range(count):  # headers
            _, at = take_bytes(at)
            _, at = take_bytes(at)
        body, at = take_bytes(at)
        found.append((req_id, body))
