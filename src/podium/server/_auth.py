"""Token authorization, compatible with TorchServe's: three keys in an owner-only key file.

By default the management API needs its key (as TorchServe 0.11+; the inference APIs stay open);
``--auth`` puts every listener behind keys, ``--no-auth`` none (see ``docs/security.md``). Podium
makes three random keys at start-up and writes them to the key file (``--key-file``, default
``./key_file.json``) in TorchServe's shape::

    {"management": {"key": "...", "expiration time": "..."},
     "inference": {"key": "...", "expiration time": "..."},
     "API": {"key": "..."}}

A client sends ``Authorization: Bearer <key>`` (gRPC: metadata ``authorization``). The inference
key opens the inference APIs, the management key the management APIs, and the API key only the
token API (``POST /token?type=management|inference``, which replaces one key). The keys are not
interchangeable. A missing or wrong key is :class:`~podium.errors.Unauthenticated` (401 /
``UNAUTHENTICATED``) and nothing of the request runs. Health checks stay open (``/ping``,
``/v2/health/*``, ``grpc.health.v1.Health``): load balancers and probes have no key, and they
learn nothing but readiness.

:class:`Authorizer` holds the keys and checks them (``check_header`` for HTTP,
``check_metadata`` for gRPC); :class:`AuthMiddleware` is the pure ASGI wrapper for an app.
"""

from __future__ import annotations

import contextlib
import datetime
import hmac
import json
import os
import secrets
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import Unauthenticated
from ._asgi import ASGIApp, Receive, Scope, Send, header
from .http._responses import JSON, send_body
from .openai._errors import error_body, is_openai_path

__all__ = [
    "INFERENCE",
    "KINDS",
    "MANAGEMENT",
    "TOKEN",
    "AuthMiddleware",
    "Authorizer",
    "inference_rule",
    "iso_utc",
    "management_rule",
    "render_error",
]

INFERENCE = "inference"
MANAGEMENT = "management"
TOKEN = "API"  # the key of the token API, named as in TorchServe's key file
KINDS = (MANAGEMENT, INFERENCE, TOKEN)

_WHAT = {
    INFERENCE: "the inference API",
    MANAGEMENT: "the management API",
    TOKEN: "the token API",
}

#: Inference routes that stay open with ``--auth``: health, for probes and load balancers.
OPEN_INFERENCE_PATHS = frozenset({"/ping", "/v2/health/live", "/v2/health/ready"})


@dataclass(slots=True)
class _Key:
    value: str
    expires: float | None  # epoch seconds; None: never


