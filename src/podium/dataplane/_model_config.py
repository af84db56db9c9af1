"""Triton's model configuration extension: a version's settings as Triton's ``ModelConfig``.

:func:`configuration` derives it (``GET /v2/models/{m}[/versions/{v}]/config``, gRPC
``ModelConfig``) from the version's Podium config and the tensors its ``model_metadata``
declares; the structs below encode as Triton's REST answer does (its protobuf JSON, field names as
in ``model_config.proto``, 64-bit numbers as numbers), and the gRPC front end fills the message
from the same values. :func:`overlay` applies the ``config`` a repository load may carry
(Triton's ``load_model(config=...)``).

What maps, and how (``docs/protocols.md``, "Model configuration"):

- ``max_batch_size``: the declared ``model_metadata.max_batch_size`` (0 when none): a model whose
  requests carry a batch dimension first says so, as Triton's do. Podium's own dynamic batching
  (``batch_size``) groups whole requests and is not a tensor dimension.
- ``input`` / ``output``: the declared tensors, ``data_type`` ``TYPE_<datatype>`` (``BYTES``:
  ``TYPE_STRING``), ``dims`` the declared shape without the batch dimension when
  ``max_batch_size`` is above 0.
- ``dynamic_batching`` when the model batches (``batch_size`` > 1): ``max_queue_delay_microseconds``
  from ``max_batch_delay``, ``preferred_batch_size`` ``[batch_size]``, and the queue's bounds
  (``max_queue_size``; ``default_timeout_microseconds`` from ``max_queue_delay`` when set),
  ``priority_levels`` / ``default_priority_level`` when it has several levels;
  ``sequence_batching`` when it keeps sequences, with ``max_sequence_idle_microseconds``;
  Triton's configuration holds one of the two.
- ``instance_group``: one group of ``KIND_MODEL`` (the model places itself on its devices) whose
  ``count`` is the version's workers; ``version_policy`` ``all`` (every version is served);
  ``model_transaction_policy`` ``{decoupled: true}`` for a streaming (generator) model (absent
  otherwise, as from Triton).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import msgspec

from ..config import ModelConfig
from ..errors import DefinitionError, InvalidInput
from ..runtime import ModelVersion
from ..types import DATATYPES, TensorSpec

__all__ = ["DATA_TYPES", "ModelConfiguration", "configuration", "overlay"]


#: Triton's ``DataType`` of each OIP datatype (``TYPE_<datatype>``; BYTES is its ``TYPE_STRING``).
DATA_TYPES = {d: "TYPE_STRING" if d == "BYTES" else f"TYPE_{d}" for d in DATATYPES}
_DATATYPES = {name: datatype for datatype, name in DATA_TYPES.items()}


class ConfigInput(msgspec.Struct, kw_only=True):
    """Triton's ``ModelInput``, with the fields Triton's REST answer always shows."""

    name: str
    data_type: str
    format: str = "FORMAT_NONE"
    dims: list[int]
    is_shape_tensor: bool = False
    allow_ragged_batch: bool = False
    optional: bool = False


class ConfigOutput(msgspec.Struct, kw_only=True):
    """Triton's ``ModelOutput``, with the fields Triton's REST answer always shows."""

    name: str
    data_type: str
    dims: list[int]
    label_filename: str = ""
    is_shape_tensor: bool = False


class QueuePolicy(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Triton's ``ModelQueuePolicy``: the bound of the model's queue, in length and (where the
    model sets ``max_queue_delay``) in time."""

    max_queue_size: int
    default_timeout_microseconds: int = 0


