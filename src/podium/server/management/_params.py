"""The parameters of management requests, validated the same way for REST and gRPC.

REST gives strings (a query) or JSON values (a body); gRPC gives typed fields where 0 and "" mean
"not given" (proto3 has no presence), as TorchServe reads them. Every problem is an
``InvalidInput`` (400 / ``INVALID_ARGUMENT``) naming the parameter and the rule.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from ...dataplane import ConfigOverrides
from ...errors import InvalidInput

__all__ = [
    "MAX_WORKERS",
    "REGISTER_KEYS",
    "SCALE_KEYS",
    "Registration",
    "Scaling",
    "flag",
    "integer",
    "page",
]

_TORCHSERVE_ONLY = ("runtime", "handler", "s3_sse_kms")
SCALE_KEYS = frozenset({"min_worker", "max_worker", "synchronous", "timeout", "model_version"})
#: The most workers one request may ask a model version for. Each is a model instance (or a
#: process); without a bound, one request for millions of them kept the server busy building
#: them and answering nothing else (found by fuzzing the management API).
MAX_WORKERS = 1024
#: An integer as text: ASCII digits only (``str.isdigit`` takes "²", which ``int`` refuses),
#: and few enough that ``int`` takes them (it refuses more than 4,300).
_INTEGER = re.compile(r"-?[0-9]{1,18}")


def integer(name: str, value: Any, minimum: int | None, maximum: int | None = None) -> int:
    """``value`` (an int, or the text of one) as an int >= ``minimum`` (None: any) and <=
    ``maximum``."""
    if isinstance(value, str):
        text = value.strip()
        if _INTEGER.fullmatch(text):
            value = int(text)
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or (minimum is not None and value < minimum)
    ):
        at_least = "" if minimum is None else f" >= {minimum}"
        raise InvalidInput(f"parameter {name} must be an integer{at_least}, got {value!r}")
    if maximum is not None and value > maximum:
        raise InvalidInput(f"parameter {name} must be at most {maximum}, got {value}")
    return value


def number(name: str, value: Any, minimum: float) -> float:
    """``value`` (a number, or the text of one) as a float >= ``minimum``."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, int | float) or value < minimum:
        raise InvalidInput(f"parameter {name} must be a number >= {minimum:g}, got {value!r}")
    return float(value)


def flag(name: str, value: Any) -> bool:
    """``value`` as a boolean: true/false (any case), 1/0, or a JSON boolean."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "1"):
        return True
    if isinstance(value, str) and value.strip().lower() in ("false", "0"):
        return False
    raise InvalidInput(f"parameter {name} must be true or false, got {value!r}")


def _unknown(values: Mapping[str, Any], allowed: frozenset[str]) -> None:
    unknown = sorted(set(values) - allowed)
    if unknown:
        raise InvalidInput(
            f"unknown parameter(s) {', '.join(unknown)} (allowed: {', '.join(sorted(allowed))})"
        )


@dataclass(frozen=True, slots=True)
class Registration:
    """A registration request (``POST /models``, ``RegisterModel``)."""

    url: str
    model_name: str | None = None
    batch_size: int | None = None
    max_batch_delay: float | None = None  # milliseconds
    initial_workers: int | None = None
    response_timeout: float | None = None  # seconds
    synchronous: bool = True

    @classmethod
    def parse(cls, values: Mapping[str, Any], *, synchronous: bool = True) -> Registration:
        """From REST parameters (query strings or JSON values); ``synchronous`` is the default."""
        _unknown(values, REGISTER_KEYS)
        url = values.get("url")
        if not isinstance(url, str) or not url.strip():
            raise InvalidInput("Parameter url is required.")
        name = values.get("model_name")
        if name is not None and (not isinstance(name, str) or not name.strip() or "/" in name):
            raise InvalidInput(
                f"parameter model_name must be a non-empty name without '/', got {name!r}"
            )
        runtime = values.get("runtime")
        if runtime is not None and str(runtime).lower() not in ("python", "python3", ""):
            raise InvalidInput(f"runtime '{runtime}' is not supported: Podium runs python models")
        if values.get("handler"):
            raise InvalidInput(
                "parameter handler is not supported: name the handler in the model's own files "
                "(MANIFEST.json or model-config.yaml)"
            )
        if "s3_sse_kms" in values and flag("s3_sse_kms", values["s3_sse_kms"]):
            raise InvalidInput("parameter s3_sse_kms is not supported: s3 urls are not fetched")

        def get(key: str, parse: Any, *bounds: float) -> Any:
            return parse(key, values[key], *bounds) if key in values else None

        return cls(
            url=url.strip(),
            model_name=name.strip() if name else None,
            batch_size=get("batch_size", integer, 1),
            max_batch_delay=get("max_batch_delay", number, 0),
            initial_workers=get("initial_workers", integer, 0, MAX_WORKERS),
            response_timeout=get("response_timeout", number, 0),
            synchronous=flag("synchronous", values["synchronous"])
            if "synchronous" in values
            else synchronous,
        )

    def overrides(self) -> ConfigOverrides:
        """The model settings these parameters replace."""
        return ConfigOverrides(
            name=self.model_name,
            batch_size=self.batch_size,
            max_batch_delay_ms=self.max_batch_delay,
            min_workers=self.initial_workers,
            response_timeout_s=self.response_timeout,
        )


#: A registration's parameters: its fields, and TorchServe's that it takes only as Podium runs
#: models (runtime python, no handler, no s3_sse_kms).
REGISTER_KEYS = frozenset(f.name for f in fields(Registration)).union(_TORCHSERVE_ONLY)


@dataclass(frozen=True, slots=True)
class Scaling:
    """A scale request (``PUT /models/{m}[/{v}]``, ``ScaleWorker``)."""

    min_workers: int
    max_workers: int
    synchronous: bool = False
    version: str | None = None

    @classmethod
    def parse(cls, values: Mapping[str, Any]) -> Scaling:
        """From REST parameters, or gRPC's that are given: ``min_worker`` (default 1, as
        TorchServe), ``max_worker`` (default ``min_worker``, at least 1), ``synchronous``
        (default false); ``timeout`` is accepted and ignored (a worker being removed always
        finishes what it holds)."""
        _unknown(values, SCALE_KEYS)
        low = (
            integer("min_worker", values["min_worker"], 0, MAX_WORKERS)
            if "min_worker" in values
            else 1
        )
        high = (
            integer("max_worker", values["max_worker"], 0, MAX_WORKERS)
            if "max_worker" in values
            else max(low, 1)  # as a model's config.yaml: max_workers defaults to min, at least 1
        )
        if "timeout" in values:
            integer("timeout", values["timeout"], -1)
        if high < low:
            raise InvalidInput(
                f"max_worker cannot be less than min_worker (min_worker {low}, max_worker {high})"
            )
        if high < 1:
            raise InvalidInput("max_worker must be at least 1")
        version = values.get("model_version") or None
        synchronous = flag("synchronous", values.get("synchronous", False))
        return cls(low, high, synchronous, str(version) if version else None)


def page(values: Mapping[str, Any]) -> tuple[int, int]:
    """``limit`` and ``next_page_token`` of a list request. As TorchServe: a limit that is
    absent, 0, negative or above 100 means 100; a negative token means 0."""
    given = {k: integer(k, values[k], None) for k in ("limit", "next_page_token") if values.get(k)}
    limit = given.get("limit", 100)
    if limit <= 0 or limit > 100:
        limit = 100
    return limit, max(given.get("next_page_token", 0), 0)
