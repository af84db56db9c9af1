"""The one table of a model's settings: each field's key, kind, default, bounds and unit, and how
each model format spells it. Re-exported by :mod:`podium.config`.

Three validators are driven by :data:`FIELDS`, each adding only what its format does beyond it:

- ``ModelConfig.from_mapping`` (``config.yaml``): every field by its ``key``, with
  :meth:`Field.check`; then the rules between fields (``max_workers`` follows ``min_workers``).
- ``model.torchserve._config.model_config`` (TorchServe's ``model-config.yaml``): the ``torchserve``
  column (TorchServe's units are Podium's); TorchServe's own type check, then ``from_mapping``.
- ``model.mlserver._settings.read_settings`` (MLServer's ``model-settings.json``): the ``mlserver``
  column, a :class:`Spelling` with MLServer's own check, default, unit (converted) and
  conversion, then ``from_mapping``; and MLServer's rule that batching needs both
  ``max_batch_size`` and ``max_batch_time``.

A ``podium:`` section in either format takes the ``key`` of any field that format does not spell
itself (less the few that mean nothing there: each validator names them). Checks raise ``ValueError`` with a message that names the key; the validators prefix the
file and gather every problem into one ``DefinitionError``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePath
from types import MappingProxyType
from typing import Any

__all__ = ["FIELDS", "UNSET", "Field", "Kind", "ResponseCacheSettings", "Spelling", "Unit"]


class _Unset(enum.Enum):
    UNSET = enum.auto()

    def __repr__(self) -> str:
        return "UNSET"


#: "Not given": a key that is absent, or a conversion that sets nothing.
UNSET = _Unset.UNSET


class Kind(enum.Enum):
    """What a value must be, and what it becomes."""

    NAME = "name"  # a non-empty string without '/'
    VERSION = "version"  # a non-empty string or integer without '/', as a string; null: none
    LABEL = "label"  # a string or an integer, as a string (MLServer's version)
    TEXT = "text"  # a non-empty string
    INTEGER = "integer"  # an integer >= minimum
    NUMBER = "number"  # a number >= minimum, in the field's unit, as a float
    FLAG = "flag"  # true or false
    CHOICE = "choice"  # one of the field's choices
    MAPPING = "mapping"  # a mapping; null: the default
    STRING = "string"  # a string, possibly empty
    PATH = "path"  # a non-empty string or path, as a Path
    LIST = "list"  # a list of strings (one string: a list of it), as a tuple
    DEVICES = "devices"  # "auto", "cpu", "gpu", or GPU numbers (a list, or one), as a tuple
    CACHE = "cache"  # true, false / null, or a mapping of bounds: a ResponseCacheSettings or UNSET


class Unit(enum.Enum):
    """A unit of time; the value is its length in milliseconds."""

    MILLISECONDS = 1
    SECONDS = 1000
    MINUTES = 60_000

    @property
    def words(self) -> str:
        return self.name.lower()

    def to(self, other: Unit) -> float:
        """The factor that turns a value in this unit into one in ``other``."""
        return self.value / other.value


def check(
    kind: Kind,
    key: str,
    value: Any,
    *,
    minimum: float = 0,
    above: bool = False,
    below: float | None = None,
    unit: Unit | None = None,
    choices: tuple[str, ...] = (),
    name: str | None = None,
) -> Any:
    """``value`` as a field of ``kind`` holds it (``UNSET``: a null that means "none given");
    ``ValueError`` naming ``key`` and the rule otherwise. A number or an integer is at least
    ``minimum`` (more than it when ``above``) and less than ``below``. Messages name the value
    as ``name`` (default: ``key`` in quotes, as a config file's key)."""
    name = f"'{key}'" if name is None else name
    match kind:
        case Kind.INTEGER:
            if (
                isinstance(value, bool)
                or not isinstance(value, int)
                or not _within(value, minimum, above, below)
            ):
                what = f"{minimum}-{below - 1}" if below is not None else f">= {minimum}"
                raise ValueError(f"{name} must be an integer {what}, got {value!r}")
        case Kind.NUMBER:
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not _within(value, minimum, above, below)
            ):
                what = f"a number of {unit.words}" if unit else "a number"
                bound = f"{'>' if above else '>='} {_short(minimum)}"
                if below is not None:
                    bound += f" (and < {_short(below)})"
                raise ValueError(f"{name} must be {what} {bound}, got {value!r}")
            return float(value)
        case Kind.FLAG:
            if not isinstance(value, bool):
                raise ValueError(f"{name} must be true or false, got {value!r}")
        case Kind.CHOICE:
            if value not in choices:
                *most, last = (repr(choice) for choice in choices)
                raise ValueError(f"{name} must be {', '.join(most)} or {last}, got {value!r}")
        case Kind.NAME:
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{name} must be a non-empty string, got {value!r}")
            if "/" in value:
                raise ValueError(f"{name} must not contain '/', got {value!r}")
        case Kind.VERSION:
            if value is None:
                return UNSET
            if (
                isinstance(value, bool)
                or not isinstance(value, str | int)
                or "/" in str(value)
                or not str(value).strip()  # "" would read as "no version" in every route
            ):
                raise ValueError(
                    f"{name} must be a non-empty string or an integer, without '/', got {value!r}"
                )
            return str(value)
        case Kind.LABEL:
            if isinstance(value, bool) or not isinstance(value, str | int):
                raise ValueError(f"{name} must be a string or an integer, got {value!r}")
            return str(value)
        case Kind.TEXT:
            if not isinstance(value, str) or not value:
                raise ValueError(f"{name} must be a non-empty string")
        case Kind.STRING:
            if not isinstance(value, str):
                raise ValueError(f"{name} must be a string, got {value!r}")
        case Kind.PATH:
            if not isinstance(value, str | PurePath) or not str(value):
                raise ValueError(f"{name} must be a path, got {value!r}")
            return Path(value)
        case Kind.LIST:
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
                raise ValueError(f"{name} must be a list of strings, got {value!r}")
            return tuple(value)
        case Kind.MAPPING:
            if value is None:
                return UNSET
            if not isinstance(value, dict):
                raise ValueError(f"{name} must be a mapping")
        case Kind.DEVICES:
            return _devices(name, value)
        case Kind.CACHE:
            return _response_cache(name, value)
    return value


