"""A truss's GPU type (``resources.accelerator: A10G:2``) against the GPUs it is given.

Truss's platform picks a machine with that GPU; Podium runs on whatever machine it is started
on, so the type is only checked: a GPU whose name (NVML's: ``NVIDIA A10G``, ``Tesla T4``,
``NVIDIA A100-SXM4-40GB``) does not show it is a warning when the truss loads, never an error
(the model may well run there). docs/devices.md, "Foreign configs".
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["accelerator_mismatch", "shows_type"]

_WORDS = re.compile(r"[\s_\-]+")


def shows_type(accelerator: str, name: str) -> bool:
    """Whether GPU ``name`` is of Truss's type ``accelerator``: the type's words appear in
    the name as whole words, in order (``L4`` is not ``L40S``, ``A10G`` not ``A100``); a memory
    size (``A100_40GB``, ``H100_40GB``: a MIG slice ``... 3g.40gb``) appears anywhere in it."""
    words = [w.lower() for w in _WORDS.split(accelerator.strip()) if w]
    memory = [w for w in words if re.fullmatch(r"\d+gb", w)]
    kind = [w for w in words if w not in memory]
    lowered = name.lower()
    tokens = [t for t in _WORDS.split(lowered) if t]
    if any(size not in lowered for size in memory):
        return False
    span = len(kind)
    return not kind or any(tokens[i : i + span] == kind for i in range(len(tokens) - span + 1))


def accelerator_mismatch(
    label: str, accelerator: str, gpus: Sequence[tuple[int, str]]
) -> str | None:
    """The warning for the GPUs (``(number, name)``) a truss asking for ``accelerator``
    (``A10G:2``) was given, where any is not of its type; None where all are (or none was)."""
    kind = accelerator.partition(":")[0].strip()
    if not kind:
        return None
    other = [(index, name) for index, name in gpus if not shows_type(kind, name)]
    if not other:
        return None
    listed = ", ".join(f"GPU {index} is {name[:64]!r}" for index, name in other[:8])
    more = f" and {len(other) - 8} more" if len(other) > 8 else ""
    return (
        f"{label}: resources.accelerator asks for {kind[:40]!r}, but {listed}{more}; "
        f"it runs there anyway"
    )
