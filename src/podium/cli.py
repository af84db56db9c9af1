"""The ``podium`` command: ``serve``, ``check``, ``install``, ``archive``, ``ray``, and the
start commands of other servers (``torchserve``, ``mlserver start``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from . import logs
from ._server_fields import PRESETS
from .config import SETTINGS, Kind, ServerConfig, Setting, read_config_file
from .errors import DefinitionError

__all__ = ["main"]

_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)  # a file that must exist


def _deprecated(values: dict[str, Any], name: str) -> None:
    """Take ``grpc_threads`` out of ``values``, saying that it is deprecated: gRPC calls hold no
    threads any more (issue 25). Its 0 (grpc.aio) is read as ``grpc_aio``."""
    threads = values.pop("grpc_threads", None)
    if threads is None:
        return
    click.echo(
        f"podium: {name} is deprecated and has no effect: gRPC calls hold no threads (relayed, "
        "or grpc.aio where the relay's start-up check fails); 0 is read as --grpc-aio",
        err=True,
    )
    if threads == 0 and values.get("grpc_aio") is None:
        values["grpc_aio"] = True


def _merge(
    config_file: Path | None, flags: dict[str, Any], base: dict[str, Any] | None = None
) -> ServerConfig:
    """``--triton``'s preset (a flag, or ``triton: true`` in ``config_file``), then ``base``
    (TorchServe's config.properties, MLServer's settings.json), then ``config_file``, then
    ``flags``."""
    flags = dict(flags)
    values: dict[str, Any] = {}
    data: dict[str, Any] = {}
    if config_file is not None:
        try:
            data = read_config_file(config_file)
        except DefinitionError as exc:
            raise click.UsageError(exc.message) from None
        _deprecated(data, f"{config_file}: grpc_threads")
    triton = flags.pop("triton", None) or data.pop("triton", None)
    if triton:
        values.update(PRESETS["triton"])
    values.update(base or {})
    values.update(data)
    _deprecated(flags, "--grpc-threads")
    values.update({k: v for k, v in flags.items() if v is not None})
    try:
        return ServerConfig(**values)
    except (TypeError, ValueError) as exc:
        raise click.UsageError(str(exc)) from None


def _absent_is_none(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    return value or None  # a repeatable flag not given: leave --config's value


def _option(setting: Setting) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``setting``'s flag, as the table says: its name, type, help and default shown; every
    flag's default is None, so that one not given leaves the config file's value."""
    flag = f"--{setting.name}"
    decls = [f"{flag}/--no-{setting.name}" if setting.negatable else flag]
    if setting.off:
        decls.append(" /" + "/".join(setting.off))
    shown = setting.shown_default()
    extra: dict[str, Any] = {
        "default": None,
        "help": f"{setting.help} [{shown}]." if shown else f"{setting.help}.",
    }
    match setting.kind:
        case Kind.INTEGER:
            extra["type"] = int
        case Kind.NUMBER:
            extra["type"] = float
        case Kind.CHOICE:
            extra["type"] = click.Choice(setting.choices)
        case Kind.PATH:
            extra["type"] = click.Path(
                file_okay=setting.file, dir_okay=not setting.file, path_type=Path
            )
        case Kind.LIST:
            extra.update(multiple=True, callback=_absent_is_none)
        case Kind.FLAG if not setting.negatable:
            extra["is_flag"] = True
    return click.option(*decls, setting.key, **extra)


def _settings_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``command`` with a flag for each of the server's settings, in the table's order."""
    for setting in reversed([s for s in SETTINGS.values() if s.flag]):
        command = _option(setting)(command)
    return command


@click.group()
@click.version_option(package_name="podium")
def main() -> None:
    """Podium: serve Python models over OIP v2, TorchServe and Truss-style APIs."""


@main.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "--config",
    "config_file",
    type=_FILE,
    help="YAML file with any of these settings (keys as the flags, '-' or '_'); flags win.",
)
@click.option(
    "--ts-config",
    type=_FILE,
    help="TorchServe's config.properties: its addresses, model store, load_models, models={...} "
    "and defaults, read as TorchServe reads them; --config and flags win over it.",
)
@click.option(
    "--settings",
    "settings_file",
    type=_FILE,
    help="MLServer's settings.json (default: the one in the one folder given), with MLSERVER_* "
    "variables under it, read as MLServer reads them; --config and flags win over it.",
)
@click.option(
    "--triton",
    is_flag=True,
    default=None,
    help="Triton's behaviour: its ports (HTTP 8000, gRPC 8001, metrics 8002), model control on "
    "the inference listeners, system shared memory, raw gRPC answers; other flags win.",
)
@_settings_options
@click.option("--grpc-threads", type=int, default=None, hidden=True)  # deprecated: _deprecated
def serve(
    paths: tuple[Path, ...],
    config_file: Path | None,
    ts_config: Path | None,
    settings_file: Path | None,
    **flags: Any,
) -> None:
    """Serve the models at PATHS (model files, model directories or model repositories)."""
    _serve(list(paths), config_file, ts_config, flags, settings_file=settings_file)


@main.group("mlserver")
def mlserver_command() -> None:
    """MLServer's command line: `podium mlserver start FOLDER`."""