#: The most GPU numbers a model's ``devices`` may list.
MAX_DEVICES = 256


def _devices(name: str, value: Any) -> Any:
    """``devices``: ``auto`` (every GPU, else the CPU), ``cpu``, ``gpu`` (every GPU, none: an
    error), or GPU numbers as NVML numbers them (a list, one number, or ``"0,1"``)."""
    if isinstance(value, str) and value.strip().lower() in ("auto", "cpu", "gpu", "cuda"):
        word = value.strip().lower()
        return "gpu" if word == "cuda" else word
    numbers = value
    if isinstance(value, str):
        numbers = [p.strip() for p in value.split(",")]
        numbers = [int(p) if p.isdigit() else p for p in numbers]
    elif isinstance(value, int) and not isinstance(value, bool):
        numbers = [value]
    if (
        not isinstance(numbers, list | tuple)
        or not numbers
        or len(numbers) > MAX_DEVICES
        or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in numbers)
    ):
        shown = repr(value)
        shown = shown if len(shown) <= 80 else f"{shown[:80]}..."
        raise ValueError(
            f"{name} must be 'auto', 'cpu', 'gpu' or a list of GPU numbers (at most "
            f"{MAX_DEVICES}), got {shown}"
        )
    if len(set(numbers)) != len(numbers):
        raise ValueError(f"{name} lists a GPU twice: {list(numbers)}")
    return tuple(numbers)


