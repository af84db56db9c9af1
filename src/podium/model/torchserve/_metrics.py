"""TorchServe's ``context.metrics``: what a handler records lands in Podium's ``/metrics``.

The methods of TorchServe's metrics cache (``ts.metrics.metric_cache_abstract``): ``add_metric``,
``add_counter``, ``add_time``, ``add_size``, ``add_percent``, ``add_error``, ``get_metric``,
``add_metric_to_cache``, and the metric objects' ``add_or_update`` / ``update``. TorchServe
prints each value to its log for its frontend to export; Podium records it in the model
version's :class:`podium.metrics.MetricStore`: a COUNTER adds, a GAUGE is set, a HISTOGRAM
observes. Each metric keeps its name (``HandlerTime``); its labels are its dimensions (the
handler's, then TorchServe's ``ModelName`` and ``Level``, as TorchServe adds them), and
Podium's ``model`` and ``version``. The unit is not part of the name (TorchServe's log line
carries it beside the name; see docs/metrics.md).
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterable
from typing import Any

from ...metrics import Kind, MetricStore
from ._metrics_yaml import DeclaredMetric

__all__ = [
    "Dimension",
    "MetricTypes",
    "TorchServeMetric",
    "TorchServeMetrics",
    "log_line",
    "ts_help",
]

logger = logging.getLogger("podium.model.torchserve")
#: TorchServe's two metric logs (``metrics_mode=log``): its frontend's (``ts_metrics.log``) and
#: its handlers' (``model_metrics.log``), as loggers of their own.
TS_METRICS_LOG = logging.getLogger("podium.torchserve.ts_metrics")
MODEL_METRICS_LOG = logging.getLogger("podium.torchserve.model_metrics")


def ts_help(kind: Kind, unit: str) -> str:
    """TorchServe's help text of a metric on its /metrics (how Podium's /metrics knows a
    metric written as TorchServe writes it: a counter keeps its name, no ``_total`` added)."""
    return f"Torchserve prometheus {kind.value} metric with unit: {unit}"


def log_line(
    name: str,
    unit: str,
    value: float,
    dimensions: Iterable[tuple[str, str]],
    request_id: str = "",
    *,
    model: bool,
    hostname: str | None = None,
) -> None:
    """One metric value as TorchServe's frontend logs it: ``Name.Unit:value|#Dim:v,...|#hostname:
    HOST[,requestID:ID],timestamp:SECONDS`` (a handler's metric, ``model``, to
    ``podium.torchserve.model_metrics`` with its request id; a frontend metric to
    ``podium.torchserve.ts_metrics``)."""
    target = MODEL_METRICS_LOG if model else TS_METRICS_LOG
    if not target.isEnabledFor(logging.INFO):
        return
    dims = ",".join(f"{k}:{v}" for k, v in dimensions)
    host = hostname or socket.gethostname()
    request = f",requestID:{request_id}" if model else ""
    target.info(
        "%s.%s:%s|#%s|#hostname:%s%s,timestamp:%d",
        name, unit, float(value), dims, host, request, int(time.time()),
    )  # fmt: skip


#: TorchServe's ``ts.metrics.metric_type_enum.MetricTypes``: the same members with the same
#: values as Podium's own kinds of metric, which it is.
MetricTypes = Kind


class Dimension:
    """TorchServe's ``ts.metrics.dimension.Dimension``: a label's name and value."""

    def __init__(self, name: str, value: str) -> None:
        self.name = name
        self.value = value

    def __str__(self) -> str:
        return f"{self.name}:{self.value}"

    def to_dict(self) -> dict[str, str]:
        return {"Name": self.name, "Value": self.value}


def _kind(metric_type: Any) -> Kind:
    """TorchServe's metric type (Podium's MetricTypes, the real ``ts``'s, or its value)."""
    value = getattr(metric_type, "value", metric_type)
    try:
        return Kind(str(value).lower())
    except ValueError:
        raise ValueError(
            f"metric type {metric_type!r} is not counter, gauge or histogram"
        ) from None


