"""A truss's ``environment_variables``, for its own code only.

Truss runs one model per server and sets them for the whole process. Podium serves several
models in one process, so a truss's variables must not reach the others: ``os.environ`` is
replaced, once, by a subclass of its own class over the same data, which first looks in the
variables of the model whose code is running (a context variable, set around every call into
a truss's code and copied into the threads that run it). Writes and everything else go to the
real environment, as before. Code that reads the C library's ``getenv`` directly does not see
them; a model that needs that runs in process workers (``workers: process`` in ``podium.yaml``), whose
process has them set for real.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import Any

__all__ = ["install", "overlay", "using"]

#: The variables of the truss whose code runs in this context (None: no truss's).
overlay: ContextVar[Mapping[str, str] | None] = ContextVar("podium_truss_environ", default=None)

_lock = threading.Lock()


class _Environ(os._Environ):
    """``os.environ``, with the running truss's variables in front."""

    def __getitem__(self, key: str) -> str:
        extra = overlay.get()
        if extra is not None and key in extra:
            return extra[key]
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        extra = overlay.get()
        if extra is not None and key in extra:
            return True
        return super().__contains__(key)

    def __iter__(self) -> Iterator[str]:
        extra = overlay.get()
        if not extra:
            yield from super().__iter__()
            return
        yield from extra
        for key in super().__iter__():
            if key not in extra:
                yield key

    def __len__(self) -> int:
        extra = overlay.get()
        if not extra:
            return super().__len__()
        return sum(1 for _ in self)

    def copy(self) -> dict[str, str]:
        return dict(self)


def install() -> None:
    """Put the overlay in place of ``os.environ`` (once; the same data, so nothing is lost)."""
    with _lock:
        current: Any = os.environ
        if isinstance(current, _Environ):
            return
        replacement = _Environ(
            current._data,
            current.encodekey,
            current.decodekey,
            current.encodevalue,
            current.decodevalue,
        )
        os.environ = replacement  # noqa: B003 (the same data, read through the overlay)


@contextlib.contextmanager
def using(variables: Mapping[str, str]) -> Iterator[None]:
    """Run the block with ``variables`` in front of the environment (nothing when empty)."""
    if not variables:
        yield
        return
    token = overlay.set(variables)
    try:
        yield
    finally:
        overlay.reset(token)
