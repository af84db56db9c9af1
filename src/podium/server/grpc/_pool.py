"""Podium's private protobuf descriptor pool and the message classes built from it.

``tritonclient.grpc`` and ``mlserver`` both register the ``inference`` package in protobuf's
default pool, so generated ``_pb2`` modules for the same names would fail with "duplicate symbol"
in whichever was imported second. Podium's messages live in a pool of their own, loaded from the
serialized descriptor set in :mod:`.protos._descriptors`: the wire names stay exactly
``inference.*`` and the default pool is never touched.
"""

from __future__ import annotations

import functools
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from .protos._descriptors import FILE_DESCRIPTOR_SET

__all__ = ["POOL", "message_class", "reflection_pool"]


def _files() -> list[descriptor_pb2.FileDescriptorProto]:
    return list(descriptor_pb2.FileDescriptorSet.FromString(FILE_DESCRIPTOR_SET).file)


def _new_pool(files: list[descriptor_pb2.FileDescriptorProto]) -> descriptor_pool.DescriptorPool:
    pool = descriptor_pool.DescriptorPool()
    for proto in files:  # protoc writes dependencies before the files that import them
        pool.Add(proto)
    return pool


#: Every message and service of Podium's ``.proto`` files, and nothing else.
POOL = _new_pool(_files())


def _every_class(files: list[descriptor_pb2.FileDescriptorProto]) -> list[Any]:
    """A class for every message type in :data:`POOL`, nested ones and map entries included.

    protobuf keeps the class of a message type only while something refers to it: a nested type
    (``ModelInferRequest.InferInputTensor``, a parameters map entry) whose last message is gone
    would be built again, a new Python type each time, by the next call that touches it. Held
    here, each is built once.
    """
    classes: list[Any] = []

    def visit(descriptor: Any) -> None:
        classes.append(message_factory.GetMessageClass(descriptor))
        for nested in descriptor.nested_types:
            visit(nested)

    for proto in files:
        for descriptor in POOL.FindFileByName(proto.name).message_types_by_name.values():
            visit(descriptor)
    return classes


_CLASSES = _every_class(_files())


@functools.cache
def message_class(full_name: str) -> Any:
    """The message class for ``full_name`` (e.g. ``"inference.ModelInferRequest"``)."""
    return message_factory.GetMessageClass(POOL.FindMessageTypeByName(full_name))


def reflection_pool(
    outputs: dict[str, str], extra_files: list[Any]
) -> descriptor_pool.DescriptorPool:
    """A pool for server reflection: Podium's files as served, plus ``extra_files``.

    ``outputs`` maps a method's full name (``"inference.GRPCInferenceService.ModelStreamInfer"``)
    to the message type it actually answers with, where a server option changes it.
    ``extra_files`` are file descriptors (``module.DESCRIPTOR``) of other services served, such
    as health and reflection themselves, so that reflection describes every service it lists.
    """
    files = _files()
    for proto in files:
        for service in proto.service:
            for method in service.method:
                served = outputs.get(f"{proto.package}.{service.name}.{method.name}")
                if served is not None:
                    method.output_type = "." + served
    known = {proto.name for proto in files}
    for descriptor in extra_files:
        for dependency in _with_dependencies(descriptor):
            if dependency.name not in known:
                known.add(dependency.name)
                proto = descriptor_pb2.FileDescriptorProto()
                dependency.CopyToProto(proto)
                files.append(proto)
    return _new_pool(files)


def _with_dependencies(descriptor: Any) -> list[Any]:
    """``descriptor`` and everything it imports, dependencies first."""
    ordered: list[Any] = []
    seen: set[str] = set()

    def visit(d: Any) -> None:
        if d.name in seen:
            return
        seen.add(d.name)
        for dep in d.dependencies:
            visit(dep)
        ordered.append(d)

    visit(descriptor)
    return ordered
