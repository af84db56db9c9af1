"""The registry: which trusses are served, and the cases (requests) sent to each server serving
one of them. A case returns an observation; keys starting with ``_`` are recorded for the report
but not compared (timings, every header)."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import wire

TRUSSES_DIR = Path(__file__).resolve().parent.parent / "trusses"


@dataclass(frozen=True)
class Truss:
    """One truss, served alone by each server.

    ``wait``: what the harness waits for after starting a server (``ready``, ``live`` for a
    truss whose load is observed, ``exit`` for one that cannot load). ``env``: extra environment
    for both servers (``TRUSS_SECRET_*``). ``secret_files``: the secrets folder's files (Truss's
    ``/secrets``, Podium's ``--secrets-dir``)."""

    name: str
    group: str
    wait: str = "ready"
    env: dict[str, str] = field(default_factory=dict)
    secret_files: dict[str, str] = field(default_factory=dict)

    @property
    def path(self) -> Path:
        return TRUSSES_DIR / self.group / self.name


@dataclass(frozen=True)
class Case:
    truss: str
    id: str
    title: str
    fn: Callable[[Ctx], Any]


@dataclass
class Ctx:
    """What a case gets: the server's address and process (to see whether it exited)."""

    addr: str
    service: Any

    def post(self, path: str, **kw: Any) -> dict[str, Any]:
        return wire.request(self.addr, "POST", path, **kw)

    def get(self, path: str, **kw: Any) -> dict[str, Any]:
        return wire.request(self.addr, "GET", path, **kw)

    def predict(self, value: Any = None, **kw: Any) -> dict[str, Any]:
        if value is not None:
            kw["json_body"] = value
        return self.post("/v1/models/model:predict", **kw)

    def ws(self, messages: list[str | bytes], **kw: Any) -> dict[str, Any]:
        return wire.websocket(self.addr, messages, **kw)


TRUSSES: dict[str, Truss] = {}
CASES: list[Case] = []


def truss(name: str, group: str, **kw: Any) -> None:
    TRUSSES[name] = Truss(name, group, **kw)


def case(truss_name: str, id: str, title: str):
    def register(fn: Callable[[Ctx], Any]) -> Callable[[Ctx], Any]:
        CASES.append(Case(truss_name, id, title, fn))
        return fn

    return register


def run_case(c: Case, ctx: Ctx) -> dict[str, Any]:
    """One case against one server: ``{"compare", "raw"}``; an exception is an observation."""
    t0 = time.monotonic()
    try:
        raw = c.fn(ctx)
    except Exception as exc:  # the harness records what broke and goes on
        raw = {
            "exception": f"{type(exc).__name__}: {exc}",
            "_trace": "".join(traceback.format_exception(exc)[-3:])[-1500:],
        }
    return {"compare": strip(raw), "raw": raw, "seconds": round(time.monotonic() - t0, 2)}


def strip(value: Any) -> Any:
    """The observation without its ``_`` keys (what is compared)."""
    if isinstance(value, dict):
        return {k: strip(v) for k, v in value.items() if not str(k).startswith("_")}
    if isinstance(value, list):
        return [strip(v) for v in value]
    return value


def probes(ctx: Ctx) -> dict[str, Any]:
    """Truss's liveness, readiness and SageMaker probes, in one observation."""
    return {
        "GET /": ctx.get("/"),
        "GET /v1/models/model": ctx.get("/v1/models/model"),
        "GET /v1/models/model/loaded": ctx.get("/v1/models/model/loaded"),
        "GET /ping": ctx.get("/ping"),
    }
