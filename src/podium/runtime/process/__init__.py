"""Process workers: each instance of a model in a worker process of its own.

The server's side (``_parent``: :class:`ProcessWorker`; ``_remote``: the version's
:class:`RemoteInstance`; ``_pool``: :func:`process_pool`) spawns ``python -m
podium.runtime.process`` (``__main__`` → ``_child``, the worker process) and talks to it over a socket pair: the messages of ``_messages``, framed by
``_wire`` (msgspec MessagePack with a numpy extension; opaque values pickled; large buffers
out of band or through shared memory). A continuous batch's lane steps the model in the worker
process one ``Step`` at a time (``_steps``).

This package is part of the execution layer and imports nothing above it. What the worker process
needs from above (the host factory that builds and schedules the model, the function that
rebuilds a front end's request) is handed to :func:`process_pool` by its caller and travels to the
worker by reference in the ``Init`` message.
"""

from ._messages import Failed, HostFactory, Runner
from ._parent import ProcessWorker, WorkerGone
from ._pool import process_pool
from ._remote import RemoteInstance

__all__ = [
    "Failed",
    "HostFactory",
    "ProcessWorker",
    "RemoteInstance",
    "Runner",
    "WorkerGone",
    "process_pool",
]
