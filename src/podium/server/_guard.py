"""Keep web browsers off the management API, and the management API off the network by accident.

Registering a model runs its code, so the management API must obey only the tools an operator
runs (curl, TorchServe's clients, scripts), never a web page the operator happens to have open.
A page can make the browser send requests to ``http://127.0.0.1:8081`` (cross-site requests), and
it can make a name it controls resolve to 127.0.0.1 (DNS rebinding), so that its requests look
same-origin to the browser. :class:`BrowserGuard` refuses both, before anything else runs:

1. ``Host``: an IP literal, ``localhost``, or a name in ``allowed_hosts``; else **421 Misdirected
   Request**. The port is not checked (port forwards change it; rebinding needs a name). A request
   without ``Host`` (HTTP/1.0), or with an empty one, passes: browsers always send a name.
2. ``Origin`` (sent by browsers with every cross-origin request and every POST): only an origin in
   ``allowed_origins`` passes (default: none); else **403**. ``Sec-Fetch-Site`` other than
   ``same-origin`` or ``none`` (``cross-site``, ``same-site``: other ports of the same host are
   the same site) also needs an allowed ``Origin``; else **403**. This covers ``<img>``-style GETs,
   which carry no ``Origin``.
3. A body type that a page may send without a CORS preflight (``text/plain``,
   ``application/x-www-form-urlencoded``, ``multipart/form-data``) on any method but GET, HEAD and
   OPTIONS: **415**, even with an empty body (a ``<form>`` with no fields sends one). Podium reads
   only JSON bodies; TorchServe's clients send their parameters in the query string, with no
   body and no ``Content-Type``, and keep working.

For an allowed origin the guard answers the CORS preflight itself (before token authorization,
since a preflight never carries a key) and adds ``Access-Control-Allow-Origin`` to the answers.

Refusals have TorchServe's error shape (``{"code", "type", "message"}``); they are HTTP-only (the
gRPC listeners cannot be reached by a browser, see ``docs/security.md``), hence not in the error
table of ``errors.py``.

:func:`check_exposure` is the start-up rule: a management listener on a non-loopback address
without token authorization refuses to start unless the operator says ``--allow-open-management``.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Iterable

from ..config import normalize_host, normalize_origin, origin_of
from ._asgi import ASGIApp, Message, Receive, Scope, Send, header
from .http._responses import send_body, send_json

__all__ = [
    "BrowserGuard",
    "UnsafeExposure",
    "check_exposure",
    "is_loopback",
]

logger = logging.getLogger("podium")

#: Content types a web page may send cross-site without a CORS preflight (the Fetch standard's
#: CORS-safelisted ``Content-Type`` values).
SIMPLE_BODY_TYPES = frozenset(
    {b"text/plain", b"application/x-www-form-urlencoded", b"multipart/form-data"}
)
#: Methods that change nothing on the management API.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: ``Sec-Fetch-Site`` values that no other site can cause: a page of this very origin, or the
#: user typing the address.
OWN_FETCH_SITES = frozenset({b"same-origin", b"none"})

_PREFLIGHT_HEADERS = [
    (b"access-control-allow-methods", b"GET, POST, PUT, DELETE, OPTIONS"),
    (b"access-control-allow-headers", b"authorization, content-type"),
    (b"access-control-max-age", b"600"),
    (b"vary", b"Origin"),
]


class UnsafeExposure(ValueError):
    """The management API would be open to the network without a key, and nobody said so."""


# -- the middleware ----------------------------------------------------------------------------


class BrowserGuard:
    """Pure ASGI: refuses requests that a web page made (see the module's rules) before ``app``
    sees anything; a refused request's body is never read.

    ``allowed_hosts``: names besides IP literals and ``localhost`` that ``Host`` may carry
    (normalized with :func:`normalize_host`). ``allowed_origins``: web origins whose pages may
    call the API (normalized with :func:`normalize_origin`).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        allowed_hosts: Iterable[str] = (),
        allowed_origins: Iterable[str] = (),
    ) -> None:
        self.app = app
        self.allowed_hosts = frozenset(normalize_host(h) for h in allowed_hosts)
        self.allowed_origins = frozenset(normalize_origin(o) for o in allowed_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        method = scope.get("method", "GET")
        bad_host: bytes | None = None
        origins: list[bytes] = []
        fetch_site: bytes | None = None
        simple_body: bytes | None = None
        for name, value in scope["headers"]:
            if name == b"host":
                if bad_host is None and not self._host_allowed(value):
                    bad_host = value
            elif name == b"origin":
                origins.append(value)
            elif name == b"sec-fetch-site":
                fetch_site = value.strip().lower()
            elif name == b"content-type" and method not in SAFE_METHODS:
                if value.split(b";", 1)[0].strip().lower() in SIMPLE_BODY_TYPES:
                    simple_body = value
        origin = self._origin_allowed(origins) if origins else None
        problem = None
        if bad_host is not None:
            problem = ("host", bad_host)
        elif origins and origin is None:
            problem = ("origin", origins[0])
        elif origin is None and fetch_site is not None and fetch_site not in OWN_FETCH_SITES:
            problem = ("site", fetch_site)
        elif simple_body is not None:
            problem = ("body", simple_body)
        if problem is not None:
            await _refuse(kind, send, *problem)
            return
        if origin is None:
            await self.app(scope, receive, send)
            return
        # A page of an allowed origin: answer its preflight, and let it read the answers.
        cors = [(b"access-control-allow-origin", origins[0]), (b"vary", b"Origin")]
        if (
            kind == "http"
            and method == "OPTIONS"
            and header(scope, b"access-control-request-method") is not None
        ):
            await send_body(send, 204, [cors[0], *_PREFLIGHT_HEADERS], b"")
            return

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *cors]}
            await send(message)

        await self.app(scope, receive, send_with_cors)

    def _host_allowed(self, value: bytes) -> bool:
        if not value.strip():
            return True  # no authority: as without Host, not a browser
        host = _host_name(value)
        if host is None:
            return False
        if host == "localhost" or host in self.allowed_hosts:
            return True
        try:
            ipaddress.ip_address(host.strip("[]") if host.startswith("[") else host)
        except ValueError:
            return False
        return True

    def _origin_allowed(self, values: list[bytes]) -> str | None:
        """The origin, if the request names exactly one and it is allowed."""
        if len(values) != 1:
            return None
        found = origin_of(values[0].decode("latin-1"))
        return found if found is not None and found in self.allowed_origins else None


