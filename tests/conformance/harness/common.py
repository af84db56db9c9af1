"""What every scenario uses: the registry, HTTP and gRPC helpers that never raise, and the
normalisation that makes two servers' answers comparable (timings, ids and server names out)."""

from __future__ import annotations

import re
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

TIMEOUT = 30.0


@dataclass(frozen=True)
class Scenario:
    """One request (or a short exchange) sent to the reference server and to Podium.

    ``family`` picks the reference: ``oip`` (Triton) or ``torchserve``. ``fn(addr)`` returns
    ``(compare, raw)``: ``compare`` is what must be equal for the row to be "same" (already
    normalised), ``raw`` what the report shows. ``improvement``: why a Podium-only answer here may
    be a deliberate improvement (the row is then a candidate, not a plain difference)."""

    id: str
    item: str
    title: str
    family: str
    fn: Callable[[dict[str, str]], tuple[Any, Any]]
    improvement: str = ""


SCENARIOS: list[Scenario] = []


def scenario(id: str, item: str, title: str, family: str, improvement: str = ""):
    def register(fn):
        SCENARIOS.append(Scenario(id, item, title, family, fn, improvement))
        return fn

    return register


def run_scenario(sc: Scenario, addr: dict[str, str]) -> dict[str, Any]:
    """Run one scenario against one server; an exception is an observation, not a crash."""
    try:
        compare, raw = sc.fn(addr)
        return {"compare": compare, "raw": raw}
    except Exception as exc:  # the harness records what broke and goes on
        return {
            "compare": {"exception": type(exc).__name__},
            "raw": {"exception": f"{type(exc).__name__}: {exc}", "trace": _tail(exc)},
        }


def _tail(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc)[-3:])[-1500:]


# --- HTTP ---------------------------------------------------------------------------------

KEEP_HEADERS = ("content-type", "ts_request_sequence_id", "ts_request_sequence_end")


def http(method: str, url: str, **kw: Any) -> dict[str, Any]:
    """One HTTP exchange as ``{"status", "headers", "body"}`` (JSON when it parses)."""
    kw.setdefault("timeout", TIMEOUT)
    try:
        r = httpx.request(method, url, **kw)
    except httpx.HTTPError as exc:
        return {"status": None, "error": f"{type(exc).__name__}: {exc}"}
    headers: dict[str, Any] = {}
    for name, value in r.headers.multi_items():
        if name.lower() in KEEP_HEADERS or name.lower().startswith("x-"):
            headers.setdefault(name.lower(), []).append(value)
    return {"status": r.status_code, "headers": headers, "body": parse(r.content)}


def parse(content: bytes) -> Any:
    import json

    try:
        return json.loads(content)
    except ValueError:
        text = content.decode("utf-8", errors="replace")
        return text[:2000]


def status_and_shape(resp: dict[str, Any]) -> dict[str, Any]:
    """For an error answer: its status and the shape of its body (keys and value types), since
    texts always differ between servers; for a success: status and normalised body."""
    status = resp.get("status")
    if status is None or status >= 400:
        return {"status": status, "body": shape(resp.get("body"))}
    return {"status": status, "body": norm(resp.get("body"))}


def shape(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: shape(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [shape(v) for v in value[:1]]
    return type(value).__name__


# --- gRPC ---------------------------------------------------------------------------------


def grpc_error(exc: Exception) -> dict[str, Any]:
    """A failed gRPC call (grpc.RpcError or tritonclient's exception) as code and text."""
    code = getattr(exc, "code", None)
    if callable(code):
        return {"code": code().name, "message": exc.details()}  # type: ignore[attr-defined]
    status = getattr(exc, "status", None)
    if callable(status):
        return {"code": str(status()).replace("StatusCode.", ""), "message": exc.message()}  # type: ignore[attr-defined]
    return {"code": type(exc).__name__, "message": str(exc)}


# --- normalisation ------------------------------------------------------------------------

_ID = re.compile(
    r"\b(?:ts-seq-)?[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}\b"
)
_TIMING = re.compile(r"(^|_)(ns|ms|time|timestamp|last_inference|duration|memoryUsage)$", re.I)
DROP = {"pid", "id", "memoryUsage", "gpuUsage", "startTime", "gpu", "cpu", "modelUrl"}


def norm(value: Any, key: str = "") -> Any:
    """A JSON value with what always differs replaced: generated ids by ``<id>``, timings and
    counts of nanoseconds by ``<n>``, process ids dropped, dict keys sorted."""
    if isinstance(value, dict):
        return {k: norm(v, k) for k, v in sorted(value.items()) if k not in DROP}
    if isinstance(value, list):
        return [norm(v, key) for v in value]
    if isinstance(value, str):
        return _ID.sub("<id>", value)
    if isinstance(value, int | float) and not isinstance(value, bool) and _TIMING.search(key):
        return "<n>"
    return value


def is_error(compare: Any) -> bool:
    """Whether a compared observation is a refusal (HTTP >= 400, a gRPC code, an exception)."""
    if isinstance(compare, dict):
        if "exception" in compare:
            return True
        status = compare.get("status")
        if isinstance(status, int) and status >= 400:
            return True
        code = compare.get("code")
        if isinstance(code, str) and code != "OK":
            return True
    return False
