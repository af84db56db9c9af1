"""A model version's response cache (opt-in: the model setting ``response_cache``;
docs/scaling.md, "The response cache").

:class:`ResponseCache` keeps the answers of one model version by a key made of what can change
them (:func:`request_key`), least recently used first, bounded in bytes (and, when asked, in
entries), each entry living at most ``ttl_s`` when that is set. It belongs to the
:class:`~podium.runtime.ModelVersion` it serves, which empties it when the version is unloaded,
reloaded or removed, so no answer outlives the model that gave it.

**The key** is a 128-bit BLAKE2b digest of one MessagePack structure (it writes every string's
and list's length and every value's type, so no two different requests write the same bytes)
of: the model's name and version; each input's name, datatype, shape, parameters and data; each
requested output's name and parameters; and the request's parameters (dict keys sorted). Left
out, because they cannot change the answer at the point where it is kept (before a front end
encodes it): the request's ``id`` (a hit answers with the request's own), ``timeout`` and
``priority`` (how long and in what order it may wait), ``binary_data_output`` and each output's
``binary_data`` (how the REST front end writes the answer: JSON or binary tensors), and the
sequence parameters (a model with sequences is never cached). An input's data is keyed as it
arrived, under a tag: a list (JSON, gRPC typed contents) as MessagePack writes it, an array
(binary tensors, gRPC raw contents) by its dtype, shape and size in the structure and its bytes
hashed after it; so the same tensor sent as JSON and as binary data is two entries, never one
answer for two different tensors. A 128-bit digest makes a collision between any two of even
10^12 requests a chance below 10^-14 (the birthday bound, n² / 2^129): far below a hardware
fault's, so entries do not keep the full key.

**Size**: each entry counts its outputs' data as Python holds it (an array's ``nbytes``; a list
by its own size and its elements') plus :data:`ENTRY_OVERHEAD` bytes for the response, its
outputs and the entry's bookkeeping; an answer larger than the whole cache is not kept.

Everything here runs on the event loop's thread (the data plane's), so no lock is needed:
a lookup or a store never awaits, and the metrics read plain integers.
"""

from __future__ import annotations

import hashlib
import sys
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np

from ..config import ResponseCacheSettings
from ..types import InferenceRequest, InferenceResponse

__all__ = ["ENTRY_OVERHEAD", "IGNORED_PARAMETERS", "CacheStats", "ResponseCache", "request_key"]

#: Bytes counted for each entry besides its outputs' data: the response and output structs,
#: their dicts and lists, the key and the entry's place in the LRU order.
ENTRY_OVERHEAD = 512

#: Request parameters that do not change the answer as the cache keeps it (see the module).
IGNORED_PARAMETERS = frozenset(
    {"timeout", "priority", "binary_data_output", "sequence_id", "sequence_start", "sequence_end"}
)
#: An output's parameter that only says how the REST front end writes it.
_OUTPUT_ENCODING = frozenset({"binary_data"})

_encode = msgspec.msgpack.Encoder(order="sorted").encode


def _kept(params: dict[str, Any] | None, ignored: frozenset[str]) -> dict[str, Any] | None:
    if not params or ignored.isdisjoint(params):
        return params
    return {k: v for k, v in params.items() if k not in ignored} or None


def _data(data: Any, arrays: list[np.ndarray]) -> tuple[Any, ...]:
    """An input's data as the key's structure has it: a list (or any value) as it is; an array
    by its dtype, shape and size, its bytes hashed after the structure (no copy of them)."""
    if type(data) is np.ndarray:
        if data.dtype.hasobject:
            return ("l", data.tolist())
        arrays.append(data)
        return ("a", data.dtype.str, data.shape, data.nbytes)
    return ("l", data)


def request_key(
    name: str,
    version: str | None,
    request: InferenceRequest,
    headers: list[tuple[str, str]] | None = None,
) -> bytes | None:
    """The cache key of ``request`` to that model version (see the module's docstring); None
    when a part of it cannot be written (a value MessagePack cannot hold): not cached.
    ``headers``: the request's headers, sorted, for a model that reads them
    (``Capabilities.request_headers_only``: an MLServer runtime's ``parameters.headers``, which
    MLServer's own cache keys by as well); None for every other model.

    The parts are one MessagePack structure (its arrays and strings carry their lengths, so no
    two different requests write the same bytes), followed by the bytes of each array input in
    input order (their sizes are in the structure)."""
    arrays: list[np.ndarray] = []
    outputs = request.outputs
    try:
        structure = _encode(
            (
                name,
                version,
                [
                    (i.name, i.datatype, i.shape, i.parameters, _data(i.data, arrays))
                    for i in request.inputs
                ],
                None
                if outputs is None
                else [(o.name, _kept(o.parameters, _OUTPUT_ENCODING)) for o in outputs],
                _kept(request.parameters, IGNORED_PARAMETERS),
                headers,
            )
        )
    except (TypeError, ValueError, OverflowError):
        return None
    h = hashlib.blake2b(structure, digest_size=16)
    for array in arrays:
        h.update(np.ascontiguousarray(array).data)
    return h.digest()