@mlserver_command.command("start")
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
@_settings_options
def mlserver_start(folder: Path, **flags: Any) -> None:
    """Serve FOLDER as `mlserver start FOLDER` does: its settings.json and MLSERVER_* variables,
    MLServer's ports (HTTP 8080, gRPC 8081, metrics 8082; management 8085); flags win."""
    _serve([folder], None, None, flags, mlserver_start=True)


def _serve(
    paths: list[Path],
    config_file: Path | None,
    ts_config: Path | None,
    flags: dict[str, Any],
    *,
    models: list[str] | None = None,
    settings_file: Path | None = None,
    mlserver_start: bool = False,
) -> None:
    """Serve: the settings of ``ts_config`` (config.properties) and of MLServer's
    ``settings_file`` (or the one beside the models; ``mlserver_start``: as ``mlserver start``
    reads them), then ``config_file``, then ``flags``; ``models``: TorchServe's ``--models``
    entries (``name=file.mar``, ...), served with its ``load_models``."""
    from ._mlserver_start import server_settings
    from ._properties import PropertiesError
    from ._torchserve_start import read_ts_config
    from .runtime import ModelSettings

    try:
        start = read_ts_config(ts_config)
    except PropertiesError as exc:
        raise click.UsageError(str(exc)) from None
    mls = server_settings(settings_file, paths, start=mlserver_start)
    alone = () if mls.model is None else (mls.model,)
    if alone:  # mlserver start FOLDER: no model-settings.json, the variables' model
        paths = []
    config = _merge(config_file, flags, {**start.settings, **mls.settings})
    all_paths = [*(Path(p) for p in config.serving.paths), *paths]
    names: dict[Path, str] = {}  # a path's model served under another name
    defaults = {**config.logs.torchserve_fields(), **mls.defaults, **start.defaults}  # metrics
    for entries, once in ((models or [], False), (start.load_models, True)):
        for entry in entries:
            found, name = _store_entry(entry, config.registration.model_store)
            # one archive in --models and in models={marName} is one model, as in TorchServe
            if found is None or (once and found.resolve() in {p.resolve() for p in all_paths}):
                continue
            all_paths.append(found)
            if name is not None:
                names[found] = name
    settings = ModelSettings(names, start.models, defaults, alone)
    if not all_paths and not alone and config.registration.model_store is None:  # by the API
        raise click.UsageError(
            "no models given: pass model paths, set 'models' in --config, or give --model-store"
        )
    # Bounded: no request can make the server write megabytes to its log (docs/security.md).
    logs.configure(config.logs.level.upper(), config.logs.format)
    # Worker processes are started by fork and exec (uvloop's spawn forks), and nothing runs
    # gRPC in a forked child: grpc's fork handlers would only log "Other threads are currently
    # calling into gRPC, skipping fork() handlers" for each one. Read when grpc starts.
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")
    from .server import (
        Podium,
        TracingUnavailable,
        UnsafeExposure,
        exit_now,
        leftovers_end,
        run_loop,
        stuck_threads,
    )

    podium = Podium(config, all_paths, model_settings=settings)
    for note in [*start.notes, *mls.notes]:
        logging.getLogger("podium").warning("%s", note)
    if mls.source:
        logging.getLogger("podium").info("MLServer's settings read from %s", mls.source)

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
        except (DefinitionError, OSError, UnsafeExposure, TracingUnavailable) as exc:
            _cannot_start(exc)
            await podium.stop()
            return 1
        code = await podium.shutdown(await signalled)
        if not await leftovers_end():
            exit_now(code, "tasks of model code ignore their cancellation")
        return code

    code = run_loop(run())
    stuck = stuck_threads()
    if stuck:
        exit_now(code, f"{len(stuck)} thread(s) still run model code ({', '.join(stuck)})")
    sys.exit(code)


