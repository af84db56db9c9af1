"""What discovery finds: one model version on disk, whichever contract its code is written to."""

from __future__ import annotations

import enum
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import MODEL_KEYS, ModelConfig
from ..errors import DefinitionError, model_label
from ._owned import Owned

if TYPE_CHECKING:  # the truss package imports this module
    from .truss import TrussSettings

__all__ = [
    "Contract",
    "MLServerParts",
    "ModelSource",
    "TorchServeParts",
    "TrussParts",
    "podium_section",
    "read_json_object",
    "read_requirements",
]


class Contract(enum.StrEnum):
    """The contract a model's code is written to: which adapter builds it."""

    NATIVE = "native"  # a class with predict (model/native.py)
    TORCHSERVE = "torchserve"  # a TorchServe handler (model/torchserve/)
    MLSERVER = "mlserver"  # an MLServer runtime (model/mlserver/)
    TRUSS = "truss"  # a truss: config.yaml and model/model.py (model/truss/)


def read_json_object(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``; ``DefinitionError`` naming the file otherwise."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise DefinitionError(f"{path}: cannot be read: {exc.strerror}") from exc
    except ValueError as exc:
        raise DefinitionError(f"{path}: invalid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise DefinitionError(f"{path}: must be a JSON object, not {type(data).__name__}")
    return data


def podium_section(
    section: Any,
    where: str,
    problems: list[str],
    refused: Mapping[str, str],
    excluded: Collection[str] = (),
) -> dict[str, Any]:
    """The ``podium`` section of a TorchServe or MLServer model file (Podium's own model keys):
    the keys it sets, as given. A key of ``refused`` (with why: one the file sets in its own
    spelling, say), and one not a model key or ``excluded``, are problems in ``problems``
    (the latter with the keys it may set)."""
    if section is None:
        return {}
    if not isinstance(section, dict):
        problems.append(f"{where}: 'podium' must be a mapping of Podium's model keys")
        return {}
    allowed = MODEL_KEYS - set(refused) - set(excluded)
    found: dict[str, Any] = {}
    for key, value in section.items():
        if key in refused:
            problems.append(f"{where}: 'podium.{key}' {refused[key]}")
        elif key not in allowed:
            problems.append(
                f"{where}: unknown key 'podium.{key}' (allowed: {', '.join(sorted(allowed))})"
            )
        else:
            found[key] = value
    return found


def read_requirements(path: Path) -> tuple[str, ...]:
    """The requirements of the requirements file ``path``: comments and options (``-e``,
    ``-r``, ``--index-url``...) left out; ``OSError`` if it cannot be read."""
    lines = path.read_text(encoding="utf-8").splitlines()
    kept = (line.split("#", 1)[0].strip() for line in lines)
    return tuple(line for line in kept if line and not line.startswith("-"))


@dataclass(frozen=True, slots=True)
class TorchServeParts:
    """What the TorchServe adapter needs of a model beyond its ``ModelConfig``."""

    manifest: dict[str, Any]  # MAR-INF/MANIFEST.json, as TorchServe writes it


@dataclass(frozen=True, slots=True)
class MLServerParts:
    """What the MLServer adapter needs of a model beyond its ``ModelConfig``."""

    implementation: str  # the runtime class, as a dotted path ("models.MyRuntime")
    settings_path: Path  # model-settings.json
    settings: Mapping[str, Any]  # its keys (less 'podium'): MLServer's ModelSettings, per instance


@dataclass(frozen=True, slots=True)
class TrussParts:
    """What the Truss adapter needs of a model beyond its ``ModelConfig``."""

    settings: TrussSettings  # what the adapter reads of it (paths, runtime, secrets, env)


@dataclass(frozen=True, slots=True)
class ModelSource:
    """One model version found on disk, with its validated configuration.

    ``contract`` says which adapter builds it; a TorchServe or MLServer model or a truss carries
    what its adapter needs in ``torchserve`` / ``mlserver`` / ``truss`` (the others, and all
    three for a native model, are None).
    """

    config: ModelConfig
    file: Path  # the .py file holding the class (the handler or runtime file for other contracts)
    model_dir: Path  # where data/ lives
    contract: Contract = Contract.NATIVE
    torchserve: TorchServeParts | None = None
    mlserver: MLServerParts | None = None
    truss: TrussParts | None = None
    #: The Python its worker processes start with: that of the environment its own requirements
    #: were installed into (``runtime.environments``); None: the server's, and it may run in
    #: thread workers.
    python: Path | None = None
    #: Environment variables its worker processes start with (a truss's
    #: ``environment_variables``; thread workers' code reads them through ``os.environ``).
    process_env: Mapping[str, str] = field(default_factory=dict)
    # What Podium made on disk for it (an archive's extraction); the version built from it
    # takes these over, and releases them when it is removed.
    owned: tuple[Owned, ...] = ()

    def __post_init__(self) -> None:
        has = {
            Contract.TORCHSERVE: self.torchserve,
            Contract.MLSERVER: self.mlserver,
            Contract.TRUSS: self.truss,
        }
        for contract, parts in has.items():
            if (parts is not None) != (self.contract is contract):
                raise ValueError(
                    f"a {self.contract.value} model source must "
                    f"{'' if self.contract is contract else 'not '}carry {contract.value} parts"
                )

    @property
    def label(self) -> str:
        return f"{model_label(self.config.name, self.config.version)} ({self.file})"

    def torchserve_parts(self) -> TorchServeParts:
        """The TorchServe adapter's parts; ``ValueError`` for a model of another contract."""
        if self.torchserve is None:
            raise ValueError(f"{self.label} is a {self.contract.value} model, not a TorchServe one")
        return self.torchserve

    def truss_parts(self) -> TrussParts:
        """The Truss adapter's parts; ``ValueError`` for a model of another contract."""
        if self.truss is None:
            raise ValueError(f"{self.label} is a {self.contract.value} model, not a truss")
        return self.truss

    def requirements(self) -> tuple[str, ...]:
        """The packages the model's code declares it needs, as requirement lines: a truss's
        ``requirements`` (or its ``requirements_file``), a TorchServe archive's requirements
        file, the ``requirements.txt`` beside a native model's file; none for other models."""
        if self.truss is not None:
            return self.truss.settings.requirements
        if self.contract is Contract.NATIVE:
            path = self.file.parent / "requirements.txt"
        elif self.torchserve is not None:
            listed = (self.torchserve.manifest.get("model") or {}).get("requirementsFile")
            path = self.model_dir / str(listed or "")  # none listed: the folder, no file
        else:
            return ()
        return read_requirements(path) if path.is_file() else ()

    def mlserver_parts(self) -> MLServerParts:
        """The MLServer adapter's parts; ``ValueError`` for a model of another contract."""
        if self.mlserver is None:
            raise ValueError(f"{self.label} is a {self.contract.value} model, not an MLServer one")
        return self.mlserver