def answer_size(response: InferenceResponse) -> int:
    """The bytes an answer holds, as :class:`ResponseCache` counts them."""
    size = ENTRY_OVERHEAD
    for out in response.outputs:
        size += _size_of(out.data)
    return size


def _size_of(data: Any) -> int:
    if data is None:
        return 0
    if type(data) is np.ndarray:
        return int(data.nbytes) + sys.getsizeof(np.empty(0))
    if isinstance(data, list):
        size = sys.getsizeof(data)
        if not data:
            return size
        first = data[0]
        if type(first) is float or type(first) is bool:  # one size for every element
            return size + len(data) * sys.getsizeof(first)
        return size + sum(
            _size_of(item) if type(item) is list else sys.getsizeof(item) for item in data
        )
    return sys.getsizeof(data)


class CacheStats:
    """What a version's cache counts (the statistics extension's ``cache_hit`` / ``cache_miss``
    and the ``podium_response_cache_*`` metrics): hits and the nanoseconds spent looking them
    up and copying them out; misses and the nanoseconds spent looking up and storing (Triton's
    definitions); entries evicted (for room or by TTL); entries and bytes held now."""

    __slots__ = ("hits", "hit_ns", "misses", "miss_ns", "evictions", "expired", "entries", "bytes")

    def __init__(self) -> None:
        self.hits = self.hit_ns = self.misses = self.miss_ns = 0
        self.evictions = self.expired = self.entries = self.bytes = 0


class ResponseCache:
    """One model version's answers by key, LRU, bounded by ``settings`` (bytes, entries, age).

    ``clock``: seconds, monotonic (tests pass their own). Values are ``(response, headers)``
    pairs as the data plane made them; they are never changed once stored (a hit answers a
    copy with the request's id)."""

    def __init__(
        self, settings: ResponseCacheSettings, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.max_bytes = settings.max_bytes
        self.max_entries = settings.max_entries
        self.ttl = settings.ttl_s
        self._clock = clock
        # key → (response, headers, size, expires at: 0.0 never)
        self._entries: OrderedDict[bytes, tuple[Any, Any, int, float]] = OrderedDict()
        self.stats = CacheStats()
        #: How many times it was emptied: an answer computed before that (a call in flight
        #: while its version was unloaded or reloaded) is not stored after it.
        self.generation = 0

    def get(self, key: bytes) -> tuple[Any, Any] | None:
        """The stored ``(response, headers)`` for ``key`` (now the most recently used), or None;
        an expired one is dropped."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry[3] and self._clock() >= entry[3]:
            self._drop(key, entry)
            self.stats.expired += 1
            return None
        self._entries.move_to_end(key)
        return entry[0], entry[1]

    def put(
        self, key: bytes, response: Any, headers: Any, size: int, generation: int | None = None
    ) -> bool:
        """Keep ``response`` (with ``headers``) under ``key``, counted as ``size`` bytes; least
        recently used entries go to make room. False (nothing kept) when it is larger than the
        whole cache, or when ``generation`` (the one its lookup saw) is past."""
        if size > self.max_bytes or (generation is not None and generation != self.generation):
            return False
        old = self._entries.pop(key, None)
        stats = self.stats
        if old is not None:
            stats.bytes -= old[2]
            stats.entries -= 1
        expires = self._clock() + self.ttl if self.ttl else 0.0
        self._entries[key] = (response, headers, size, expires)
        stats.bytes += size
        stats.entries += 1
        entries = self._entries
        while stats.bytes > self.max_bytes or (
            self.max_entries and stats.entries > self.max_entries
        ):
            oldest, entry = next(iter(entries.items()))
            self._drop(oldest, entry)
            stats.evictions += 1
        return True

    def _drop(self, key: bytes, entry: tuple[Any, Any, int, float]) -> None:
        del self._entries[key]
        self.stats.bytes -= entry[2]
        self.stats.entries -= 1

    def clear(self) -> None:
        """Forget every answer (the version was unloaded, reloaded or removed); the counts of
        hits and misses stay."""
        self._entries.clear()
        self.stats.entries = self.stats.bytes = 0
        self.generation += 1
