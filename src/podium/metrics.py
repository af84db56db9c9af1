"""Metrics a model records itself, exported on Podium's ``/metrics`` with its labels.

::

    from podium import metrics

    class Model:
        def load(self):
            self.tokens = metrics.counter("tokens_generated_total", "Tokens generated")
            self.rows = metrics.histogram("input_rows", "Rows per request", buckets=(1, 10, 100))

        def predict(self, inputs):
            self.rows.observe(len(inputs))
            ...
            self.tokens.inc(len(outputs))

A metric belongs to the model version whose code creates it: create it while that version is
being imported (module level), constructed (``__init__``) or loaded (``load()``); use it anywhere
after (``predict``, threads of the model's own). Every series gets the labels ``model`` and
``version`` at ``/metrics``; ``labelnames`` adds the model's own (``.labels(kind="a").inc()``).
A metric created outside those moments records nothing (a warning says so once).

The same store holds what TorchServe handlers record through ``context.metrics`` and MLServer
runtimes through ``mlserver.register`` / ``mlserver.log`` (each adapter binds it).

Each model version has one :class:`MetricStore` (thread-safe: model code records from its own
threads). In a worker process the store also keeps what changed since it last reported
(:meth:`MetricStore.take`), which the worker sends to the server, where the version's store
:meth:`~MetricStore.apply` s it: counters and histograms add up across the lives of the
worker processes (a restarted worker does not reset them), a gauge holds the last value set.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from typing import Any

__all__ = [
    "DEFAULT_BUCKETS",
    "RESERVED_LABELS",
    "Counter",
    "Delta",
    "Family",
    "Gauge",
    "Histogram",
    "Kind",
    "MetricStore",
    "counter",
    "current_store",
    "gauge",
    "histogram",
    "recording_to",
]

logger = logging.getLogger("podium.metrics")

#: prometheus-client's default histogram buckets (seconds).
DEFAULT_BUCKETS: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
)

#: Labels Podium adds to every series of a model's metric; a model cannot name its own so.
RESERVED_LABELS = ("model", "version")

_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


class Kind(enum.Enum):
    """What a metric is, as Prometheus types it."""

    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


class Family:
    """One metric: its name, kind, help text, label names (the model's own), histogram buckets
    (upper bounds, ``+Inf`` last) and its series: label values → value (a float; for a
    histogram ``[count per bucket..., sum]``, the counts not cumulative)."""

    __slots__ = ("name", "kind", "documentation", "labelnames", "buckets", "series")

    def __init__(
        self,
        name: str,
        kind: Kind,
        documentation: str,
        labelnames: tuple[str, ...],
        buckets: tuple[float, ...] = (),
    ) -> None:
        self.name = name
        self.kind = kind
        self.documentation = documentation
        self.labelnames = labelnames
        self.buckets = buckets
        self.series: dict[tuple[str, ...], Any] = {}

    def spec(self) -> tuple[str, str, str, tuple[str, ...], tuple[float, ...]]:
        return (self.name, self.kind.value, self.documentation, self.labelnames, self.buckets)

    def zero(self) -> Any:
        return [0.0] * (len(self.buckets) + 1) if self.kind is Kind.HISTOGRAM else 0.0


#: What changed in one series since the last report: the family's spec, the label values, and
#: a counter's increase, a gauge's value, or a histogram's added ``[counts..., sum]``.
Delta = tuple[tuple[str, str, str, tuple[str, ...], tuple[float, ...]], tuple[str, ...], Any]


def _check_name(name: str, labelnames: Sequence[str], kind: Kind) -> tuple[str, ...]:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(
            f"metric name {name!r} is not a Prometheus name ([a-zA-Z_:][a-zA-Z0-9_:]*)"
        )
    if name.startswith("podium_"):
        raise ValueError(f"metric name {name!r}: names starting with 'podium_' are Podium's own")
    labels = tuple(labelnames)
    for label in labels:
        if not isinstance(label, str) or not _LABEL.match(label) or label.startswith("__"):
            raise ValueError(f"metric '{name}': label name {label!r} is not a Prometheus label")
        if label in RESERVED_LABELS:
            raise ValueError(
                f"metric '{name}': label '{label}' is Podium's own (every series carries "
                f"{' and '.join(RESERVED_LABELS)}); choose another name"
            )
        if kind is Kind.HISTOGRAM and label == "le":
            raise ValueError(f"metric '{name}': a histogram cannot have a label 'le'")
    if len(set(labels)) != len(labels):
        raise ValueError(f"metric '{name}' names a label twice: {labels}")
    return labels


def _check_buckets(name: str, buckets: Sequence[float]) -> tuple[float, ...]:
    bounds = [float(b) for b in buckets]
    if bounds and bounds[-1] == math.inf:
        bounds.pop()
    if not bounds or any(b >= c for b, c in zip(bounds, bounds[1:], strict=False)):
        raise ValueError(f"histogram '{name}': buckets must be increasing, got {tuple(buckets)}")
    return (*bounds, math.inf)


class MetricStore:
    """The metrics of one model version: families by name, and each one's series.

    Every method may be called from any thread (one lock). ``forward``: this store runs in a
    worker process, and also keeps what changed since :meth:`take` last ran; ``dirty`` is true
    while something did (read without the lock: a worker checks it before each answer).
    """

    def __init__(self, *, forward: bool = False) -> None:
        self._lock = threading.Lock()
        self.families: dict[str, Family] = {}
        self._forward = forward
        self._changed: dict[tuple[str, tuple[str, ...]], Any] = {}
        self.dirty = False

    def family(
        self,
        name: str,
        kind: Kind,
        documentation: str = "",
        labelnames: Sequence[str] = (),
        buckets: Sequence[float] = (),
    ) -> Family:
        """The family ``name``, made if new; ``ValueError`` if it exists with another kind or
        other labels. A family without labels has its one series from the start (at 0)."""
        labels = _check_name(name, labelnames, kind)
        bounds = _check_buckets(name, buckets or DEFAULT_BUCKETS) if kind is Kind.HISTOGRAM else ()
        with self._lock:
            found = self.families.get(name)
            if found is None:
                found = self.families[name] = Family(name, kind, documentation, labels, bounds)
                if not labels:
                    found.series[()] = found.zero()
                return found
        if found.kind is not kind or found.labelnames != labels:
            raise ValueError(
                f"metric '{name}' exists already as a {found.kind.value} with labels "
                f"{list(found.labelnames)}; asked for a {kind.value} with labels {list(labels)}"
            )
        if kind is Kind.HISTOGRAM and found.buckets != bounds:
            raise ValueError(f"histogram '{name}' exists already with buckets {found.buckets}")
        return found

    # -- recording ------------------------------------------------------------------------------

    def add(self, family: Family, labels: tuple[str, ...], amount: float) -> None:
        """A counter's increase, a gauge's increase (or decrease)."""
        with self._lock:
            series = family.series
            value = series[labels] = series.get(labels, 0.0) + amount
            if self._forward:
                key = (family.name, labels)
                if family.kind is Kind.GAUGE:
                    self._changed[key] = value
                else:
                    self._changed[key] = self._changed.get(key, 0.0) + amount
                self.dirty = True

    def set(self, family: Family, labels: tuple[str, ...], value: float) -> None:
        """A gauge's value."""
        with self._lock:
            family.series[labels] = value
            if self._forward:
                self._changed[(family.name, labels)] = value
                self.dirty = True

    def observe(self, family: Family, labels: tuple[str, ...], value: float) -> None:
        """One observation of a histogram."""
        index = 0
        buckets = family.buckets
        while value > buckets[index]:  # the last bound is +Inf
            index += 1
        with self._lock:
            counts = family.series.get(labels)
            if counts is None:
                counts = family.series[labels] = family.zero()
            counts[index] += 1
            counts[-1] += value
            if self._forward:
                key = (family.name, labels)
                changed = self._changed.get(key)
                if changed is None:
                    changed = self._changed[key] = family.zero()
                changed[index] += 1
                changed[-1] += value
                self.dirty = True

    # -- reporting ------------------------------------------------------------------------------

    def take(self) -> list[Delta]:
        """What changed since the last call (a worker process sends it to the server)."""
        with self._lock:
            changed, self._changed = self._changed, {}
            self.dirty = False
            families = self.families
            return [
                (families[name].spec(), labels, value) for (name, labels), value in changed.items()
            ]

    def apply(self, deltas: list[Delta]) -> None:
        """Add what a worker process reported (its families are made here if new; one that
        clashes with a family of this store is dropped, with a warning)."""
        for (name, kind, documentation, labelnames, buckets), labels, value in deltas:
            try:
                family = self.family(name, Kind(kind), documentation, labelnames, buckets)
            except ValueError as exc:
                logger.warning("a worker process reported a metric that clashes: %s", exc)
                continue
            if family.kind is Kind.GAUGE:
                self.set(family, labels, value)
            elif family.kind is Kind.COUNTER:
                self.add(family, labels, value)
            else:
                with self._lock:
                    counts = family.series.get(labels)
                    if counts is None:
                        counts = family.series[labels] = family.zero()
                    for i, added in enumerate(value):
                        counts[i] += added

    def collect(self) -> list[tuple[Family, list[tuple[tuple[str, ...], Any]]]]:
        """Every family and a copy of its series, taken under the lock (for ``/metrics``)."""
        with self._lock:
            return [
                (
                    family,
                    [
                        (labels, list(value) if isinstance(value, list) else value)
                        for labels, value in family.series.items()
                    ],
                )
                for family in self.families.values()
            ]


# -- the model's scope -------------------------------------------------------------------------

_store: ContextVar[MetricStore | None] = ContextVar("podium_metric_store", default=None)


def current_store() -> MetricStore | None:
    """The store of the model version whose code runs now (import, ``__init__``, ``load``),
    or None."""
    return _store.get()


@contextlib.contextmanager
def recording_to(store: MetricStore | None) -> Iterator[None]:
    """Metrics created inside belong to ``store`` (the loader wraps a model version's import,
    construction and load in it)."""
    token = _store.set(store)
    try:
        yield
    finally:
        _store.reset(token)


_warned: set[str] = set()


def _store_for(name: str) -> MetricStore | None:
    store = _store.get()
    if store is None and name not in _warned:
        _warned.add(name)
        logger.warning(
            "metric '%s' was created outside a model's import, __init__ or load(); it records "
            "nothing (create metrics there and keep them, e.g. on self)",
            name,
        )
    return store


# -- the handles a model uses ------------------------------------------------------------------


class _Metric:
    __slots__ = ("_store", "_family", "_labels")

    def __init__(self, store: MetricStore | None, family: Family | None, labels: tuple[str, ...]):
        self._store = store
        self._family = family
        self._labels = labels

    def labels(self, *values: Any, **named: Any) -> Any:
        """This metric with its label values given (by position or by name)."""
        family = self._family
        if family is None:
            return self
        names = family.labelnames
        if self._labels or not names:
            raise ValueError(f"metric '{family.name}' has no labels left to fill")
        if values and named:
            raise ValueError(f"metric '{family.name}': give label values by position or by name")
        if named:
            if set(named) != set(names):
                raise ValueError(f"metric '{family.name}' takes the labels {list(names)}")
            values = tuple(named[n] for n in names)
        if len(values) != len(names):
            raise ValueError(f"metric '{family.name}' takes {len(names)} label values")
        return type(self)(self._store, family, tuple(str(v) for v in values))

    def _record(self, record: Callable[..., None], value: float) -> None:
        """``value`` recorded for this series by ``record`` (a :class:`MetricStore` method);
        nothing when the metric was made outside a model's scope."""
        family = self._family
        if family is None or self._store is None:
            return
        if family.labelnames and not self._labels:
            raise ValueError(
                f"metric '{family.name}' has labels {list(family.labelnames)}: "
                "record through .labels(...)"
            )
        record(self._store, family, self._labels, float(value))


class Counter(_Metric):
    """A value that only goes up (``inc``)."""

    __slots__ = ()

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("a counter only goes up; use a gauge for values that go down")
        self._record(MetricStore.add, amount)


class Gauge(_Metric):
    """A value that goes up and down (``set``, ``inc``, ``dec``)."""

    __slots__ = ()

    def set(self, value: float) -> None:
        self._record(MetricStore.set, value)

    def inc(self, amount: float = 1.0) -> None:
        self._record(MetricStore.add, amount)

    def dec(self, amount: float = 1.0) -> None:
        self.inc(-amount)


class Histogram(_Metric):
    """Observations counted into buckets (``observe``; ``time()`` times a block)."""

    __slots__ = ()

    def observe(self, value: float) -> None:
        self._record(MetricStore.observe, value)

    @contextlib.contextmanager
    def time(self) -> Iterator[None]:
        """Observe how many seconds the block took."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.observe(time.perf_counter() - start)


def counter(name: str, documentation: str = "", labelnames: Sequence[str] = ()) -> Counter:
    """A counter of the model version whose code runs now (see the module's docstring)."""
    _check_name(name, labelnames, Kind.COUNTER)
    store = _store_for(name)
    family = None if store is None else store.family(name, Kind.COUNTER, documentation, labelnames)
    return Counter(store, family, ())


def gauge(name: str, documentation: str = "", labelnames: Sequence[str] = ()) -> Gauge:
    """A gauge of the model version whose code runs now."""
    _check_name(name, labelnames, Kind.GAUGE)
    store = _store_for(name)
    family = None if store is None else store.family(name, Kind.GAUGE, documentation, labelnames)
    return Gauge(store, family, ())


def histogram(
    name: str,
    documentation: str = "",
    labelnames: Sequence[str] = (),
    *,
    buckets: Sequence[float] = DEFAULT_BUCKETS,
) -> Histogram:
    """A histogram of the model version whose code runs now; ``buckets``: upper bounds."""
    _check_name(name, labelnames, Kind.HISTOGRAM)
    _check_buckets(name, buckets)
    store = _store_for(name)
    family = (
        None
        if store is None
        else store.family(name, Kind.HISTOGRAM, documentation, labelnames, buckets)
    )
    return Histogram(store, family, ())