def _cannot_start(exc: Exception) -> None:
    """Say on stderr why the server cannot start (each problem of models that cannot load)."""
    from .server import UnsafeExposure

    if isinstance(exc, DefinitionError):
        problems = "".join(f"\n  - {problem}" for problem in exc.problems)
        click.echo(f"podium: cannot serve; these models cannot be loaded:{problems}", err=True)
    elif isinstance(exc, OSError):
        click.echo(f"podium: {exc.strerror or exc}", err=True)
    else:  # UnsafeExposure, TracingUnavailable
        what = "refusing to start" if isinstance(exc, UnsafeExposure) else "cannot trace"
        click.echo(f"podium: {what}: {exc}", err=True)


def _store_entry(entry: str, store: Path | None) -> tuple[Path | None, str | None]:
    """A ``load_models`` / ``--models`` entry (``all``, ``name=file.mar``, ``file.mar``, a bare
    name) as the path to serve and the name to serve it under (None: its own). ``all``: the
    store itself, whose every archive is served; ``standalone``: nothing."""
    name, _, target = entry.rpartition("=")
    if entry in ("standalone", ""):
        return None, None
    if entry == "all":
        if store is None:
            raise click.UsageError("--models all / load_models=all needs a model store")
        return store, None
    from .model.torchserve import ARCHIVE_SUFFIXES

    path = Path(target)
    if not path.is_absolute() and store is not None and not path.exists():
        candidates = [store / target, *(store / f"{target}{end}" for end in ARCHIVE_SUFFIXES)]
        path = next((c for c in candidates if c.exists()), store / target)
    return path, name or None


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
    from .runtime import in_declared_environments, in_environments

    problems: list[str] = []
    for path in paths:
        found, found_problems = discover_all(path)
        problems.extend(found_problems)
        found = in_declared_environments(found, problems)  # environment tarballs, unpacked
        for source in in_environments(found, problems):
            if source.python is None:
                click.echo(f"ok: {source.label} declares no requirements")
            else:
                what = ", ".join(source.requirements()) or "its own environment"
                click.echo(f"ok: {source.label}: {what} in {source.python.parent.parent}")
    if problems:
        for problem in problems:
            click.echo(f"error: {problem}", err=True)
        sys.exit(1)


#: Where ``podium torchserve --start`` writes its process id, and ``--stop`` reads it (as
#: TorchServe's ``/tmp/.model_server.pid``, under its own name).
PID_FILE = Path(os.environ.get("TMPDIR", "/tmp")) / ".podium_model_server.pid"


@main.command("torchserve", context_settings={"ignore_unknown_options": False})
@click.option("--start", is_flag=True, help="Start the server (in the foreground; Ctrl-C or "
              "`podium torchserve --stop` stops it).")  # fmt: skip
@click.option("--stop", is_flag=True, help="Stop the server `--start` started here.")
@click.option("--foreground", is_flag=True, help="Run in the foreground (as --start does).")
@_option(SETTINGS["model_store"])
@click.option("--models", "models", multiple=True, help="name=file.mar, file.mar, a bare name "
              "in the model store, or all; several after one --models, as TorchServe.")  # fmt: skip
@click.argument("more_models", nargs=-1, metavar="")
@click.option("--ts-config", type=_FILE)
@click.option("--ncs", "--no-config-snapshots", "ncs", is_flag=True,
              help="Accepted: Podium takes no config snapshots.")  # fmt: skip
@_option(SETTINGS["auth"])
@click.option("--enable-model-api", is_flag=True,
              help="Accepted: Podium's management API registers models with its key.")  # fmt: skip
@click.option("--log-config", type=click.Path(path_type=Path), default=None,
              help="Not read: Podium logs with --log-level / --log-format.")  # fmt: skip
@click.option("--workflow-store", type=click.Path(path_type=Path), default=None,
              help="Not read: workflows (.war) are not served (docs/migrating.md, Workflows).")  # fmt: skip