class DynamicBatching(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Triton's ``ModelDynamicBatching`` for a model that batches (``batch_size`` > 1); its
    priority levels when it has several."""

    preferred_batch_size: list[int]
    max_queue_delay_microseconds: int
    default_queue_policy: QueuePolicy
    priority_levels: int = 0
    default_priority_level: int = 0


class SequenceBatching(msgspec.Struct, kw_only=True):
    """Triton's ``ModelSequenceBatching`` for a model that keeps sequences."""

    max_sequence_idle_microseconds: int


class InstanceGroup(msgspec.Struct, kw_only=True):
    """Triton's ``ModelInstanceGroup``."""

    name: str
    kind: str
    count: int


class TransactionPolicy(msgspec.Struct, kw_only=True):
    """Triton's ``ModelTransactionPolicy``: a decoupled model answers a request with a stream."""

    decoupled: bool


class ModelConfiguration(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A version's configuration as Triton's ``ModelConfig`` (see the module docstring); a
    scheduling field is left out when the model does not use it."""

    name: str
    platform: str
    backend: str
    #: Triton's ``ModelVersionPolicy``: always ``{"all": {}}``, every version is served.
    version_policy: dict[str, Any]
    max_batch_size: int
    input: list[ConfigInput]
    output: list[ConfigOutput]
    dynamic_batching: DynamicBatching | None = None
    sequence_batching: SequenceBatching | None = None
    instance_group: list[InstanceGroup]
    #: Only for a decoupled model, as Triton (perf_analyzer reads ``decoupled`` when it is there).
    model_transaction_policy: TransactionPolicy | None = None


def configuration(mv: ModelVersion, workers: int) -> ModelConfiguration:
    """The configuration of ``mv``, running ``workers`` workers."""
    config = mv.config
    signature = config.signature
    batch = signature.max_batch_size
    dynamic = sequence = None
    if config.sequence_batching:
        sequence = SequenceBatching(
            max_sequence_idle_microseconds=_microseconds(config.sequence_max_idle_ms)
        )
    elif config.batch_size > 1 and not config.continuous_batching:
        dynamic = DynamicBatching(
            preferred_batch_size=[config.batch_size],
            max_queue_delay_microseconds=_microseconds(config.max_batch_delay_ms),
            default_queue_policy=QueuePolicy(
                max_queue_size=config.max_queue_size,
                default_timeout_microseconds=_microseconds(config.max_queue_delay_ms),
            ),
        )
        if config.priority_levels > 1:
            dynamic.priority_levels = config.priority_levels
            dynamic.default_priority_level = config.default_priority
    platform = config.model_metadata.get("platform", "podium")
    return ModelConfiguration(
        name=mv.name,
        platform=platform if isinstance(platform, str) else str(platform),
        backend="podium",
        version_policy={"all": {}},
        max_batch_size=batch,
        input=[
            ConfigInput(name=s.name, data_type=DATA_TYPES[s.datatype], dims=_dims(s, batch))
            for s in signature.inputs
        ],
        output=[
            ConfigOutput(name=s.name, data_type=DATA_TYPES[s.datatype], dims=_dims(s, batch))
            for s in signature.outputs
        ],
        dynamic_batching=dynamic,
        sequence_batching=sequence,
        instance_group=[InstanceGroup(name=f"{mv.name}_0", kind="KIND_MODEL", count=workers)],
        model_transaction_policy=(
            TransactionPolicy(decoupled=True) if mv.instance.capabilities.streaming else None
        ),
    )


def _dims(spec: TensorSpec, batch: int) -> list[int]:
    return list(spec.shape[1:] if batch else spec.shape)


def _microseconds(ms: float) -> int:
    return round(ms * 1000)


#: What a load's ``config`` may change: what the model declares of its tensors.
CHANGEABLE = ("max_batch_size", "input", "output")
#: Where each other field of the configuration is changed, for the refusal's message.
_CHANGED_BY = {
    "name": "the name is the model's",
    "platform": "it is the model_metadata's platform",
    "backend": "Podium runs every model",
    "version_policy": "Podium serves every version",
    "dynamic_batching": "batching is set by batch_size and max_batch_delay (config.yaml, or "
    "the management API's registration)",
    "sequence_batching": "sequences are set by sequence_batching and sequence_max_idle_ms "
    "(config.yaml)",
    "instance_group": "workers are scaled through the management API",
    "model_transaction_policy": "a model is decoupled when its predict is a generator",
}
_FIELD_TYPES = {field.name: field.type for field in msgspec.structs.fields(ModelConfiguration)}


def overlay(config: ModelConfig, current: ModelConfiguration, text: str) -> ModelConfig:
    """``config`` with what a repository load's ``config`` parameter (``text``: Triton's
    ``ModelConfig`` as JSON, numbers as numbers or strings, as protobuf's JSON allows) changes.

    ``max_batch_size``, ``input`` and ``output`` replace what the model declares. Every other
    field of :class:`ModelConfiguration` must be what ``current`` (the version's configuration)
    says; a field Triton has and Podium does not must be empty or absent. ``InvalidInput``
    names the field and the rule otherwise."""
    try:
        given = msgspec.json.decode(text)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"its 'config' parameter is not JSON: {exc}") from None
    if not isinstance(given, dict):
        raise InvalidInput(
            f"its 'config' parameter must be a JSON object (Triton's ModelConfig), got {text!r}"
        )
    changed: dict[str, Any] = {}
    for key, value in given.items():
        kind = _FIELD_TYPES.get(key)
        if kind is None:
            if value in (None, "", 0, False, [], {}):
                continue  # a default of one of Triton's own fields: nothing asked
            raise InvalidInput(
                f"its 'config' sets '{key}', which Podium has no equivalent of (it changes "
                f"{', '.join(CHANGEABLE)}; the rest must be as GET .../config says)"
            )
        try:
            converted = msgspec.convert(value, kind, strict=False)
        except msgspec.ValidationError as exc:
            if key in CHANGEABLE:
                raise InvalidInput(f"its 'config' has an invalid '{key}': {exc}") from None
            converted = _DIFFERENT  # not even of the field's shape: not what Podium has
        if key in CHANGEABLE:
            changed[key] = converted
        elif _normal(converted) != getattr(current, key):
            raise InvalidInput(
                f"its 'config' sets '{key}' to {value!r}, but that is not changed by a load: "
                f"{_CHANGED_BY[key]}"
            )
    if not changed:
        return config
    metadata = dict(config.model_metadata)
    batch = changed.get("max_batch_size", config.signature.max_batch_size)
    if batch < 0:
        raise InvalidInput(f"its 'config' sets max_batch_size to {batch}; it must be >= 0")
    if batch:
        metadata["max_batch_size"] = batch
    else:
        metadata.pop("max_batch_size", None)
    for key, tensors in (("inputs", changed.get("input")), ("outputs", changed.get("output"))):
        if tensors is not None:
            metadata[key] = _declared(key, tensors, batch, metadata.get(key) or [])
    try:
        return dataclasses.replace(config, model_metadata=metadata)
    except DefinitionError as exc:
        raise InvalidInput(f"its 'config' does not fit the model: {exc.message}") from None


_DIFFERENT = object()


def _normal(value: Any) -> Any:
    """A given field as the configuration holds it (a transaction policy that is not decoupled
    is no policy: the configuration leaves it out, as Triton's does)."""
    if isinstance(value, TransactionPolicy) and not value.decoupled:
        return None
    return value


def _declared(
    key: str,
    tensors: list[ConfigInput] | list[ConfigOutput],
    batch: int,
    before: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    """Triton's tensors as ``model_metadata`` entries (the batch dimension put back first; the
    ``parameters`` an entry of the same name had, kept)."""
    parameters = {e.get("name"): e["parameters"] for e in before if e.get("parameters")}
    entries: list[dict[str, Any]] = []
    for tensor in tensors:
        datatype = _DATATYPES.get(tensor.data_type)
        if datatype is None:
            raise InvalidInput(
                f"its 'config' gives {key[:-1]} '{tensor.name}' data_type {tensor.data_type!r}; "
                f"expected one of {', '.join(sorted(_DATATYPES))}"
            )
        fancy = [
            field
            for field in ("format", "is_shape_tensor", "allow_ragged_batch", "optional")
            if getattr(tensor, field, None) not in (None, "FORMAT_NONE", False)
        ]
        if getattr(tensor, "label_filename", ""):
            fancy.append("label_filename")
        if fancy:
            raise InvalidInput(
                f"its 'config' gives {key[:-1]} '{tensor.name}' {', '.join(fancy)}, which "
                "Podium has no equivalent of"
            )
        entry: dict[str, Any] = {
            "name": tensor.name,
            "datatype": datatype,
            "shape": ([-1] if batch else []) + list(tensor.dims),
        }
        if tensor.name in parameters:
            entry["parameters"] = parameters[tensor.name]
        entries.append(entry)
    return entries