@dataclass(frozen=True, slots=True)
class ResponseCacheSettings:
    """A model's ``response_cache`` (docs/scaling.md, "The response cache"): at most
    ``max_bytes`` of answers (their tensors' bytes and a fixed overhead each), at most
    ``max_entries`` answers (0: no such bound; MLServer's cache counts entries), each kept at
    most ``ttl_s`` seconds (0: until evicted or the version is unloaded)."""

    max_bytes: int = 64 * 1024 * 1024
    max_entries: int = 0
    ttl_s: float = 0.0


_CACHE_BOUNDS = {"max_bytes": (Kind.INTEGER, 1), "max_entries": (Kind.INTEGER, 0)}


def _response_cache(name: str, value: Any) -> Any:
    """``response_cache``: ``true`` (the defaults), ``false`` or null (none), or a mapping of
    ``max_bytes`` (>= 1), ``max_entries`` (>= 0) and ``ttl_s`` (seconds >= 0)."""
    if value is None or value is False:
        return UNSET
    if value is True:
        return ResponseCacheSettings()
    if not isinstance(value, dict):
        raise ValueError(
            f"{name} must be true, false or a mapping of max_bytes, max_entries and ttl_s"
        )
    unknown = sorted(str(key) for key in value if key not in (*_CACHE_BOUNDS, "ttl_s"))
    if unknown:
        raise ValueError(
            f"{name} has unknown key(s) {', '.join(unknown)} (allowed: max_bytes, max_entries, "
            "ttl_s)"
        )
    bounds: dict[str, Any] = {}
    inner = name.strip("'")
    for key, (kind, minimum) in _CACHE_BOUNDS.items():
        if value.get(key) is not None:
            bounds[key] = check(kind, key, value[key], minimum=minimum, name=f"'{inner}.{key}'")
    if value.get("ttl_s") is not None:
        bounds["ttl_s"] = check(
            Kind.NUMBER, "ttl_s", value["ttl_s"], unit=Unit.SECONDS, name=f"'{inner}.ttl_s'"
        )
    return ResponseCacheSettings(**bounds)


def _short(number: float) -> str:
    return f"{number:g}".replace("e+0", "e")


def _within(value: float, minimum: float, above: bool, below: float | None) -> bool:
    # Written so that NaN is outside every range.
    low = value > minimum if above else value >= minimum
    return low and (below is None or value < below)


@dataclass(frozen=True, slots=True)
class Spelling:
    """How MLServer's ``model-settings.json`` gives a field, where that differs from Podium's.

    ``key`` is MLServer's (``parameters.version``: within ``parameters``; ``None``: MLServer has
    no key, only a different ``default``). The value is checked as ``kind`` (``None``: passed on
    for the field's own check) against ``minimum``, converted from ``unit`` to the field's, then
    by ``convert`` (which may answer ``UNSET``: nothing set). A ``default`` stands for an absent
    key, and for a value that fails its check; ``optional``: a null is as if absent.
    """

    key: str | None
    kind: Kind | None = None
    minimum: int = 0
    unit: Unit | None = None
    default: Any = UNSET
    optional: bool = False
    convert: Callable[[Any], Any] | None = None

    def check(self, value: Any) -> Any:
        """MLServer's ``value`` if it passes ``kind``'s check; ``ValueError`` naming the key."""
        if self.kind is None:
            return value
        return check(self.kind, str(self.key), value, minimum=self.minimum, unit=self.unit)

    def to_field(self, value: Any, unit: Unit | None) -> Any:
        """A checked ``value`` (or the default) as the field's, in its ``unit`` (``UNSET``: none)."""
        if self.unit is not None and unit is not None:
            value = value * self.unit.to(unit)
        return value if self.convert is None else self.convert(value)


