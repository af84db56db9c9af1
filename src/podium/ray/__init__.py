"""Podium on Ray Serve: the models a ``podium serve`` takes, as a Serve application.

``serve run podium.ray:app paths=examples`` (or ``podium ray examples``) deploys one Serve
deployment per model version, each replica running that version on Podium's own runtime (its
scheduler, batching, sequences, workers), and an ingress that serves Podium's HTTP protocols
through Serve's HTTP proxy with Podium's own front end. docs/ray.md says how to run it;
docs/scaling.md when to.

Layout: ``_app`` (the application builder :func:`app`, :func:`build`, and ``podium ray``'s
:func:`run`), ``_options`` (the builder's arguments, each version's deployment options from its
config and its ``ray:`` section), ``_replica`` (:class:`ModelReplica`: one version in a
replica), ``_ingress`` (:class:`Ingress`: ``HttpApp`` in a replica, and the OIP gRPC methods
Serve's gRPC proxy calls), ``_grpc`` (what that proxy is given, and Podium's gRPC handlers behind
those methods), ``_remote`` (the ingress's
data plane, whose versions run in their deployments: the seam), ``_router`` (sticky routing of
stateful sequences), ``_messages`` (what crosses besides calls and answers).

A front end: it uses the data plane and the HTTP front end, never the runtime. Ray is imported
where it is used (``pip install 'podium[ray]'``), so this package imports without it.
"""

from ._app import app, build, discover_versions, run
from ._grpc import OIP_SERVICER, add_GRPCInferenceServiceServicer_to_server
from ._options import AppSettings, IngressSettings, ReplicaSettings, deployment_options
from ._replica import ModelReplica

__all__ = [
    "OIP_SERVICER",
    "AppSettings",
    "IngressSettings",
    "ModelReplica",
    "ReplicaSettings",
    "add_GRPCInferenceServiceServicer_to_server",
    "app",
    "build",
    "deployment_options",
    "discover_versions",
    "run",
]
