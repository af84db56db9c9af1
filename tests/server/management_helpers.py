"""Helpers shared by the management API tests (REST, gRPC and auth).

:func:`torchserve_management_stubs` generates ``management_pb2`` / ``management_pb2_grpc`` from
TorchServe's own declaration (``protos/torchserve/management.proto``) with grpcio-tools, as a
TorchServe user does; generated once per session into a package of its own, so that its file
name in protobuf's default pool meets no other test's.
"""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

TS_PROTOS = Path(__file__).resolve().parent / "protos" / "torchserve"
MANAGEMENT_SERVICE = "org.pytorch.serve.grpc.management.ManagementAPIsService"

_made: dict[str, SimpleNamespace] = {}


def torchserve_management_stubs(directory: Path) -> SimpleNamespace:
    """``pb2`` and ``grpc`` (the generated modules), made once per process."""
    if "stubs" in _made:
        return _made["stubs"]
    package = directory / "torchserve_mgmt_stubs"
    package.mkdir(parents=True, exist_ok=True)
    shutil.copy(TS_PROTOS / "management.proto", package / "management.proto")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{directory}",
            f"--python_out={directory}",
            f"--grpc_python_out={directory}",
            "torchserve_mgmt_stubs/management.proto",
        ],
        check=True,
        capture_output=True,
    )
    sys.path.insert(0, str(directory))
    try:
        pb2 = importlib.import_module("torchserve_mgmt_stubs.management_pb2")
        pb2_grpc = importlib.import_module("torchserve_mgmt_stubs.management_pb2_grpc")
    finally:
        sys.path.remove(str(directory))
    assert pb2.DESCRIPTOR.package == "org.pytorch.serve.grpc.management"
    _made["stubs"] = SimpleNamespace(pb2=pb2, grpc=pb2_grpc)
    return _made["stubs"]
