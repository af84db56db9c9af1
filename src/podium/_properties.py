"""TorchServe's ``config.properties``, read as Java reads a properties file.

TorchServe's frontend loads it with ``java.util.Properties.load``: a line ending in an odd number
of backslashes goes on on the next line (whose leading blanks are dropped); lines starting with
``#`` or ``!`` are comments; a key ends at the first unescaped ``=``, ``:`` or blank, and one
``=`` or ``:`` with blanks around it may separate it from the value; ``\\t``, ``\\n``, ``\\r``,
``\\f``, ``\\uXXXX`` and ``\\<any>`` are escapes. The ``models`` key holds JSON (per model, per
version: ``minWorkers``, ``batchSize``, ``marName``, ...), usually written over several
continued lines.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["PropertiesError", "models_of", "parse_properties"]

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_BLANKS = " \t\f"


class PropertiesError(ValueError):
    """A ``config.properties`` that cannot be read; the message names the line or the key."""


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Each logical line with the number of the physical line it starts on."""
    lines: list[tuple[int, str]] = []
    pending: str | None = None
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.lstrip(_BLANKS)  # leading blanks go, a continued line's too
        if pending is None:
            if not line or line[0] in "#!":
                continue
            start = number
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:  # continued on the next line
            pending = (pending or "") + line[:-1]
            continue
        lines.append((start, (pending or "") + line))
        pending = None
    if pending is not None:
        lines.append((start, pending))
    return lines


#: An escape: a backslash and the character after it, with up to four more after a ``u``.
_ESCAPE = re.compile(r"\\(u(.{0,4})|.)", re.DOTALL)


def _unescape(text: str, where: str) -> str:
    def one(found: re.Match[str]) -> str:
        digits = found[2]
        if digits is None:
            return _ESCAPES.get(found[1], found[1])
        if len(digits) != 4 or any(c not in "0123456789abcdefABCDEF" for c in digits):
            raise PropertiesError(f"{where}: malformed \\uxxxx escape")
        return chr(int(digits, 16))

    return _ESCAPE.sub(one, text)


#: A logical line: its key (up to the first ``=``, ``:`` or blank not escaped), blanks, one ``=``
#: or ``:``, blanks, and its value; every part may be empty.
_KEY_VALUE = re.compile(r"((?:\\.?|[^\\=: \t\f])*)[ \t\f]*[=:]?[ \t\f]*(.*)", re.DOTALL)


def _split(line: str) -> tuple[str, str]:
    """The raw key and raw value of a logical line, as ``Properties.load`` splits them."""
    found = _KEY_VALUE.match(line)
    assert found is not None  # the pattern matches any text
    return found[1], found[2]


def parse_properties(text: str, where: str = "config.properties") -> dict[str, str]:
    """Every key of a properties file and its value (the last one given wins, as in Java)."""
    found: dict[str, str] = {}
    for number, line in _logical_lines(text):
        key, value = _split(line)
        here = f"{where}:{number}"
        found[_unescape(key, here)] = _unescape(value, here)
    return found


def models_of(value: str, where: str = "config.properties") -> dict[str, dict[str, dict[str, Any]]]:
    """The ``models`` key: model name → version → its settings (``minWorkers``, ``marName``...)."""
    try:
        data = json.loads(value)
    except json.JSONDecodeError as exc:
        raise PropertiesError(f"{where}: 'models' is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise PropertiesError(f"{where}: 'models' must be a JSON object of models")
    models: dict[str, dict[str, dict[str, Any]]] = {}
    for name, versions in data.items():
        if not isinstance(versions, dict) or not all(
            isinstance(v, dict) for v in versions.values()
        ):
            raise PropertiesError(
                f"{where}: 'models.{name}' must map each version to its settings "
                '(e.g. {"1.0": {"minWorkers": 1}})'
            )
        models[str(name)] = {str(version): dict(settings) for version, settings in versions.items()}
    return models
