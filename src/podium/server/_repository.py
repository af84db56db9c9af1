"""OIP's repository extension on the wire, as the REST and gRPC front ends both speak it: the
state names of the index, and the parameters of a load and an unload (Triton's).

- A load takes ``config`` (Triton's ``ModelConfig`` as JSON text: what the model declares
  changes, see ``dataplane``'s ``overlay``). ``file:<path>`` parameters (a model sent with the
  request) are refused: Podium loads only models from the paths it serves, and new ones come
  through the management API. Any other parameter is refused, as Triton does.
- An unload takes ``unload_dependents`` (a boolean; no Podium model depends on another, so it
  changes nothing); other parameters are ignored, as Triton does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import InvalidInput
from ..types import ModelState, RepositoryModel

__all__ = ["STATE_NAMES", "index_entry", "load_config", "unload_dependents"]

#: The index's name of each state (Triton's; a failed or unloaded version is UNAVAILABLE).
STATE_NAMES = {
    ModelState.READY: "READY",
    ModelState.LOADING: "LOADING",
    ModelState.FAILED: "UNAVAILABLE",
    ModelState.UNLOADED: "UNAVAILABLE",
}


def index_entry(model: RepositoryModel) -> dict[str, str]:
    """One version in the REST index: ``name``, ``version`` (``"1"`` for an unversioned model,
    as Triton's), ``state`` and, when there is one, ``reason`` (Triton leaves it out then)."""
    entry = {"name": model.name, "version": model.version, "state": STATE_NAMES[model.state]}
    if model.reason:
        entry["reason"] = model.reason
    return entry


def load_config(parameters: Mapping[str, Any], name: str) -> str | None:
    """The ``config`` parameter of a load of model ``name`` (None: none), after checking the
    others; ``InvalidInput`` names what cannot be."""
    files = sorted(key for key in parameters if key.startswith("file:"))
    if files:
        raise InvalidInput(
            f"failed to load model '{name}': parameter(s) {', '.join(files)} (a model sent with "
            "the request) are not supported: Podium loads models only from the paths it serves "
            "(registering new ones is the management API's)"
        )
    unknown = sorted(key for key in parameters if key != "config")
    if unknown:
        raise InvalidInput(
            f"failed to load model '{name}': unknown parameter(s) {', '.join(unknown)} "
            "(a load takes 'config')"
        )
    config = parameters.get("config")
    if config is None:
        return None
    if not isinstance(config, str):
        raise InvalidInput(
            f"failed to load model '{name}': parameter 'config' must be a string "
            f"(Triton's ModelConfig as JSON), got {type(config).__name__}"
        )
    return config


def unload_dependents(parameters: Mapping[str, Any], name: str) -> bool:
    """The ``unload_dependents`` parameter of an unload of model ``name`` (false when absent);
    ``InvalidInput`` when it is not a boolean."""
    value = parameters.get("unload_dependents", False)
    if not isinstance(value, bool):
        raise InvalidInput(
            f"unloading model '{name}': parameter 'unload_dependents' must be true or false, "
            f"got {value!r}"
        )
    return value
