"""A truss's secrets, read from Truss's sources.

A truss declares the secrets it reads in its config (``secrets:``, each with a default or
null). As Truss's ``SecretsResolver``: the default, overridden by the environment variable
``TRUSS_SECRET_<name>``, overridden by a file named after the secret in the secrets directory
(Truss mounts ``/secrets``; Podium reads ``--secrets-dir``). A secret the config does not
declare, or one with no value from any source, raises Truss's ``SecretNotFound`` (a
``KeyError``, Podium's ``MissingSecret``) when read.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path

from ...errors import MissingSecret

__all__ = ["ENV_PREFIX", "SecretNotFound", "TrussSecrets"]

#: The environment variables Truss reads secrets from: ``TRUSS_SECRET_<name>``.
ENV_PREFIX = "TRUSS_SECRET_"


class SecretNotFound(MissingSecret):
    """A secret the model read is not declared, or has no value (Truss's error)."""


class TrussSecrets(Mapping[str, str]):
    """The secrets a truss declares (``declared``: name → default), read on each access so a
    rotated file needs no restart. Iterating lists the declared names."""

    def __init__(
        self,
        declared: Mapping[str, str | None],
        directory: Path | None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._declared = dict(declared)
        self._directory = directory
        self._environ = os.environ if environ is None else environ

    def __getitem__(self, name: str) -> str:
        if name not in self._declared:
            raise SecretNotFound(_missing(name))
        value = self._declared[name]
        value = self._environ.get(ENV_PREFIX + name, value)
        if self._directory is not None and "/" not in name and name not in {"", ".", ".."}:
            path = self._directory / name
            if path.is_file():
                value = path.read_text(encoding="utf-8")
        if not value:
            raise SecretNotFound(_missing(name))
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._declared)

    def __len__(self) -> int:
        return len(self._declared)

    def __repr__(self) -> str:  # never the values
        return f"TrussSecrets({sorted(self._declared)})"


def _missing(name: str) -> str:
    return (
        f"Secret '{name}' not found. Please ensure that: Secret '{name}' is defined in the "
        "'secrets' section of the Truss config file, and has a value: its default there, "
        f"the environment variable {ENV_PREFIX}{name}, or a file '{name}' in the secrets "
        "directory (--secrets-dir)"
    )
