"""The ``podium`` command: ``serve``, ``check``, ``archive`` and ``ray``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import click

from . import logs
from .config import ServerConfig, load_yaml
from .errors import DefinitionError

__all__ = ["main"]

_PORTS = {
    "http_port": "--http-port",
    "management_port": "--management-port",
    "metrics_port": "--metrics-port",
    "grpc_port": "--grpc-port",
    "grpc_management_port": "--grpc-management-port",
}


def _merge(config_file: Path | None, flags: dict[str, Any]) -> ServerConfig:
    values: dict[str, Any] = {}
    if config_file is not None:
        try:
            data = load_yaml(config_file)
        except DefinitionError as exc:
            raise click.UsageError(exc.message) from None
        data = {str(k).replace("-", "_"): v for k, v in data.items()}
        unknown = sorted(set(data) - ServerConfig.keys())
        if unknown:
            allowed = ", ".join(sorted(k for k in ServerConfig.keys()))
            raise click.UsageError(
                f"{config_file}: unknown key(s) {', '.join(unknown)} (allowed: {allowed})"
            )
        if "secrets_dir" in data and data["secrets_dir"] is not None:
            data["secrets_dir"] = Path(data["secrets_dir"])
        if "models" in data:
            models = data["models"]
            if isinstance(models, str):
                models = [models]
            if not isinstance(models, list):
                raise click.UsageError(f"{config_file}: 'models' must be a list of paths")
            base = config_file.parent
            data["models"] = tuple(str(base / str(m)) for m in models)
        values.update(data)
    values.update({k: v for k, v in flags.items() if v is not None})
    try:
        return ServerConfig(**values)
    except (TypeError, ValueError) as exc:
        raise click.UsageError(str(exc)) from None


@click.group()
@click.version_option(package_name="podium")
def main() -> None:
    """Podium: serve Python models over OIP v2, TorchServe and Truss-style APIs."""


@main.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="YAML file with any of these settings (keys as the flags, '-' or '_'); flags win.",
)
@click.option("--host", default=None, help="Address for the inference listeners [0.0.0.0].")
@click.option(
    "--http-port", type=int, default=None, help="HTTP inference port; 0 picks one [8080]."
)
@click.option(
    "--management-host",
    default=None,
    help="Address for the management listeners, REST and gRPC [127.0.0.1].",
)
@click.option("--management-port", type=int, default=None, help="Management API port [8081].")
@click.option(
    "--metrics-host",
    default=None,
    help="Address for the metrics listener (GET /metrics, Prometheus) [127.0.0.1].",
)
@click.option("--metrics-port", type=int, default=None, help="Prometheus metrics port [8082].")
@click.option(
    "--metrics/--no-metrics",
    default=None,
    help="Serve GET /metrics on --metrics-host:--metrics-port; --no-metrics: no metrics "
    "listener (the statistics extension still counts) [on].",
)
@click.option("--grpc-port", type=int, default=None, help="gRPC inference port [7070].")
@click.option("--grpc-management-port", type=int, default=None, help="gRPC management port [7071].")
@click.option(
    "--grpc-max-message-size",
    type=int,
    default=None,
    help="Largest gRPC message in bytes, received or sent [64 MiB].",
)
@click.option(
    "--grpc-stream-format",
    type=click.Choice(["triton", "mlserver"]),
    default=None,
    help="Framing of OIP ModelStreamInfer responses: Triton's ModelStreamInferResponse with "
    "in-band errors (tritonclient, perf_analyzer), or MLServer's bare ModelInferResponse "
    "(MLServer's and KServe's stubs) [triton].",
)
@click.option(
    "--grpc-output-contents",
    type=click.Choice(["request", "raw"]),
    default=None,
    help="How OIP gRPC answers carry tensors: raw_output_contents when the request used "
    "raw_input_contents, else typed contents (MLServer, KServe); or always raw, as Triton "
    "[request].",
)
@click.option(
    "--sequence-header",
    default=None,
    help="Header naming a stateful sequence; NAME_start / NAME_end flag its first and last "
    "request [ts_request_sequence_id].",
)
@click.option(
    "--grpc-threads",
    type=int,
    default=None,
    help="Threads of the gRPC inference server, for calls not relayed through grpc's polling "
    "thread (reflection streams; every call if grpcio's internals differ). 0: serve gRPC with "
    "grpc.aio on the event loop instead [128].",
)
@click.option(
    "--grpc-max-concurrent-streams",
    type=int,
    default=None,
    help="Most calls at once on one gRPC connection (HTTP/2 SETTINGS); a client keeps more "
    "waiting until one ends [100].",
)
@click.option(
    "--grpc-max-connection-idle",
    type=float,
    default=None,
    help="Seconds a gRPC connection may stay without calls before it is closed; 0: never [300].",
)
@click.option(
    "--grpc-max-connection-age",
    type=float,
    default=None,
    help="Seconds after which a gRPC connection is told to go (GOAWAY, ±10%%): its client makes "
    "new calls on a new connection; 0: never [1800].",
)
@click.option(
    "--grpc-max-connection-age-grace",
    type=float,
    default=None,
    help="Seconds calls in flight may go on after --grpc-max-connection-age before they are "
    "cut [unlimited].",
)
@click.option(
    "--grpc-keepalive-time",
    type=float,
    default=None,
    help="Seconds a gRPC connection may stay silent before the server pings it; 0: never [60].",
)
@click.option(
    "--grpc-keepalive-timeout",
    type=float,
    default=None,
    help="Seconds the server waits for the answer to its ping before it closes the "
    "connection [20].",
)
@click.option(
    "--grpc-min-ping-interval",
    type=float,
    default=None,
    help="Least seconds between a client's pings while no data flows; a client that pings more "
    "often three times is sent GOAWAY (too_many_pings) and disconnected [5].",
)
@click.option(
    "--max-request-size", type=int, default=None, help="Largest request body in bytes [64 MiB]."
)
@click.option(
    "--max-url-size",
    type=int,
    default=None,
    help="Longest request target (path and query) in bytes; longer: 414 [8 KiB].",
)
@click.option(
    "--max-header-size",
    type=int,
    default=None,
    help="Largest request head (request line and header fields) in bytes; larger: 431 [64 KiB].",
)
@click.option(
    "--max-headers",
    type=int,
    default=None,
    help="Most header fields in a request; more: 431 [100].",
)
@click.option(
    "--header-timeout",
    type=float,
    default=None,
    help="Seconds a connection has to send a complete request head, from its accept or its "
    "next request's first byte; later: 408 and closed (gRPC: the HTTP/2 preface and SETTINGS, "
    "from its accept) [10].",
)
@click.option(
    "--keep-alive-timeout",
    type=float,
    default=None,
    help="Seconds an HTTP connection may stay idle between requests [30].",
)
@click.option(
    "--body-timeout",
    type=float,
    default=None,
    help="Seconds over which a request body's rate is measured: a body that brings less than "
    "--min-body-rate in any such period gets 408 and is closed [10].",
)
@click.option(
    "--min-body-rate",
    type=int,
    default=None,
    help="Least average rate of a request body, bytes/s; 0: only a body that stalls for "
    "--body-timeout is closed [1024].",
)
@click.option(
    "--max-connections",
    type=int,
    default=None,
    help="Most connections served at once on each listener; more are answered 503 (HTTP) or "
    "closed (gRPC) [1000, fewer if the open-files limit is low].",
)
@click.option(
    "--secrets-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Directory of secret files (one file per secret).",
)
@click.option("--threads", type=int, default=None, help="Threads for sync model code [64].")
@click.option(
    "--model-store",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Directory where registration finds model files by name and saves downloads.",
)
@click.option(
    "--allowed-urls",
    multiple=True,
    default=None,
    callback=lambda ctx, param, value: value or None,  # absent: leave --config's value
    help="Regular expression a remote registration url must match in full (repeatable) "
    "[none: remote urls are refused].",
)
@click.option(
    "--download-timeout",
    type=float,
    default=None,
    help="Seconds a registration's download may take in all; slower: refused [300].",
)
@click.option(
    "--max-archive-size",
    type=int,
    default=None,
    help="Bytes a TorchServe archive (.mar, .tar.gz) may expand to; more: refused [4 GiB].",
)
@click.option(
    "--max-archive-ratio",
    type=float,
    default=None,
    help="How many times its own size an archive may expand to, beyond 64 MiB; more: "
    "refused as a zip bomb [100].",
)
@click.option(
    "--allow-any-local-path",
    is_flag=True,
    default=None,
    help="Let registration read a local url anywhere on disk, not only under --model-store "
    "and the model paths given at start [off].",
)
@click.option(
    "--max-download-size", type=int, default=None, help="Largest download in bytes [1 GiB]."
)
@click.option(
    "--auth/--no-auth",
    " /--disable-token-auth",
    default=None,
    help="Token authorization, 'Authorization: Bearer <key>' with the keys of --key-file: "
    "--auth on every listener, --no-auth (or TorchServe's --disable-token-auth) on none "
    "[the management API only].",
)
@click.option(
    "--key-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Where the keys are written (owner-only) [./key_file.json].",
)
@click.option(
    "--management-allowed-hosts",
    multiple=True,
    default=None,
    callback=lambda ctx, param, value: value or None,  # absent: leave --config's value
    help="A host name the management API answers to besides IP addresses and localhost "
    "(repeatable); other Host headers get 421, which stops DNS rebinding [none].",
)
@click.option(
    "--management-allowed-origins",
    multiple=True,
    default=None,
    callback=lambda ctx, param, value: value or None,
    help="A web origin (scheme://host[:port]) whose pages may call the management API "
    "(repeatable); requests from other pages get 403 [none].",
)
@click.option(
    "--allow-open-management",
    is_flag=True,
    default=None,
    help="Start even though the management API listens on a non-loopback address without "
    "token authorization: only where a firewall or proxy already guards its ports.",
)
@click.option(
    "--model-control",
    type=click.Choice(["management", "inference"]),
    default=None,
    help="Which listeners may load and unload models: the management listeners only, or the "
    "inference listeners too (OIP's repository load/unload, open to every inference client: "
    "use with --auth) [management].",
)
@click.option(
    "--shared-memory",
    type=click.Choice(["off", "system"]),
    default=None,
    help="Triton's system shared memory extension: 'system' lets clients on this host register "
    "regions of POSIX shared memory objects (/dev/shm) and pass tensors through them; any "
    "client of the inference listeners can then map any such object the server's user can "
    "open (see --shm-key-prefix, --auth) [off].",
)
@click.option(
    "--shm-key-prefix",
    default=None,
    help="Map only shared memory objects whose names (after the leading '/') start with this "
    "[any].",
)
@click.option(
    "--max-shm-regions",
    type=int,
    default=None,
    help="Most system shared memory regions registered at once [64].",
)
@click.option(
    "--max-shm-size",
    type=int,
    default=None,
    help="Most bytes of system shared memory mapped at once, all regions together [16 GiB].",
)
@click.option(
    "--token-expiration",
    type=float,
    default=None,
    help="Minutes the management and inference keys last; 0: no expiry [0].",
)
@click.option(
    "--graceful-timeout",
    type=float,
    default=None,
    help="Seconds calls in flight and open streams get to finish after SIGTERM/SIGINT; those "
    "still running are then cut with 'server shutting down' (a second signal: at once) [30].",
)
@click.option(
    "--shutdown-delay",
    type=float,
    default=None,
    help="Seconds between readiness turning false on SIGTERM/SIGINT and new connections being "
    "refused, so that load balancers stop sending first [5 in a Kubernetes pod, else 0].",
)
@click.option(
    "--install-model-requirements",
    is_flag=True,
    default=None,
    help="Install the requirements a model declares (a truss's requirements, a TorchServe "
    "archive's requirements file) into an environment of its own, cached in $PODIUM_ENVS "
    "[~/.cache/podium/envs], and run it in worker processes from there [off].",
)
@click.option(
    "--keep-running",
    is_flag=True,
    default=None,
    help="Serving one truss whose model cannot load: stay up (not ready, the reason in readiness "
    "and the log) instead of exiting 1 as Truss's server does [off].",
)
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default=None)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default=None,
    help="Every log line as text, or as one JSON object per line for log shippers [text].",
)
@click.option(
    "--access-log/--no-access-log",
    default=None,
    help="One line per request (logger podium.access, at info): protocol, route or RPC, model, "
    "version, status, duration, bytes in and out, request id, peer [on].",
)
@click.option(
    "--otel",
    is_flag=True,
    default=None,
    help="OpenTelemetry spans for every request, exported over OTLP as the standard OTEL_* "
    "variables say; needs podium[otel] [off; on when OTEL_TRACES_EXPORTER or an "
    "OTEL_EXPORTER_OTLP_*ENDPOINT is set].",
)
def serve(paths: tuple[Path, ...], config_file: Path | None, **flags: Any) -> None:
    """Serve the models at PATHS (model files, model directories or model repositories)."""
    config = _merge(config_file, flags)
    all_paths = [*(Path(p) for p in config.models), *paths]
    if not all_paths and config.model_store is None:  # with a store, models come by the API
        raise click.UsageError(
            "no models given: pass model paths, set 'models' in --config, or give --model-store"
        )
    # Bounded: no request can make the server write megabytes to its log (docs/security.md).
    logs.configure(config.log_level.upper(), config.log_format)
    # Worker processes are started by fork and exec (uvloop's spawn forks), and nothing runs
    # gRPC in a forked child: grpc's fork handlers would only log "Other threads are currently
    # calling into gRPC, skipping fork() handlers" for each one. Read when grpc starts.
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")
    from .server import Podium, TracingUnavailable, UnsafeExposure

    podium = Podium(config, all_paths)

    async def run() -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, podium.signal, sig)
        starting = asyncio.ensure_future(podium.start())
        signalled = asyncio.ensure_future(podium.signalled())
        await asyncio.wait([starting, signalled], return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():  # told to stop while starting: stop starting
            starting.cancel()
        try:
            await starting
        except asyncio.CancelledError:
            logging.getLogger("podium").info("stopped while starting")
        except DefinitionError as exc:
            click.echo("podium: cannot serve; these models cannot be loaded:", err=True)
            for problem in exc.problems:
                click.echo(f"  - {problem}", err=True)
            await podium.stop()
            return 1
        except OSError as exc:
            click.echo(f"podium: {exc.strerror or exc}", err=True)
            await podium.stop()
            return 1
        except UnsafeExposure as exc:
            click.echo(f"podium: refusing to start: {exc}", err=True)
            await podium.stop()
            return 1
        except TracingUnavailable as exc:
            click.echo(f"podium: cannot trace: {exc}", err=True)
            await podium.stop()
            return 1
        code = await podium.shutdown(await signalled)
        if not await _leftovers_end():
            _exit(code, "tasks of model code ignore their cancellation")
        return code

    code = _run(run())
    stuck = _stuck_threads()
    if stuck:
        _exit(code, f"{len(stuck)} thread(s) still run model code ({', '.join(stuck)})")
    sys.exit(code)


#: Seconds the tasks and threads left after a shutdown get to end before the process exits
#: without them.
LEFTOVER_GRACE = 1.0


async def _leftovers_end() -> bool:
    """Cancel the tasks still running (there should be none); whether they all ended within
    LEFTOVER_GRACE (a model's coroutine may swallow its cancellation: then the process exits
    without waiting for it, rather than hanging where asyncio waits for every task)."""
    tasks = asyncio.all_tasks() - {asyncio.current_task()}
    for task in tasks:
        task.cancel()
    if not tasks:
        return True
    _, pending = await asyncio.wait(tasks, timeout=LEFTOVER_GRACE)
    return not pending


def _stuck_threads() -> list[str]:
    """The threads still alive after LEFTOVER_GRACE (sync model code that never returns):
    the interpreter would wait for them forever at exit."""
    deadline = time.monotonic() + LEFTOVER_GRACE
    alive = []
    for thread in threading.enumerate():
        if thread is threading.main_thread() or thread.daemon:
            continue
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            alive.append(thread.name)
    return alive


def _exit(code: int, why: str) -> None:
    """Exit with ``code`` without waiting for what is left (``why``), logs flushed."""
    logging.getLogger("podium").warning("exiting without waiting: %s", why)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _run(coro: Any) -> int:
    try:
        import uvloop
    except ImportError:  # uvloop is optional (not on Windows)
        return asyncio.run(coro)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
def check(paths: tuple[Path, ...]) -> None:
    """Check the model definitions at PATHS without serving; exit 1 on any error."""
    from .model import Contract, discover, truss
    from .runtime import check_paths

    problems = check_paths(list(paths))
    if problems:
        for problem in problems:
            click.echo(f"error: {problem}", err=True)
        click.echo(f"{len(problems)} problem(s) found", err=True)
        sys.exit(1)
    count = 0
    for path in paths:
        for source in discover(path):
            kind = " (a truss)" if source.contract is Contract.TRUSS else ""
            click.echo(f"ok: {source.label}{kind}")
            if source.contract is Contract.TRUSS:
                for note in truss.notes(source):
                    click.echo(f"note: {note}")
            count += 1
    click.echo(f"{count} model(s) checked, no problems")


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
def install(paths: tuple[Path, ...]) -> None:
    """Install the requirements each model at PATHS declares into an environment of its own
    (cached in $PODIUM_ENVS, default ~/.cache/podium/envs), for `podium serve
    --install-model-requirements`; exit 1 if any install fails."""
    from .model import discover_all
    from .runtime import in_environments

    problems: list[str] = []
    for path in paths:
        found, found_problems = discover_all(path)
        problems.extend(found_problems)
        for source in in_environments(found, problems):
            if source.python is None:
                click.echo(f"ok: {source.label} declares no requirements")
            else:
                where = source.python.parent.parent
                click.echo(f"ok: {source.label}: {', '.join(source.requirements())} in {where}")
    if problems:
        for problem in problems:
            click.echo(f"error: {problem}", err=True)
        sys.exit(1)


@main.command()
@click.option("--model-name", required=True, help="The model's name; the archive is NAME.mar.")
@click.option(
    "--handler",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The handler file (TorchServe's handler contract).",
)
@click.option("--version", "version", default=None, help="The model's version (modelVersion).")
@click.option(
    "--serialized-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="The weights file (serializedFile), if any.",
)
@click.option(
    "--model-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="The file with the model's architecture (modelFile), if any.",
)
@click.option(
    "--extra-files",
    default=None,
    help="Comma-separated files or directories to add (at the archive's root).",
)
@click.option(
    "--config-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="The model-config.yaml (configFile).",
)
@click.option(
    "--requirements-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="A requirements.txt to carry along (Podium does not install it).",
)
@click.option(
    "--export-path",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
    help="Where the archive is written.",
)
@click.option(
    "--archive-format",
    type=click.Choice(["default", "tgz", "no-archive"]),
    default="default",
    show_default=True,
    help="default: NAME.mar (zip); tgz: NAME.tar.gz; no-archive: a directory NAME/.",
)
@click.option("-f", "--force", is_flag=True, help="Overwrite an existing archive.")
def archive(
    model_name: str,
    handler: Path,
    version: str | None,
    serialized_file: Path | None,
    model_file: Path | None,
    extra_files: str | None,
    config_file: Path | None,
    requirements_file: Path | None,
    export_path: Path,
    archive_format: str,
    force: bool,
) -> None:
    """Build a TorchServe model archive (.mar), as torch-model-archiver does."""
    from .model.torchserve import archive_model

    extras = [Path(p.strip()) for p in (extra_files or "").split(",") if p.strip()]
    try:
        dest = archive_model(
            model_name=model_name,
            handler=handler,
            export_path=export_path,
            version=version,
            serialized_file=serialized_file,
            model_file=model_file,
            extra_files=extras,
            config_file=config_file,
            requirements_file=requirements_file,
            archive_format=archive_format,
            force=force,
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    click.echo(f"wrote {dest}")


@main.command("ray")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="podium serve's YAML config file (its models and the settings that apply on Ray).",
)
@click.option(
    "--address",
    default=None,
    help="The Ray cluster to deploy to (e.g. 'auto', 'ray://head:10001'); none: start a local "
    "Ray instance that stops with this command.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Serve's HTTP proxy address.")
@click.option("--port", type=int, default=8000, show_default=True, help="Serve's HTTP proxy port.")
@click.option(
    "--grpc-port",
    type=int,
    default=None,
    help="Serve's gRPC proxy port, serving OIP's GRPCInferenceService [none: no gRPC].",
)
@click.option("--name", default="podium", show_default=True, help="The Serve application's name.")
@click.option(
    "--ingress-replicas",
    type=int,
    default=None,
    help="Replicas of the ingress (HTTP parsing and rendering) [1].",
)
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default=None)
def ray_command(
    paths: tuple[Path, ...],
    config_file: Path | None,
    address: str | None,
    host: str,
    port: int,
    grpc_port: int | None,
    name: str,
    ingress_replicas: int | None,
    log_level: str | None,
) -> None:
    """Serve the models at PATHS on Ray Serve: a deployment per model version, Podium's HTTP
    protocols through Serve's HTTP proxy (docs/ray.md). Needs Ray: pip install 'podium[ray]'."""
    try:
        import ray  # noqa: F401
    except ImportError:
        raise click.UsageError("podium ray needs Ray: pip install 'podium[ray]'") from None
    from .ray import AppSettings, run

    args: dict[str, Any] = {"paths": [str(p) for p in paths]}
    for key, value in (
        ("config", config_file),
        ("ingress_replicas", ingress_replicas),
        ("log_level", log_level),
    ):
        if value is not None:
            args[key] = str(value) if isinstance(value, Path) else value
    try:
        settings = AppSettings.from_args(args)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    logs.configure(settings.replica.log_level.upper())
    try:
        code = run(settings, address=address, host=host, port=port, grpc_port=grpc_port, name=name)
    except DefinitionError as exc:
        click.echo("podium: cannot serve; these models cannot be loaded:", err=True)
        for problem in exc.problems:
            click.echo(f"  - {problem}", err=True)
        code = 1
    sys.exit(code)