#: How each kind records a value: a counter adds, a gauge is set, a histogram observes.
_RECORD = {
    Kind.COUNTER: MetricStore.add,
    Kind.GAUGE: MetricStore.set,
    Kind.HISTOGRAM: MetricStore.observe,
}


class TorchServeMetric:
    """One metric of a handler (what ``get_metric`` / ``add_metric_to_cache`` return)."""

    def __init__(
        self,
        store: MetricStore | None,
        name: str,
        unit: str,
        dimension_names: list[str],
        kind: Kind,
        *,
        mode: str = "off",
    ) -> None:
        self.metric_name = name
        self._log = mode == "log"
        self.unit = unit
        self.dimension_names = list(dimension_names)
        self.metric_type = kind
        self._store = store
        self._kind = kind
        labels = list(dimension_names)
        documentation = f"{name} ({unit})"
        # --ts-metrics prometheus: as TorchServe's frontend exports a handler's metric, with its
        # Hostname label and its help text (which tells /metrics to keep the name as it is)
        self._host: tuple[str, ...] = ()
        if mode == "prometheus":
            documentation = ts_help(kind, unit)
            if "Hostname" not in labels:
                labels.append("Hostname")
                self._host = (socket.gethostname(),)
        self._family = None if store is None else store.family(name, kind, documentation, labels)

    def add_or_update(
        self, value: float, dimension_values: list[str] | None = None, request_id: str = ""
    ) -> None:
        """Record ``value`` with these dimension values (as many as the dimension names)."""
        values = list(dimension_values or [])
        if len(values) != len(self.dimension_names):
            logger.error(
                "metric '%s': dimension values %s should correspond to dimension names %s",
                self.metric_name,
                values,
                self.dimension_names,
            )
            return
        if self._kind is Kind.COUNTER and value < 0:
            logger.error("metric '%s': a counter cannot be decreased", self.metric_name)
            return
        store, family = self._store, self._family
        if store is None or family is None:
            return
        labels = (*(str(v) for v in values), *self._host)
        if self._log:
            log_line(self.metric_name, self.unit, value, zip(self.dimension_names, labels, strict=False),
                     request_id, model=True)  # fmt: skip
        _RECORD[self._kind](store, family, labels, float(value))

    def update(
        self, value: float, request_id: str = "", dimensions: list[Any] | None = None
    ) -> None:
        """TorchServe's older form: the dimensions as ``Dimension`` objects."""
        dimensions = dimensions or []
        names = [d.name for d in dimensions]
        if names != self.dimension_names:
            logger.error(
                "metric '%s': dimensions %s differ from its dimension names %s",
                self.metric_name,
                names,
                self.dimension_names,
            )
            return
        self.add_or_update(value, [d.value for d in dimensions], request_id)


