"""The Serve application: one deployment per model version, and the ingress in front of them.

:func:`app` is what ``serve run podium.ray:app paths=...`` and a Serve config's
``import_path: podium.ray:app`` call (an application builder: Serve passes it the arguments);
:func:`build` makes the application from checked settings; :func:`run` is ``podium ray``: a
local Ray instance (or the cluster at ``address``), Serve's HTTP proxy on ``host:port``, the
application deployed, until a signal.

Only the models' configs are read here (discovery reads ``config.yaml`` and the like, and imports
no model code): each replica imports its own version's code when it starts.
"""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from typing import Any

from ..config import ModelConfig
from ..errors import DefinitionError, model_label
from ..model import discover_all, model_paths, release_all
from ._grpc import OIP_SERVICER
from ._options import (
    INGRESS_NAME,
    AppSettings,
    deployment_options,
    local_cpus,
)
from ._replica import ModelReplica

__all__ = ["app", "build", "discover_versions", "run"]

logger = logging.getLogger("podium.ray")


def app(args: dict[str, Any]) -> Any:
    """The application builder Serve calls (``serve run podium.ray:app paths=examples``);
    its arguments: :meth:`AppSettings.from_args`."""
    return build(AppSettings.from_args(args))


def discover_versions(paths: tuple[str, ...]) -> list[tuple[str, ModelConfig]]:
    """Every model version under ``paths``, with the path of its own model (what its replicas
    build it from: ``model_paths``); ``DefinitionError`` lists every problem found (a bad
    config, a model defined twice, a bad ``ray:`` section)."""
    found: list[tuple[str, ModelConfig]] = []
    problems: list[str] = []
    for given in paths:
        units = model_paths(Path(given))
        if not units:
            problems.append(f"{given}: holds no model (no model.py, no model subdirectories)")
        for unit_path in units:
            sources, unit_problems = discover_all(unit_path)
            problems.extend(unit_problems)
            try:
                found.extend((str(unit_path), source.config) for source in sources)
            finally:  # an archive was extracted to read it: its replicas extract their own
                release_all(owned for source in sources for owned in source.owned)
    seen: dict[tuple[str, str | None], str] = {}
    for unit, config in found:
        key = (config.name, config.version)
        if key in seen:
            label = model_label(config.name, config.version)
            problems.append(f"{label}: defined twice ({seen[key]} and {unit})")
        seen[key] = unit
        try:
            deployment_options(config)
        except DefinitionError as exc:
            problems.extend(exc.problems)
    DefinitionError.check(problems)
    return found


def build(settings: AppSettings, versions: list[tuple[str, ModelConfig]] | None = None) -> Any:
    """The Serve application (``serve.Application``) for ``settings``: a deployment per model
    version (:func:`~podium.ray._options.deployment_options`), each replica running :class:`ModelReplica`, and
    the ingress (``settings.ingress_replicas`` replicas, reserving no CPU: it parses and
    renders; the models compute). ``versions``: what :func:`discover_versions` found under
    ``settings.paths``, where the caller has it already (discovery extracts archives)."""
    from ray import serve

    from ._ingress import Ingress

    if versions is None:
        versions = discover_versions(settings.paths)
    sequences = sorted({c.name for _, c in versions if c.sequence_batching})
    if sequences and settings.ingress_replicas > 1:
        raise ValueError(
            f"ingress_replicas is {settings.ingress_replicas}, and {', '.join(sequences)} "
            "keep(s) stateful sequences, whose routing lives in the one ingress (docs/ray.md): "
            "serve them with one ingress replica"
        )
    replica: Any = serve.deployment(ModelReplica)
    models = []
    for unit, config in versions:
        options = deployment_options(config)
        bound = replica.options(**options).bind(unit, config.name, config.version, settings.replica)
        models.append((config, bound))
    ingress: Any = serve.deployment(serve.ingress()(Ingress))
    ingress = ingress.options(
        name=INGRESS_NAME,
        num_replicas=settings.ingress_replicas,
        ray_actor_options={"num_cpus": 0},
    )
    return ingress.bind(models, settings.ingress)


def needed_cpus(versions: list[tuple[str, ModelConfig]]) -> float:
    """The CPUs the replicas of ``versions`` reserve at start (Serve's default: one each)."""
    total = 0.0
    for _, config in versions:
        options = deployment_options(config)
        replicas = options.get("num_replicas")
        if replicas is None:
            scaling = options.get("autoscaling_config", {})
            replicas = scaling.get("initial_replicas", scaling.get("min_replicas", 1)) or 1
        total += float(options["ray_actor_options"].get("num_cpus", 1)) * int(replicas)
    return total


def run(
    settings: AppSettings,
    *,
    address: str | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    grpc_port: int | None = None,
    name: str = "podium",
) -> int:
    """Deploy the application and serve it until SIGINT or SIGTERM (``podium ray``): on the
    Ray cluster at ``address``, else on a local Ray instance started here (with as many
    logical CPUs as the replicas reserve, at least the machine's cores), which stops with it.
    Serve's HTTP proxy listens on ``host:port``; with ``grpc_port``, Serve's gRPC proxy serves
    OIP's ``GRPCInferenceService`` there too (:data:`~podium.ray._grpc.OIP_SERVICER`). Returns
    the exit status."""
    import ray
    from ray import serve

    local = address is None
    versions = discover_versions(settings.paths)
    application = build(settings, versions)  # every problem is found before anything starts
    if local:
        cpus = local_cpus(needed_cpus(versions))
        logger.info("starting a local Ray instance with %d logical CPUs", cpus)
        ray.init(num_cpus=cpus, include_dashboard=False)
    else:
        ray.init(address=address)
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in _SIGNALS}
    try:
        grpc = (
            {"port": grpc_port, "grpc_servicer_functions": [OIP_SERVICER]}
            if grpc_port is not None
            else None
        )
        serve.start(http_options={"host": host, "port": port}, grpc_options=grpc)
        serve.run(application, name=name, route_prefix="/")
        where = f"http://{host}:{port}" + (f", gRPC port {grpc_port}" if grpc_port else "")
        print(f"podium: serving on Ray Serve at {where} (application '{name}')", flush=True)
        stop.wait()
        logger.info("stopping: deleting application '%s'", name)
        serve.delete(name)
        return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if local:
            serve.shutdown()
        ray.shutdown()


_SIGNALS = (signal.SIGINT, signal.SIGTERM)
