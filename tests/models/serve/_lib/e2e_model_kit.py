"""Helpers for the end-to-end test models; imported inside the server process, never by pytest.

A model adds this directory to ``sys.path`` and imports it. ``record`` appends one JSON line per
event to the file named by ``PODIUM_E2E_EVENTS`` (O_APPEND writes, so threads and the event loop
can share it); the tests read that file to learn what happened and in which order.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

import numpy as np

GATE_TIMEOUT = 10.0


def record(tag: str, event: str, **fields: Any) -> None:
    path = os.environ.get("PODIUM_E2E_EVENTS")
    if not path:
        return
    line = json.dumps({"tag": tag, "event": event, **fields}) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _scalar(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.item() if value.size == 1 else value.tolist()
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str | bytes):
        value = value[0]
    if isinstance(value, bytes):
        return value.decode()
    return value


def plain(inputs: Any) -> dict[str, Any]:
    """The same plain dict whichever protocol the inputs came through (OIP, JSON or bytes)."""
    if isinstance(inputs, bytes | str):
        inputs = json.loads(inputs)
    if not isinstance(inputs, dict):
        raise ValueError(f"expected an object, got {type(inputs).__name__}")
    return {k: _scalar(v) for k, v in inputs.items()}


def wait_gate(path: str, within: float = GATE_TIMEOUT) -> bool:
    """Block until the file ``path`` exists (the test opens the gate); False after ``within``
    seconds (a safety net: no model blocks for ever)."""
    deadline = time.monotonic() + within
    while not os.path.exists(path):  # noqa: ASYNC240 (one stat of a local file)
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


async def await_gate(path: str, within: float = GATE_TIMEOUT) -> bool:
    deadline = time.monotonic() + within
    while not os.path.exists(path):  # noqa: ASYNC240 (one stat of a local file)
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


def describe(value: Any) -> Any:
    """A JSON description of a value and its Python type, so tests can see what arrived."""
    if isinstance(value, np.ndarray):
        return {"ndarray": str(value.dtype), "shape": list(value.shape), "data": value.tolist()}
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, float):
        return {"float": value}
    if isinstance(value, str):
        return {"str": value}
    if isinstance(value, bytes):
        return {"bytes": value.decode("latin-1")}
    if value is None:
        return {"none": None}
    if isinstance(value, list):
        return {"list": [describe(v) for v in value]}
    if isinstance(value, dict):
        return {"dict": {str(k): describe(v) for k, v in value.items()}}
    return {"object": type(value).__name__}