def _host_name(value: bytes) -> str | None:
    """The host of a ``Host`` value, lower-cased, without port or trailing dot; None if malformed.
    An IPv6 literal keeps its brackets."""
    text = value.decode("latin-1").strip().lower()
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            return None
        host, rest = text[: end + 1], text[end + 1 :]
    else:
        host, sep, rest = text.partition(":")
        rest = sep + rest
    if rest and (not rest.startswith(":") or not (rest[1:].isdigit() and rest[1:].isascii())):
        return None
    host = host.rstrip(".") if not host.startswith("[") else host
    return host or None


#: Per refusal: the status, TorchServe's name of the error, how much of the value sent the
#: message quotes (``{!r}``), and the message.
_REFUSALS = {
    "host": (
        421,
        "MisdirectedRequestException",
        200,
        "the management API does not answer to Host {!r}: it answers to IP addresses, "
        "'localhost' and the names given with --management-allowed-hosts (a web page can "
        "point a name it controls at this machine: DNS rebinding)",
    ),
    "origin": (
        403,
        "ForbiddenException",
        200,
        "the management API refuses requests from web pages (Origin {!r}): a page could "
        "register a model, that is run code on this machine. Call it from a tool (curl, a "
        "script), or list the page's origin with --management-allowed-origins",
    ),
    "site": (
        403,
        "ForbiddenException",
        50,
        "the management API refuses requests that another site made a browser send "
        "(Sec-Fetch-Site {!r}). Call it from a tool (curl, a script), or list the page's "
        "origin with --management-allowed-origins",
    ),
    "body": (
        415,
        "UnsupportedMediaTypeException",
        100,
        "the management API takes no {!r} body (any web page can make a browser send "
        "one): send the parameters in the query string with no body "
        "(curl -X POST 'http://127.0.0.1:8081/models?url=...'), or as a JSON body "
        "(Content-Type: application/json)",
    ),
}


async def _refuse(kind: str, send: Send, refusal: str, value: bytes) -> None:
    status, name, shown, text = _REFUSALS[refusal]
    message = text.format(value.decode("latin-1")[:shown])
    if kind == "websocket":
        await send({"type": "websocket.close", "code": 1008, "reason": message[:120]})
        return
    await send_json(send, status, {"code": status, "type": name, "message": message})


# -- start-up ----------------------------------------------------------------------------------


def is_loopback(host: str) -> bool:
    """Whether a listener bound to ``host`` is reachable from this machine only: an address in
    127.0.0.0/8 or ``::1``, or a name all of whose addresses are. A wildcard (``0.0.0.0``, ``::``,
    ``""``) or a name that does not resolve is not."""
    literal = host.strip("[]")
    if not literal:
        return False
    try:
        address = ipaddress.ip_address(literal)
    except ValueError:
        pass
    else:
        return _loopback(address)
    try:
        infos = socket.getaddrinfo(literal, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return False
    addresses = {info[4][0] for info in infos}
    return bool(addresses) and all(
        _loopback(ipaddress.ip_address(str(a).partition("%")[0])) for a in addresses
    )


def _loopback(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def check_exposure(host: str, *, keys: bool, allow_open: bool, ports: str) -> None:
    """The start-up rule for the management listeners on ``host`` (``ports``: for messages).

    Loopback: nothing to say. Elsewhere: a warning, and without token authorization (``keys``
    false) :class:`UnsafeExposure` unless ``allow_open`` (``--allow-open-management``).
    """
    if is_loopback(host):
        return
    where = f"{host or '*'} ({ports})"
    if not keys:
        if not allow_open:
            raise UnsafeExposure(
                f"the management API would listen on {where}, reachable from other machines, "
                "without token authorization: anyone who can reach it could register a model, "
                "that is run any code on this machine. Keep --management-host on loopback "
                "(127.0.0.1, the default), or leave token authorization on (no --no-auth; a "
                "writable --key-file), or, if a firewall or proxy already guards these ports, "
                "say so with --allow-open-management"
            )
        logger.warning(
            "the management API listens on %s WITHOUT token authorization "
            "(--allow-open-management): anyone who can reach it can run code on this machine",
            where,
        )
        return
    logger.warning(
        "the management API listens on %s, reachable from other machines; it needs the "
        "management key, but keep the key file secret and the ports behind a firewall",
        where,
    )
