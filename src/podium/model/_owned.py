"""What Podium makes on disk for a model version, and who holds it.

Extracting a TorchServe archive or downloading a model file leaves something on disk that only
Podium knows to delete. Each model version that uses it holds an :class:`Owned` (a
:class:`Hold` on a :class:`Shared` thing); when a version is removed it releases its holds, and
the thing is deleted once the last hold on it is released. A hold that reaches another process
(a :class:`~podium.model.ModelSource` pickled into a worker process) holds nothing there: only
the process that made a thing deletes it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any, Protocol

__all__ = ["Hold", "Owned", "Shared", "release_all"]

logger = logging.getLogger("podium.model")


class Owned(Protocol):
    """One owner's hold on something Podium made on disk; :meth:`release` lets go of it."""

    def release(self) -> None:
        """Let go (once; later calls do nothing). Deletes the thing if nothing else holds it:
        blocking, so call it off the event loop."""
        ...


class Hold:
    """One hold on a :class:`Shared` thing (see :class:`Owned`)."""

    __slots__ = ("_drop",)

    def __init__(self, drop: Callable[[], None] | None) -> None:
        self._drop = drop

    def release(self) -> None:
        drop, self._drop = self._drop, None
        if drop is not None:
            drop()

    def __reduce__(self) -> tuple[Any, ...]:
        return (Hold, (None,))  # in another process: a hold on nothing


class Shared:
    """Something on disk that owners hold; ``remove`` runs (once) when the last hold on it is
    released. Thread-safe. ``remove`` should not raise: an ``OSError`` is logged."""

    def __init__(self, remove: Callable[[], None], what: str) -> None:
        self._remove = remove
        self._what = what
        self._lock = threading.Lock()
        self._holds = 0
        self._removed = False

    def hold(self) -> Hold | None:
        """A new hold; None once the thing is removed (or being removed): make it again."""
        holds = self.holds(1)
        return holds[0] if holds else None

    def holds(self, count: int) -> list[Hold]:
        """``count`` new holds; none once the thing is removed (or being removed)."""
        with self._lock:
            if self._removed:
                return []
            self._holds += count
        return [Hold(self._drop) for _ in range(count)]

    def _drop(self) -> None:
        with self._lock:
            self._holds -= 1
            if self._holds > 0 or self._removed:
                return
            self._removed = True
        try:
            self._remove()
        except OSError as exc:
            logger.warning("cannot remove %s: %s", self._what, exc)
        else:
            logger.info("removed %s: no model version uses it any more", self._what)


def release_all(owned: Iterable[Owned]) -> None:
    """Release every hold in ``owned`` (blocking: see :meth:`Owned.release`)."""
    for hold in owned:
        hold.release()