def iso_utc(epoch: float) -> str:
    """An epoch time as TorchServe writes it: UTC, ISO 8601 to the millisecond, ``Z``."""
    moment = datetime.datetime.fromtimestamp(epoch, datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Authorizer:
    """The three keys, the key file, and the checks.

    Keys are made with :mod:`secrets` (32 random bytes, URL-safe) and compared in constant time.
    ``expiration`` (minutes, 0 = never) applies to the management and inference keys, as in
    TorchServe; the API key never expires.
    """

    def __init__(self, key_file: Path, *, expiration: float = 0) -> None:
        self.key_file = key_file
        self.expiration = expiration
        self._keys: dict[str, _Key] = {}

    @classmethod
    def create(cls, key_file: Path | None = None, *, expiration: float = 0) -> Authorizer:
        """New keys, written to ``key_file`` (owner-only). ``OSError`` if it cannot be written."""
        made = cls(key_file or Path.cwd() / "key_file.json", expiration=expiration)
        for kind in KINDS:
            made._new_key(kind)
        made.write()
        return made

    def _new_key(self, kind: str) -> None:
        expires = None
        if kind != TOKEN and self.expiration > 0:
            expires = time.time() + self.expiration * 60
        self._keys[kind] = _Key(secrets.token_urlsafe(32), expires)

    def key(self, kind: str) -> str:
        """The current key of ``kind`` (``"management"``, ``"inference"`` or ``"API"``)."""
        return self._keys[kind].value

    def regenerate(self, kind: str) -> None:
        """Replace the management or inference key (the token API); the file is rewritten."""
        if kind not in (MANAGEMENT, INFERENCE):
            raise ValueError(f"only the management and inference keys are regenerated, not {kind}")
        self._new_key(kind)
        self.write()

    def contents(self) -> dict[str, Any]:
        """The key file's JSON, in TorchServe's shape."""
        out: dict[str, Any] = {}
        for kind in KINDS:
            key = self._keys[kind]
            entry: dict[str, Any] = {"key": key.value}
            if kind != TOKEN:
                entry["expiration time"] = iso_utc(key.expires) if key.expires is not None else None
            out[kind] = entry
        return out

    def write(self) -> None:
        """Write the key file atomically, readable by its owner only (0600) from its creation:
        a temporary file made with those permissions, then renamed over the old one."""
        directory = self.key_file.parent
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".key_file.", dir=directory)  # mode 0600
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(self.contents(), out, indent=2)
                out.write("\n")
            os.chmod(tmp, 0o600)
            os.replace(tmp, self.key_file)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def remove_file(self) -> None:
        """Delete the key file (at shutdown: the keys die with the server), unless it holds
        another server's keys now (two servers started with one key file: the second one's
        clients keep theirs)."""
        with contextlib.suppress(OSError, ValueError):
            if json.loads(self.key_file.read_text(encoding="utf-8")) == self.contents():
                self.key_file.unlink()

    # -- checks ----------------------------------------------------------------------------

    def check_header(self, value: str | bytes | None, kind: str) -> None:
        """Check an ``Authorization`` header value against the key of ``kind``; raise
        :class:`~podium.errors.Unauthenticated` naming what is wrong."""
        if isinstance(value, bytes):
            value = value.decode("latin-1")
        what = _WHAT[kind]
        if not value:
            # The key file's name, never its path: a 401 goes to anybody who asks.
            raise Unauthenticated(
                f"{what} needs a key: send 'Authorization: Bearer <{_name(kind)} key>' "
                f"(the {_name(kind)} key is in the server's key file, {self.key_file.name})"
            )
        scheme, _, token = value.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Unauthenticated(
                f"{what}: the Authorization header must be 'Bearer <{_name(kind)} key>'"
            )
        key = self._keys[kind]
        if not hmac.compare_digest(token.encode(), key.value.encode()):
            raise Unauthenticated(f"{what}: the key is not the {_name(kind)} key")
        if key.expires is not None and time.time() >= key.expires:
            raise Unauthenticated(
                f"{what}: the {_name(kind)} key expired at {iso_utc(key.expires)}; get a new one "
                f"with POST /token?type={kind} and the API key"
            )

    def check_metadata(self, metadata: Iterable[tuple[str, Any]] | None, kind: str) -> None:
        """Check a gRPC call's metadata (``context.invocation_metadata()``) against the key of
        ``kind`` (``"inference"`` or ``"management"``); raise
        :class:`~podium.errors.Unauthenticated` (``UNAUTHENTICATED``) naming what is wrong."""
        value = None
        for name, item in metadata or ():
            if name.lower() == "authorization":
                value = item
                break
        self.check_header(value, kind)


def _name(kind: str) -> str:
    return "API" if kind == TOKEN else kind


# -- ASGI -------------------------------------------------------------------------------------

Rule = Callable[[str, str], str | None]
_CHALLENGE = (b"www-authenticate", b'Bearer realm="podium"')
#: The status and body of a refusal, for the request's path.
Render = Callable[[Unauthenticated, str], tuple[int, bytes]]


def inference_rule(method: str, path: str) -> str | None:
    """The key an inference route needs: none for health checks, else the inference key."""
    if len(path) > 1 and path.endswith("/"):
        path = path[:-1]
    return None if path in OPEN_INFERENCE_PATHS else INFERENCE


def management_rule(method: str, path: str) -> str | None:
    """The key a management route needs: the API key for the token API, else the management key."""
    if len(path) > 1 and path.endswith("/"):
        path = path[:-1]
    return TOKEN if path == "/token" else MANAGEMENT


class AuthMiddleware:
    """Pure ASGI: checks the key a route needs (``rule``) before ``app`` sees anything.

    A refused request gets 401 with ``WWW-Authenticate: Bearer`` and the body ``render`` makes;
    its body is never read and ``app`` is never called.
    """

    def __init__(
        self,
        app: ASGIApp,
        authorizer: Authorizer,
        rule: Rule,
        render: Render,
    ) -> None:
        self.app = app
        self.authorizer = authorizer
        self.rule = rule
        self.render = render

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = None
        if scope["type"] in ("http", "websocket"):  # a WebSocket is opened with a GET
            kind = self.rule(scope.get("method", "GET"), scope["path"])
        if kind is not None:
            try:
                self.authorizer.check_header(header(scope, b"authorization"), kind)
            except Unauthenticated as exc:
                if scope["type"] == "websocket":  # refused before the handshake (HTTP 403)
                    await send({"type": "websocket.close", "code": 1008})
                    return
                status, body = self.render(exc, scope["path"])
                await send_body(send, status, [*JSON, _CHALLENGE], body)
                return
        await self.app(scope, receive, send)


def render_error(exc: Unauthenticated, path: str = "") -> tuple[int, bytes]:
    """A 401 in the body shape of Podium's inference API (``{"error": "..."}``), or of OpenAI's
    on its paths (``{"error": {"message", "type", "param", "code"}}``: what the ``openai``
    client reads)."""
    if is_openai_path(path):
        return 401, json.dumps(error_body(exc)[1]).encode()
    return 401, json.dumps({"error": exc.message}).encode()
