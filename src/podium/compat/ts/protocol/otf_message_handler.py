"""``ts.protocol.otf_message_handler``: streaming intermediate responses from a handler."""

from __future__ import annotations

from typing import Any

from podium.model.torchserve import Context

__all__ = ["send_intermediate_predict_response"]


def send_intermediate_predict_response(
    ret: list[Any],
    req_id_map: dict[int, str],
    message: str = "Intermediate Prediction success",
    code: int = 200,
    context: Context | None = None,
) -> None:
    """Send ``ret[idx]`` to the client of each request of the batch as one streamed item.

    The handler's return value is each request's last item. ``message`` and ``code`` are
    accepted for TorchServe's signature; the status a client sees is the one set with
    ``context.set_response_status``.
    """
    if context is None:
        raise TypeError("send_intermediate_predict_response needs the handler's context")
    context.send_intermediate(ret, req_id_map)
