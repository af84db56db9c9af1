"""What is wrong with a JSON body that msgspec refused, in words a client can act on.

msgspec reports two faults of the text itself poorly: bytes that are not UTF-8 inside a string
raise a bare ``UnicodeDecodeError`` before msgspec 0.23 (not a ``msgspec.DecodeError``, so it
escapes handlers that catch only that, as a 500), with a position inside the string rather than the
body, and from 0.23 a ``DecodeError`` "Invalid UTF-8 encoded string" with no position; and an escaped
UTF-16 surrogate without its other half (``"\\ud800"``) is reported as "Input data was truncated"
or "invalid utf-16 surrogate pair". :func:`json_problem` names both exactly; every other error
keeps msgspec's own words. It runs only once decoding has failed: the bytes are scanned then, never
on a request that parses.
"""

from __future__ import annotations

import re

import msgspec

__all__ = ["JSON_ERRORS", "json_problem"]

#: What decoding a client's JSON with msgspec raises for a body that is not valid JSON
#: (``msgspec.ValidationError``, a ``DecodeError``, is the body's shape, not its text).
JSON_ERRORS = (msgspec.DecodeError, UnicodeDecodeError)

# A ``\u`` escape of a UTF-16 surrogate (D800-DFFF), where the backslash really starts an escape:
# it follows an even number of backslashes (``\\ud800`` is a backslash, then the text "ud800").
_SURROGATE = re.compile(rb"(?<!\\)(?:\\\\)*(\\u[dD][89a-fA-F][0-9a-fA-F]{2})")
_LOW = re.compile(rb"\\u[dD][c-fC-F][0-9a-fA-F]{2}")
_AT_BYTE = re.compile(r"\(byte (\d+)\)")


def json_problem(exc: Exception, data: bytes | bytearray | memoryview | str) -> str:
    """Why ``data`` is not JSON, for ``exc`` (one of :data:`JSON_ERRORS`) raised by msgspec while
    decoding it: invalid UTF-8 and lone surrogate escapes named with their byte offset, anything
    else as msgspec says it (``JSON is malformed: ...``). Never raises."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    if isinstance(exc, UnicodeDecodeError) or "UTF-8" in str(exc):
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as found:
            bad = raw[found.start : found.start + 1]
            return (
                f"invalid UTF-8: byte 0x{bad.hex()} at offset {found.start} ({found.reason}); "
                "JSON text must be UTF-8"
            )
        if isinstance(exc, UnicodeDecodeError):
            return f"invalid UTF-8 ({exc.reason}); JSON text must be UTF-8"
        return str(exc)
    text = str(exc)
    lone = _lone_surrogate(raw)
    if lone is not None:
        offset, escape = lone
        at = _AT_BYTE.search(text)
        # msgspec stops at the first fault: the lone escape is it unless msgspec names a byte
        # before it ("truncated" names none, and is what msgspec says for a lone high surrogate).
        if at is None or int(at.group(1)) >= offset:
            return (
                f"lone UTF-16 surrogate escape '{escape}' at offset {offset}: half of a "
                "surrogate pair is no character (send both halves, or the character as UTF-8)"
            )
    return text


def _lone_surrogate(raw: bytes) -> tuple[int, str] | None:
    """The offset and text of the first surrogate escape that is not half of a pair."""
    skip = -1  # the offset of a low surrogate that completed a pair
    for match in _SURROGATE.finditer(raw):
        start = match.start(1)
        if start == skip:
            continue
        escape = match.group(1)
        if escape[2:3] in b"dD" and escape[3:4].lower() in b"89ab":  # a high surrogate
            if _LOW.match(raw, match.end(1)):
                skip = match.end(1)
                continue
        return start, escape.decode("ascii")
    return None