@dataclass(frozen=True, slots=True)
class Field:
    """One ``ModelConfig`` field: its ``config.yaml`` key, ``ModelConfig`` attribute (``attr``,
    the key unless given), kind, default, lower bound, unit and choices, and how TorchServe's
    ``model-config.yaml`` (``torchserve``: its key, same unit) and MLServer's
    ``model-settings.json`` (``mlserver``) give it."""

    key: str
    kind: Kind
    default: Any
    minimum: int = 0
    unit: Unit | None = None
    choices: tuple[str, ...] = ()
    torchserve: str | None = None
    mlserver: Spelling | None = None
    attr: str = ""

    def __post_init__(self) -> None:
        if not self.attr:
            object.__setattr__(self, "attr", self.key)
        if self.kind is Kind.NUMBER and self.unit is None:
            raise ValueError(f"field '{self.key}': a number needs its unit")
        if self.mlserver is not None and self.mlserver.unit is not None and self.unit is None:
            raise ValueError(f"field '{self.key}': MLServer's unit has nothing to convert to")

    def check(self, value: Any) -> Any:
        """``value`` as this field holds it (``UNSET``: none given); ``ValueError`` naming the key."""
        return check(
            self.kind,
            self.key,
            value,
            minimum=self.minimum,
            unit=self.unit,
            choices=self.choices,
        )


def _workers_kind(count: int) -> str:
    return "process" if count else "thread"


def _workers_count(count: int) -> Any:
    return count or UNSET  # 0: thread workers, Podium's default count


def _parallel_workers(convert: Callable[[Any], Any]) -> Spelling:
    """MLServer's ``parallel_workers``: N worker processes (min = max = N); 0: the server's."""
    return Spelling("parallel_workers", Kind.INTEGER, optional=True, convert=convert)


_MS, _S = Unit.MILLISECONDS, Unit.SECONDS

