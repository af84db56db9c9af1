"""Tiny wheels made on the spot, for installs that need no package index."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(folder: Path, name: str, version: str, code: str) -> Path:
    """``folder/NAME-VERSION-py3-none-any.whl``: a package ``name`` whose ``__init__`` is
    ``code``."""
    folder.mkdir(parents=True, exist_ok=True)
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": code.encode(),
        f"{info}/METADATA": (f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n").encode(),
        f"{info}/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: podium-tests\nRoot-Is-Purelib: true\n"
            b"Tag: py3-none-any\n"
        ),
    }
    record = "".join(f"{path},{_digest(data)},{len(data)}\n" for path, data in files.items())
    record += f"{info}/RECORD,,\n"
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
        archive.writestr(f"{info}/RECORD", record)
    return wheel
