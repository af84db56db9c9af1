"""Response headers a model asked for, made safe for each protocol.

A model sets response headers through the ``headers`` parameter of its OIP response (MLServer's
convention; the data plane moves it to ``Answer.headers``) or, in a stateful sequence, through
``podium.Context.headers``. HTTP sends them as response headers, gRPC as trailing metadata (as
MLServer does). A header that the protocol cannot carry is left out with a warning, never sent
half-formed: a name that is not an HTTP token, a value with a line break or a NUL (which would
let a model's output forge other headers), and for gRPC a name that is not lower-case
``[0-9a-z_.-]`` once lowered, one of gRPC's own (``grpc-*``), or a value outside printable ASCII
(unless the name ends in ``-bin``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping

__all__ = ["grpc_metadata", "http_headers"]

logger = logging.getLogger("podium.server")

_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_GRPC_NAME = re.compile(r"[0-9a-z_.-]+")
_GRPC_VALUE = re.compile(r"[\x20-\x7e]*")
_RESERVED = frozenset({"content-length", "content-type", "transfer-encoding", "connection"})


Headers = Mapping[str, str] | Iterable[tuple[str, str]]


def _pairs(*sources: Headers | None) -> Iterable[tuple[str, str]]:
    for source in sources:
        if source:
            pairs = source.items() if isinstance(source, Mapping) else source
            for name, value in pairs:
                yield str(name), str(value)


def http_headers(*sources: Headers | None) -> list[tuple[bytes, bytes]]:
    """The headers of ``sources`` for an HTTP response (names lower-cased)."""
    out: list[tuple[bytes, bytes]] = []
    for name, value in _pairs(*sources):
        lowered = name.lower()
        if not _TOKEN.fullmatch(name) or lowered in _RESERVED:
            _warn_dropped(name, "its name cannot be an HTTP response header set by a model")
            continue
        if any(c in value for c in "\r\n\0"):
            _warn_dropped(name, "its value holds a line break or a NUL")
            continue
        try:
            out.append((lowered.encode("ascii"), value.encode("latin-1")))
        except UnicodeEncodeError:
            _warn_dropped(name, "its value is not Latin-1 text")
    return out


def grpc_metadata(*sources: Headers | None) -> tuple[tuple[str, str | bytes], ...]:
    """The headers of ``sources`` as gRPC metadata (names lower-cased; a ``-bin`` value as its
    UTF-8 bytes)."""
    out: list[tuple[str, str | bytes]] = []
    for name, value in _pairs(*sources):
        lowered = name.lower()
        if not _GRPC_NAME.fullmatch(lowered) or lowered.startswith("grpc-"):
            _warn_dropped(name, "its name cannot be gRPC metadata set by a model")
            continue
        if lowered.endswith("-bin"):
            out.append((lowered, value.encode()))
            continue
        if not _GRPC_VALUE.fullmatch(value):
            _warn_dropped(name, "its value is not printable ASCII")
            continue
        out.append((lowered, value))
    return tuple(out)


def _warn_dropped(name: str, why: str) -> None:
    logger.warning("response header %r set by a model is not sent: %s", name, why)
