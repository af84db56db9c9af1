"""Which of a truss's requirements this environment does not satisfy.

Truss installs a truss's ``requirements`` (or ``requirements_file``) into its image when it
builds it. Podium installs nothing when it serves: it says which are missing, so that the
operator installs them (``podium check`` lists them; an import that fails names them).
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import metadata

__all__ = ["missing_requirements"]


def _unsatisfied(line: str) -> bool:
    """Whether requirement ``line`` is not satisfied here; a line that is no plain requirement
    (a URL, a path, an option) is not judged."""
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        requirement = Requirement(line)
    except InvalidRequirement:
        return False
    if requirement.url or (requirement.marker is not None and not requirement.marker.evaluate()):
        return False
    try:
        installed = metadata.version(requirement.name)
    except metadata.PackageNotFoundError:
        return True
    return bool(requirement.specifier) and not requirement.specifier.contains(
        installed, prereleases=True
    )


def missing_requirements(requirements: Iterable[str]) -> list[str]:
    """The requirements (as written) that are not installed, or installed at a version outside
    the one they ask for."""
    return [line for line in requirements if _unsatisfied(line)]
