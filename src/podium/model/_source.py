"""What discovery finds: one model version on disk, whichever contract its code is written to."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import ModelConfig
from ._owned import Owned

__all__ = ["ModelSource"]


@dataclass(frozen=True, slots=True)
class ModelSource:
    """One model version found on disk, with its validated configuration."""

    config: ModelConfig
    file: Path  # the .py file holding the class (the handler or runtime file for other contracts)
    model_dir: Path  # where data/ lives
    contract: str = "native"  # "native", "torchserve" or "mlserver": which adapter builds it
    extra: Mapping[str, Any] = field(default_factory=dict)  # what that contract's adapter needs
    # What Podium made on disk for it (an archive's extraction); the version built from it
    # takes these over, and releases them when it is removed.
    owned: tuple[Owned, ...] = ()

    @property
    def label(self) -> str:
        version = f" version '{self.config.version}'" if self.config.version else ""
        return f"model '{self.config.name}'{version} ({self.file})"