def torchserve_command(
    start: bool,
    stop: bool,
    foreground: bool,
    model_store: Path | None,
    models: tuple[str, ...],
    ts_config: Path | None,
    ncs: bool,
    auth: bool | None,
    enable_model_api: bool,
    log_config: Path | None,
    workflow_store: Path | None,
    more_models: tuple[str, ...],
) -> None:
    """TorchServe's start command, unchanged: `podium torchserve --start --ncs --model-store
    model_store --models mnist=mnist.mar --ts-config config.properties`."""
    if stop:
        sys.exit(_stop_started())
    if not (start or foreground):
        raise click.UsageError("say --start (or --foreground) to serve, or --stop")
    if more_models and not models:  # TorchServe's --models takes several: `--models a b`
        raise click.UsageError("name the models after --models (--models a=a.mar b=b.mar)")
    models += more_models
    if log_config is not None:
        click.echo(
            f"podium: --log-config {log_config} is not read (Podium's own logging)", err=True
        )
    if workflow_store is not None:
        click.echo(f"podium: --workflow-store {workflow_store} is not read: TorchServe's "
                   "workflows (.war, /workflows, /wfpredict) are not served (docs/migrating.md)",
                   err=True)  # fmt: skip
    flags = {"model_store": model_store, "auth": auth}
    PID_FILE.write_text(str(os.getpid()), encoding="utf-8")
    try:
        entries = [one.strip() for entry in models for one in entry.split(",")]
        _serve([], None, ts_config, flags, models=entries)
    finally:
        with contextlib.suppress(OSError):
            if PID_FILE.read_text(encoding="utf-8").strip() == str(os.getpid()):
                PID_FILE.unlink()


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (one that exited, not yet reaped by its parent, does
    not: Linux's /proc says so)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def _stop_started() -> int:
    """``torchserve --stop``: SIGTERM to the server ``--start`` started, and wait for it."""
    try:
        pid = int(PID_FILE.read_text(encoding="utf-8").strip())
        os.kill(pid, signal.SIGTERM)
    except (OSError, ValueError):  # no pid file, or none in it, or its process is gone
        PID_FILE.unlink(missing_ok=True)
        click.echo("podium: no server started with `podium torchserve --start` is running")
        return 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if not _alive(pid):
            click.echo("podium: the server has stopped")
            return 0
        time.sleep(0.1)
    click.echo(f"podium: the server (pid {pid}) did not stop within 60 s", err=True)
    return 1


@main.command()
@click.option("--model-name", required=True, help="The model's name; the archive is NAME.mar.")
@click.option(
    "--handler",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The handler file (TorchServe's handler contract), or a default handler's name "
    "(image_classifier, text_classifier, object_detector, image_segmenter, base_handler).",
)
@click.option("--version", "version", default=None, help="The model's version (modelVersion).")
@click.option("--serialized-file", type=_FILE, help="The weights file (serializedFile), if any.")
@click.option(
    "--model-file", type=_FILE, help="The file with the model's architecture (modelFile), if any."
)
@click.option(
    "--extra-files",
    default=None,
    help="Comma-separated files or directories to add (at the archive's root).",
)
@click.option("--config-file", type=_FILE, help="The model-config.yaml (configFile).")
@click.option(
    "--requirements-file",
    type=_FILE,
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
def archive(extra_files: str | None, **options: Any) -> None:
    """Build a TorchServe model archive (.mar), as torch-model-archiver does."""
    from .model.torchserve import archive_model

    extras = [Path(p.strip()) for p in (extra_files or "").split(",") if p.strip()]
    try:
        dest = archive_model(extra_files=extras, **options)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    click.echo(f"wrote {dest}")


@main.command("ray")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "--config",
    "config_file",
    type=_FILE,
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
@_option(SETTINGS["log_level"])
def ray_command(
    paths: tuple[Path, ...],
    config_file: Path | None,
    ingress_replicas: int | None,
    log_level: str | None,
    **serve: Any,
) -> None:
    """Serve the models at PATHS on Ray Serve: a deployment per model version, Podium's HTTP
    protocols through Serve's HTTP proxy (docs/ray.md). Needs Ray: pip install 'podium[ray]'."""
    # serve: where the application is deployed and its proxies listen, as run() takes them
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
        code = run(settings, **serve)
    except DefinitionError as exc:
        _cannot_start(exc)
        code = 1
    sys.exit(code)
