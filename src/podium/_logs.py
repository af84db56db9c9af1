"""The server's log lines, bounded: no request can make Podium write megabytes to its log.

Error messages are bounded where they are made (:func:`podium.errors.bounded`), but a log line
can also quote what a model's own exception says (its traceback's last line), and a model that
raises ``ValueError(f"bad input {value}")`` with a client's 20 MB value would write it out whole.
:class:`BoundedFormatter` is the last guard, for every logger of the process: a record's message
is cut at :data:`MAX_LOG_MESSAGE` characters, each line of a traceback at :data:`MAX_LOG_LINE`,
and a traceback keeps its first and last :data:`MAX_TRACEBACK` characters.
"""

from __future__ import annotations

import logging
from typing import Any

from .errors import bounded

__all__ = ["MAX_LOG_LINE", "MAX_LOG_MESSAGE", "MAX_TRACEBACK", "BoundedFormatter"]

#: The longest message of one record (characters): a ready line naming many models fits.
MAX_LOG_MESSAGE = 16 * 1024
#: The longest line of a traceback (characters).
MAX_LOG_LINE = 2 * 1024
#: A traceback longer than twice this keeps this many characters of its head and of its tail.
MAX_TRACEBACK = 16 * 1024


class BoundedFormatter(logging.Formatter):
    """A :class:`logging.Formatter` whose output is bounded (see the module's docstring)."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = bounded(record.message, MAX_LOG_MESSAGE)
        return super().formatMessage(record)

    def formatException(self, ei: Any) -> str:
        return bounded_traceback(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:
        return bounded_traceback(super().formatStack(stack_info))


def bounded_traceback(text: str) -> str:
    """``text`` (a formatted traceback) with each line :func:`bounded` to :data:`MAX_LOG_LINE`
    characters, and its middle left out past 2 × :data:`MAX_TRACEBACK`."""
    if len(text) <= MAX_LOG_LINE:
        return text
    text = "\n".join(bounded(line, MAX_LOG_LINE) for line in text.split("\n"))
    if len(text) > 2 * MAX_TRACEBACK:
        cut = len(text) - 2 * MAX_TRACEBACK
        text = f"{text[:MAX_TRACEBACK]}\n… ({cut} characters left out) …\n{text[-MAX_TRACEBACK:]}"
    return text