class TorchServeMetrics:
    """``context.metrics`` of a TorchServe handler, recording to one model version's store
    (None: nowhere). ``declared``: the ``model_metrics`` of the server's ``metrics.yaml``
    (TorchServe's default one unless ``metrics_config`` names another), in the cache from the
    start as TorchServe's backend puts them there, so ``get_metric`` finds them before any
    ``add_*``. ``mode`` (``--ts-metrics``): ``prometheus`` labels each series with TorchServe's
    ``Hostname`` too and gives it TorchServe's help text; ``log`` also writes each value as
    TorchServe's ``model_metrics.log`` line."""

    def __init__(
        self,
        store: MetricStore | None,
        model_name: str,
        declared: Iterable[DeclaredMetric] = (),
        *,
        mode: str = "off",
    ) -> None:
        self._store = store
        self.model_name = model_name
        self.request_ids: Any = None
        self._mode = mode
        self._cache: dict[tuple[str, str], TorchServeMetric] = {}
        for spec in declared:
            try:
                self.add_metric_to_cache(spec.name, spec.unit, list(spec.dimensions), spec.kind)
            except ValueError as exc:  # not a Prometheus name: the handler's add_* will say so
                logger.error("model '%s': declared metric not kept: %s", model_name, exc)

    def set_request_ids(self, request_ids: Any) -> None:
        self.request_ids = request_ids

    def _dimensions(self, dimensions: list[Any] | None) -> list[Any]:
        found = list(dimensions or [])
        names = {d.name for d in found}
        if "ModelName" not in names:
            found.append(Dimension("ModelName", self.model_name))
        if "Level" not in names:
            found.append(Dimension("Level", "Model"))
        return found

    def _record(
        self,
        name: str,
        value: float,
        unit: str,
        dimensions: list[Any] | None,
        metric_type: Any,
    ) -> None:
        dims = self._dimensions(dimensions)
        try:
            metric = self._get_or_add(name, unit, [d.name for d in dims], _kind(metric_type))
        except ValueError as exc:
            logger.error("model '%s': metric '%s' not recorded: %s", self.model_name, name, exc)
            return
        metric.add_or_update(value, [d.value for d in dims])

    def _get_or_add(self, name: str, unit: str, names: list[str], kind: Kind) -> TorchServeMetric:
        found = self._cache.get((name, kind.value))
        if found is None or found.dimension_names != names:
            found = self.add_metric_to_cache(name, unit, names, kind)
        return found

    def add_metric(
        self,
        name: str,
        value: float,
        unit: str,
        idx: Any = None,
        dimensions: list[Any] | None = None,
        metric_type: Any = MetricTypes.COUNTER,
    ) -> None:
        self._record(name, value, unit, dimensions, metric_type)

    def add_counter(
        self, name: str, value: float, idx: Any = None, dimensions: list[Any] | None = None
    ) -> None:
        self._record(name, value, "count", dimensions, MetricTypes.COUNTER)

    def add_time(
        self,
        name: str,
        value: float,
        idx: Any = None,
        unit: str = "ms",
        dimensions: list[Any] | None = None,
        metric_type: Any = MetricTypes.GAUGE,
    ) -> None:
        if unit not in ("ms", "s"):
            raise ValueError("the unit for a timed metric should be one of ['ms', 's']")
        self._record(name, value, unit, dimensions, metric_type)

    def add_size(
        self,
        name: str,
        value: float,
        idx: Any = None,
        unit: str = "MB",
        dimensions: list[Any] | None = None,
        metric_type: Any = MetricTypes.GAUGE,
    ) -> None:
        if unit not in ("MB", "kB", "GB", "B"):
            raise ValueError("The unit for size based metric is one of ['MB','kB', 'GB', 'B']")
        self._record(name, value, unit, dimensions, metric_type)

    def add_percent(
        self,
        name: str,
        value: float,
        idx: Any = None,
        dimensions: list[Any] | None = None,
        metric_type: Any = MetricTypes.GAUGE,
    ) -> None:
        self._record(name, value, "percent", dimensions, metric_type)

    def add_error(self, name: str, value: float, dimensions: list[Any] | None = None) -> None:
        self._record(name, value, "", dimensions, MetricTypes.COUNTER)

    def get_metric(
        self, metric_name: str, metric_type: Any = MetricTypes.COUNTER
    ) -> TorchServeMetric:
        """A metric added before (``add_metric_to_cache`` or one of the ``add_*``); ``KeyError``
        (TorchServe's ``MetricsCacheKeyError`` is one) if there is none."""
        found = self._cache.get((metric_name, _kind(metric_type).value))
        if found is None:
            raise KeyError(f"Metric key {metric_name} does not exist.")
        return found

    def add_metric_to_cache(
        self,
        metric_name: str,
        unit: str,
        dimension_names: list[str] | None = None,
        metric_type: Any = MetricTypes.COUNTER,
    ) -> TorchServeMetric:
        """A metric with these dimension names (record with its ``add_or_update``)."""
        names = list(dimension_names or [])
        kind = _kind(metric_type)
        metric = TorchServeMetric(self._store, metric_name, unit, names, kind, mode=self._mode)
        self._cache[(metric_name, kind.value)] = metric
        return metric