# Validation order is this order; problems between fields come after.
_TABLE = (
    # name: default the model's folder (or archive) name, given by the caller
    Field("name", Kind.NAME, None, mlserver=Spelling("name")),
    Field(
        "version",
        Kind.VERSION,
        None,
        mlserver=Spelling("parameters.version", Kind.LABEL, optional=True),
    ),
    Field("model_class_name", Kind.TEXT, "Model"),
    # MLServer awaits every request's predict at once; Podium bounds it, generously by default.
    Field("predict_concurrency", Kind.INTEGER, 1, minimum=1, mlserver=Spelling(None, default=64)),
    Field(
        "batch_size",
        Kind.INTEGER,
        1,
        minimum=1,
        torchserve="batchSize",
        mlserver=Spelling("max_batch_size", Kind.INTEGER, default=0),
    ),
    Field(
        "max_batch_delay",
        Kind.NUMBER,
        5.0,
        unit=_MS,
        torchserve="maxBatchDelay",
        mlserver=Spelling("max_batch_time", Kind.NUMBER, unit=_S, default=0),
        attr="max_batch_delay_ms",
    ),
    Field("max_queue_size", Kind.INTEGER, 1000, minimum=1, torchserve="jobQueueSize"),
    # the longest a request waits in the queue before it is refused (503 / UNAVAILABLE, with
    # Retry-After) without reaching the model; 0: no limit. Triton's
    # dynamic_batching.default_queue_policy.default_timeout_microseconds (in ms here); neither
    # TorchServe nor MLServer has one. A request's own timeout can only shorten it.
    Field("max_queue_delay", Kind.NUMBER, 0.0, unit=_MS, attr="max_queue_delay_ms"),
    # priority levels of the queue (1: the highest; a request's priority 0 or none: the
    # default); Triton's dynamic_batching.priority_levels / default_priority_level
    Field("priority_levels", Kind.INTEGER, 1, minimum=1),
    Field("default_priority", Kind.INTEGER, 1, minimum=1),
    # a waiter rises one level for each this long it waits, so no level starves (docs/scaling.md)
    Field("priority_aging", Kind.NUMBER, 1000.0, minimum=1, unit=_MS, attr="priority_aging_ms"),
    Field("stream_buffer", Kind.INTEGER, 16, minimum=1),
    # which version unversioned routes use (else the highest)
    Field("default_version", Kind.VERSION, None),
    # "thread": instances in the server process; "process": one per worker process
    Field(
        "workers",
        Kind.CHOICE,
        "thread",
        choices=("thread", "process"),
        mlserver=_parallel_workers(_workers_kind),
    ),
    Field(
        "min_workers",
        Kind.INTEGER,
        1,
        minimum=0,
        torchserve="minWorkers",
        mlserver=_parallel_workers(_workers_count),
    ),
    # unless given: max(min_workers, 1)
    Field(
        "max_workers",
        Kind.INTEGER,
        1,
        minimum=1,
        torchserve="maxWorkers",
        mlserver=_parallel_workers(_workers_count),
    ),
    # a predict may run this long; 0: no limit
    Field(
        "response_timeout",
        Kind.NUMBER,
        120.0,
        unit=_S,
        torchserve="responseTimeout",
        attr="response_timeout_s",
    ),
    Field("sequence_batching", Kind.FLAG, False, torchserve="sequenceBatching"),
    # a sequence idle this long ends; 0: never
    Field(
        "sequence_max_idle_ms",
        Kind.NUMBER,
        60_000.0,
        unit=_MS,
        torchserve="sequenceMaxIdleMSec",
    ),
    # a sequence older than this ends; 0: no absolute limit
    Field("sequence_timeout_ms", Kind.NUMBER, 0.0, unit=_MS, torchserve="sequenceTimeoutMSec"),
    # requests one sequence may have waiting behind the one running (a request stream waits
    # for room instead of being refused)
    Field(
        "max_sequence_queue_size",
        Kind.INTEGER,
        16,
        minimum=1,
        torchserve="maxSequenceJobQueueSize",
    ),
    # open sequences at once; 0: no limit
    Field("max_num_sequences", Kind.INTEGER, 10_000, minimum=0, torchserve="maxNumSequence"),
    Field("continuous_batching", Kind.FLAG, False, torchserve="continuousBatching"),
    # TorchServe handlers: the metrics.yaml whose model_metrics context.metrics declares (None:
    # TorchServe's own), and how their metrics look as TorchServe's (prometheus: TorchServe's
    # labels and names on /metrics; log: also its model_metrics.log lines); the server's
    # --metrics-config and --ts-metrics set them for every model
    Field("metrics_config", Kind.PATH, None),
    Field("ts_metrics", Kind.CHOICE, "off", choices=("off", "prometheus", "log")),
    # where its workers run (docs/devices.md): "auto" (every GPU, else the CPU), "cpu", "gpu"
    # (every GPU; none: a load error) or GPU numbers; TorchServe's deviceType / deviceIds and
    # Truss's resources map onto it in their adapters
    Field("devices", Kind.DEVICES, "auto"),
    # workers on each device (min_workers = max_workers = this × devices); 0: min_workers decides
    Field("workers_per_device", Kind.INTEGER, 0, minimum=0),
    # GPUs each worker holds (a model split over several; Truss's accelerator "A10G:2")
    Field("devices_per_worker", Kind.INTEGER, 1, minimum=1),
    # what predict_concurrency bounds on a GPU: "device" (the predicts of all the workers on one
    # GPU group together) or "worker" (each worker's own, as TorchServe's workers: its default
    # there)
    Field("predict_concurrency_per", Kind.CHOICE, "device", choices=("device", "worker")),
    # opt-in: answers kept by the model version, the inputs, outputs and parameters asked for
    # (docs/scaling.md, "The response cache"); true: the defaults. MLServer's cache_enabled
    # turns it on with MLServer's cache_size entries (model.mlserver._settings), unless the
    # file's podium section sets it
    Field("response_cache", Kind.CACHE, None),
    # free-form, returned in the model's metadata (a fresh dict each)
    Field("model_metadata", Kind.MAPPING, {}),
    # Ray Serve's options for this model's deployment (podium.ray, docs/ray.md): passed on,
    # checked there (a fresh dict each); `podium serve` ignores it
    Field("ray", Kind.MAPPING, {}),
)

#: Every field by its ``config.yaml`` key, in validation order.
FIELDS: Mapping[str, Field] = MappingProxyType({field.key: field for field in _TABLE})
