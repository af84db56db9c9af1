"""The one table of the server's settings (``podium serve``): each setting's key, kind, default,
bounds, unit, help, the group of ``ServerConfig`` it belongs to, and how TorchServe's
``config.properties`` and MLServer's ``settings.json`` spell it. Re-exported by
:mod:`podium.config`.

What comes from :data:`SETTINGS`:

- ``podium serve``'s flags (``cli.py``): ``--KEY`` with ``-`` for ``_``, the click type of the
  kind, ``--KEY/--no-KEY`` where ``negatable``, the help with the default in brackets;
- the keys of a ``--config`` YAML file (``-`` or ``_``), and of ``ServerConfig(**values)``;
- the checks: ``ServerConfig``'s groups check each of their settings with :meth:`Setting.check`,
  the kinds and checks of the model table (:func:`podium._model_fields.check`), and a message
  that names the flag;
- :func:`foreign`: the settings a key of TorchServe's or MLServer's server-wide file sets, for
  reading those files.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal
from urllib.parse import urlsplit

from ._model_fields import Kind, Unit, check

__all__ = [
    "MODEL_DEFAULTS",
    "PRESETS",
    "SETTINGS",
    "Group",
    "Setting",
    "foreign",
    "normalize_host",
    "normalize_origin",
    "origin_of",
]


class Group(enum.Enum):
    """The parts of ``ServerConfig``, each a frozen value object handed as it is to what uses it
    (the value is ``ServerConfig``'s attribute)."""

    LISTENERS = "listeners"  # where each listener binds
    PROTOCOLS = "protocols"  # how the front ends read and answer
    HTTP = "http"  # every HTTP listener's connection limits (ConnectionLimits)
    GRPC = "grpc"  # both gRPC listeners' limits (GrpcLimits)
    SERVING = "serving"  # the models and what runs their code
    REGISTRATION = "registration"  # what registration may read and fetch (UrlPolicy)
    AUTH = "auth"  # token authorization
    MANAGEMENT = "management"  # who may call the management API, and load or unload models
    SHARED_MEMORY = "shared_memory"  # Triton's system shared memory extension
    SHUTDOWN = "shutdown"  # SIGTERM
    LOGS = "logs"  # logs and traces
    WEB = "web"  # what browsers and proxies meet on the HTTP inference listener (Web)


#: A unit that is not a time (help shows such sizes in KiB, MiB, GiB).
Size = Literal["bytes", "bytes/s"]

Refine = Callable[[str, Any], Any]


@dataclass(frozen=True, slots=True)
class Setting:
    """One server setting (see the module docstring). ``optional``: null is a value (the server
    decides at start, as ``shown`` says); ``refine``: a check of its own after the kind's,
    given the flag's name and the value; ``shown``: the default as help shows it ("": none);
    ``attr``: the group's attribute (default: the key); ``flag``: whether ``podium serve`` has a
    flag for it (else only the config file); ``off``: more flags that turn it off (TorchServe's
    own start flags); ``torchserve`` / ``mlserver``: the key of TorchServe's
    ``config.properties`` / MLServer's ``settings.json`` that sets it (one such key may set two
    settings: an address is a host and a port; the value may need converting)."""

    key: str
    kind: Kind
    default: Any
    group: Group
    help: str
    minimum: float = 0
    above: bool = False
    below: float | None = None
    unit: Unit | Size | None = None
    choices: tuple[str, ...] = ()
    optional: bool = False
    refine: Refine | None = None
    shown: str | None = None
    negatable: bool = False
    file: bool = False  # a PATH that names a file (else a directory)
    flag: bool = True
    off: tuple[str, ...] = ()
    attr: str = ""
    torchserve: str | None = None
    mlserver: str | None = None

    def __post_init__(self) -> None:
        if not self.attr:
            object.__setattr__(self, "attr", self.key)

    @property
    def name(self) -> str:
        """The flag's name without its dashes (``max-url-size``): what messages call it."""
        return self.key.replace("_", "-")

    def check(self, value: Any) -> Any:
        """``value`` as the setting holds it; ``ValueError`` naming the flag otherwise."""
        if value is None and self.optional:
            return None
        value = check(
            self.kind,
            self.key,
            value,
            minimum=self.minimum,
            above=self.above,
            below=self.below,
            unit=self.unit if isinstance(self.unit, Unit) else None,
            choices=self.choices,
            name=self.name,
        )
        return value if self.refine is None else self.refine(self.name, value)

    def shown_default(self) -> str:
        """The default as help shows it ("" for none)."""
        if self.shown is not None:
            return self.shown
        value = self.default
        if isinstance(value, bool):
            return "on" if value else "off"
        if self.unit in ("bytes", "bytes/s") and isinstance(value, int):
            return _size(value)
        if isinstance(value, float):
            return f"{value:g}"
        return "" if value is None else str(value)


def _size(count: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if count >= 1 << shift and count % (1 << shift) == 0:
            return f"{count >> shift} {unit}"
    return str(count)


# -- the checks of a few settings beyond their kind ----------------------------------------------


def _each(one: Refine) -> Refine:
    """The check of a list setting: ``one`` (given the flag's name) for each entry, then the
    entries without repeats."""
    return lambda name, values: tuple(dict.fromkeys(one(name, value) for value in values))


def _regex(name: str, pattern: str) -> str:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"{name}: {pattern!r} is not a regular expression: {exc}") from None
    return pattern


def _header_name(name: str, value: str) -> str:
    if not all(c.isalnum() or c in "-_" for c in value):
        raise ValueError(
            f"{name} must be a header name (letters, digits, '-' and '_'), got {value!r}"
        )
    return value


def _object_prefix(name: str, value: str) -> str:
    if "/" in value.lstrip("/"):
        raise ValueError(f"{name} must be the start of an object name (no '/'), got {value!r}")
    return value


def _cors_origin(name: str, value: str) -> str:
    origin = "*" if value.strip() == "*" else origin_of(value)
    if origin is None:
        raise ValueError(
            f"{name}: {value!r} is not a web origin; give scheme://host[:port] (http or "
            "https, no path) or '*' for any"
        )
    return origin


def _header_or_any(name: str, value: str) -> str:
    return value if value == "*" else _header_name(name, value.strip())


def _root_path(name: str, value: str) -> str:
    root = value.rstrip("/")
    if root and (
        not root.startswith("/") or not all(c.isprintable() and c not in "?#% " for c in root)
    ):
        raise ValueError(
            f"{name} must be a path that starts with '/' (no '?', '#', '%' or spaces), "
            f"got {value!r}"
        )
    return root


def normalize_host(name: str) -> str:
    """A ``management_allowed_hosts`` entry, lower-cased, without a trailing dot; ``ValueError``
    if it is not a host name."""
    if not isinstance(name, str):
        raise ValueError(f"management-allowed-hosts: {name!r} is not a host name")
    host = name.strip().lower().rstrip(".")
    if not host or not all(
        label and len(label) <= 63 and all(c.isalnum() or c == "-" for c in label)
        for label in host.split(".")
    ):
        raise ValueError(
            f"management-allowed-hosts: {name!r} is not a host name (letters, digits, '-' and "
            "'.', without port or wildcard)"
        )
    return host


def normalize_origin(origin: str) -> str:
    """A ``management_allowed_origins`` entry as :func:`origin_of` gives it; ``ValueError`` for
    anything else, ``*`` included: a wildcard would let every web page drive the API."""
    found = origin_of(origin) if isinstance(origin, str) else None
    if found is None:
        raise ValueError(
            f"management-allowed-origins: {origin!r} is not a web origin; give scheme://host[:port] "
            "(http or https, no path; '*' and 'null' are refused: they would admit every page)"
        )
    return found


def origin_of(value: str) -> str | None:
    """A web origin (an ``Origin`` header's value) as ``scheme://host[:port]``: lower-cased,
    without the scheme's default port; None if ``value`` is not an http(s) origin."""
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    host = parts.hostname
    if scheme not in ("http", "https") or not host or "@" in parts.netloc:
        return None
    if parts.path or parts.query or parts.fragment:
        return None
    if ":" in host:
        host = f"[{host}]"
    if port is None or port == {"http": 80, "https": 443}[scheme]:
        return f"{scheme}://{host}"
    return f"{scheme}://{host}:{port}"


# -- the table ------------------------------------------------------------------------------------

_I, _N, _F, _C = Kind.INTEGER, Kind.NUMBER, Kind.FLAG, Kind.CHOICE
_S, _MIN = Unit.SECONDS, Unit.MINUTES
_PORTS = 65_536  # below: 0-65535
_C_INT = 2**31  # grpc's options are C ints
_TIME = 1e9  # seconds: longer than any sensible limit (grpc counts up to ~24 days)
(_LISTENERS, _PROTOCOLS, _HTTP, _GRPC, _SERVING) = (
    Group.LISTENERS,
    Group.PROTOCOLS,
    Group.HTTP,
    Group.GRPC,
    Group.SERVING,
)
(_REGISTRATION, _AUTH, _MANAGEMENT, _SHM, _SHUTDOWN, _LOGS, _WEB) = (
    Group.REGISTRATION,
    Group.AUTH,
    Group.MANAGEMENT,
    Group.SHARED_MEMORY,
    Group.SHUTDOWN,
    Group.LOGS,
    Group.WEB,
)
_T = Kind.TEXT

# The order of `podium serve --help`.
# fmt: off
_TABLE = (
    # -- where each listener binds
    Setting("host", _T, "0.0.0.0", _LISTENERS, torchserve="inference_address", mlserver="host",
            help="Address for the inference listeners"),
    Setting("http_port", _I, 8080, _LISTENERS, below=_PORTS, torchserve="inference_address",
            mlserver="http_port",
            help="HTTP inference port; 0 picks one"),
    Setting("management_host", _T, "127.0.0.1", _LISTENERS, torchserve="management_address",
            help="Address for the management listeners, REST and gRPC"),
    Setting("management_port", _I, 8081, _LISTENERS, below=_PORTS, torchserve="management_address",
            help="Management API port"),
    Setting("metrics_host", _T, "127.0.0.1", _LISTENERS, torchserve="metrics_address",
            help="Address for the metrics listener (GET /metrics, Prometheus)"),
    Setting("metrics_port", _I, 8082, _LISTENERS, below=_PORTS, torchserve="metrics_address",
            mlserver="metrics_port",
            help="Prometheus metrics port"),
    Setting("metrics", _F, True, _LISTENERS, negatable=True, torchserve="enable_metrics_api",  # MLServer: null is none
            mlserver="metrics_endpoint",
            help="Serve GET /metrics on --metrics-host:--metrics-port; --no-metrics: no metrics "
            "listener (the statistics extension still counts)"),
    Setting("grpc_port", _I, 7070, _LISTENERS, below=_PORTS, torchserve="grpc_inference_port",
            mlserver="grpc_port",
            help="gRPC inference port"),
    Setting("grpc_management_port", _I, 7071, _LISTENERS, below=_PORTS,
            torchserve="grpc_management_port",
            help="gRPC management port"),
    # -- how the front ends read and answer
    Setting("grpc_max_message_size", _I, 64 << 20, _PROTOCOLS, minimum=1, below=_C_INT,
            unit="bytes", torchserve="max_response_size", mlserver="grpc_max_message_length",
            help="Largest gRPC message in bytes, received or sent"),
    Setting("grpc_stream_format", _C, "triton", _PROTOCOLS, choices=("triton", "mlserver"),
            help="Framing of OIP ModelStreamInfer responses: Triton's ModelStreamInferResponse with "
            "in-band errors (tritonclient, perf_analyzer), or MLServer's bare ModelInferResponse "
            "(MLServer's and KServe's stubs)"),
    Setting("grpc_output_contents", _C, "request", _PROTOCOLS, choices=("request", "raw"),
            help="How OIP gRPC answers carry tensors: raw_output_contents when the request used "
            "raw_input_contents, else typed contents (MLServer, KServe); or always raw, as Triton"),
    Setting("sequence_header", _T, "ts_request_sequence_id", _PROTOCOLS, refine=_header_name,
            help="Header naming a stateful sequence; NAME_start / NAME_end flag its first and last "
            "request"),
    Setting("grpc_aio", _F, False, _PROTOCOLS,
            help="Serve gRPC inference with grpc.aio even where grpcio's internals pass the relay's "
            "start-up check (slower per call; a way out should the relay misbehave)"),
    Setting("server_name", _T, "podium", _PROTOCOLS, mlserver="server_name",
            help="The server's name in OIP's server metadata (GET /v2, gRPC ServerMetadata)"),
    Setting("max_request_size", _I, 64 << 20, _PROTOCOLS, minimum=1, unit="bytes",
            torchserve="max_request_size",
            help="Largest request body in bytes"),
    # -- both gRPC listeners' limits (docs/security.md, "gRPC limits"); their connections are
    # capped by max_connections, the handshake by header_timeout
    Setting("grpc_max_concurrent_streams", _I, 100, _GRPC, minimum=1, below=_C_INT,
            attr="max_concurrent_streams",
            help="Most calls at once on one gRPC connection (HTTP/2 SETTINGS); a client keeps more "
            "waiting until one ends"),
    Setting("grpc_max_connection_idle", _N, 300.0, _GRPC, below=_TIME, unit=_S,
            attr="max_connection_idle",
            help="Seconds a gRPC connection may stay without calls before it is closed; 0: never"),
    Setting("grpc_max_connection_age", _N, 1800.0, _GRPC, below=_TIME, unit=_S,
            attr="max_connection_age",
            help="Seconds after which a gRPC connection is told to go (GOAWAY, ±10%): its client makes"
            " new calls on a new connection; 0: never"),
    Setting("grpc_max_connection_age_grace", _N, None, _GRPC, below=_TIME, unit=_S, optional=True,
            shown="unlimited", attr="max_connection_age_grace",
            help="Seconds calls in flight may go on after --grpc-max-connection-age before they are "
            "cut"),
    Setting("grpc_keepalive_time", _N, 60.0, _GRPC, below=_TIME, unit=_S, attr="keepalive_time",
            help="Seconds a gRPC connection may stay silent before the server pings it; 0: never"),
    Setting("grpc_keepalive_timeout", _N, 20.0, _GRPC, minimum=0.001, below=_TIME, unit=_S,
            attr="keepalive_timeout",
            help="Seconds the server waits for the answer to its ping before it closes the connection"),
    Setting("grpc_min_ping_interval", _N, 5.0, _GRPC, below=_TIME, unit=_S,
            attr="min_ping_interval",
            help="Least seconds between a client's pings while no data flows; a client that pings more"
            " often three times is sent GOAWAY (too_many_pings) and disconnected"),
    # -- every HTTP listener's connection limits (docs/security.md, server/_limits.py)
    Setting("max_url_size", _I, 8 << 10, _HTTP, minimum=1, unit="bytes",
            help="Longest request target (path and query) in bytes; longer: 414"),
    Setting("max_header_size", _I, 64 << 10, _HTTP, minimum=1, unit="bytes",
            help="Largest request head (request line and header fields) in bytes; larger: 431"),
    Setting("max_headers", _I, 100, _HTTP, minimum=1,
            help="Most header fields in a request; more: 431"),
    Setting("header_timeout", _N, 10.0, _HTTP, above=True, below=_TIME, unit=_S,
            help="Seconds a connection has to send a complete request head, from its accept or its "
            "next request's first byte; later: 408 and closed (gRPC: the HTTP/2 preface and "
            "SETTINGS, from its accept)"),
    Setting("keep_alive_timeout", _N, 30.0, _HTTP, above=True, below=_TIME, unit=_S,
            help="Seconds an HTTP connection may stay idle between requests"),
    Setting("body_timeout", _N, 10.0, _HTTP, above=True, below=_TIME, unit=_S,
            help="Seconds over which a request body's rate is measured: a body that brings less than "
            "--min-body-rate in any such period gets 408 and is closed"),
    Setting("min_body_rate", _I, 1024, _HTTP, unit="bytes/s", shown="1024",
            help="Least average rate of a request body, bytes/s; 0: only a body that stalls for "
            "--body-timeout is closed"),
    Setting("max_connections", _I, None, _HTTP, minimum=1, optional=True,
            shown="1000, fewer if the open-files limit is low",
            help="Most connections served at once on each listener; more are answered 503 (HTTP) or "
            "closed (gRPC)"),
    # -- the models and what runs their code
    Setting("models", Kind.LIST, (), _SERVING, flag=False, attr="paths", torchserve="load_models",
            mlserver="model_repository_root",
            help="Model paths (a config file's, relative to it)"),
    Setting("secrets_dir", Kind.PATH, None, _SERVING, optional=True,
            help="Directory of secret files, one per secret (a config file's, relative to it)"),
    Setting("threads", _I, 64, _SERVING, minimum=1,
            help="Threads for sync model code"),
    Setting("sched_batch", _F, True, _SERVING, negatable=True,
            help="Run the threads Podium hands calls to (sync model code, gRPC's I/O and relay) "
            "under Linux's SCHED_BATCH: woken, they wait for the event loop to block instead of "
            "preempting it for the GIL it holds"),
    Setting("keep_running", _F, False, _SERVING,
            help="Serving one truss whose model cannot load: stay up (not ready, the reason in "
            "readiness and the log) instead of exiting 1 as Truss's server does"),
    Setting("install_model_requirements", _F, False, _SERVING,
            torchserve="install_py_dep_per_model",
            help="Install the requirements a model declares (a truss's requirements, a "
            "TorchServe archive's requirements file) into an environment of its own, cached in "
            "$PODIUM_ENVS (~/.cache/podium/envs), and run it in worker processes from there"),
    # -- what registration may read and fetch (docs/security.md, "Archives and downloads")
    Setting("model_store", Kind.PATH, None, _REGISTRATION, optional=True, torchserve="model_store",
            help="Directory where registration finds model files by name and saves downloads"),
    Setting("allowed_urls", Kind.LIST, (), _REGISTRATION, refine=_each(_regex),
            shown="none: remote urls are refused", torchserve="allowed_urls",
            help="Regular expression a remote registration url must match in full (repeatable)"),
    Setting("download_timeout", _N, 300.0, _REGISTRATION, above=True, unit=_S,
            help="Seconds a registration's download may take in all; slower: refused"),
    Setting("max_archive_size", _I, 4 << 30, _REGISTRATION, minimum=1, unit="bytes",
            help="Bytes a TorchServe archive (.mar, .tar.gz) may expand to; more: refused"),
    Setting("max_archive_ratio", _N, 100.0, _REGISTRATION, minimum=1,
            help="How many times its own size an archive may expand to, beyond 64 MiB; more: refused "
            "as a zip bomb"),
    Setting("allow_any_local_path", _F, False, _REGISTRATION,
            help="Let registration read a local url anywhere on disk, not only under --model-store and"
            " the model paths given at start"),
    Setting("max_download_size", _I, 1 << 30, _REGISTRATION, minimum=1, unit="bytes",
            help="Largest download in bytes"),
    # -- token authorization (TorchServe's; docs/management.md)
    Setting("auth", _F, None, _AUTH, optional=True, negatable=True, off=("--disable-token-auth",),  # true: off
            shown="the management API only", attr="enabled",
            torchserve="disable_token_authorization",
            help="Token authorization, 'Authorization: Bearer <key>' with the keys of --key-file: "
            "--auth on every listener, --no-auth (or TorchServe's --disable-token-auth) on none"),
    Setting("key_file", Kind.PATH, None, _AUTH, optional=True, file=True, shown="./key_file.json",
            help="Where the keys are written (owner-only)"),
    Setting("token_expiration", _N, 0.0, _AUTH, unit=_MIN,
            help="Minutes the management and inference keys last; 0: no expiry"),
    # -- who may call the management API, and load or unload models (docs/security.md)
    Setting("management_allowed_hosts", Kind.LIST, (), _MANAGEMENT, shown="none",
            refine=_each(lambda _, v: normalize_host(v)), attr="allowed_hosts",
            help="A host name the management API answers to besides IP addresses and localhost "
            "(repeatable); other Host headers get 421, which stops DNS rebinding"),
    Setting("management_allowed_origins", Kind.LIST, (), _MANAGEMENT, shown="none",
            refine=_each(lambda _, v: normalize_origin(v)), attr="allowed_origins",
            help="A web origin (scheme://host[:port]) whose pages may call the management API "
            "(repeatable); requests from other pages get 403"),
    Setting("allow_open_management", _F, False, _MANAGEMENT, shown="", attr="allow_open",
            help="Start even though the management API listens on a non-loopback address without token"
            " authorization: only where a firewall or proxy already guards its ports"),
    Setting("model_control", _C, "management", _MANAGEMENT, choices=("management", "inference"),
            help="Which listeners may load and unload models: the management listeners only, or the "
            "inference listeners too (OIP's repository load/unload, open to every inference "
            "client: use with --auth)"),
    # -- Triton's system shared memory extension (docs/security.md)
    Setting("shared_memory", _C, "off", _SHM, choices=("off", "system"), attr="mode",
            help="Triton's system shared memory extension: 'system' lets clients on this host register"
            " regions of POSIX shared memory objects (/dev/shm) and pass tensors through them; "
            "any client of the inference listeners can then map any such object the server's user"
            " can open (see --shm-key-prefix, --auth)"),
    Setting("shm_key_prefix", Kind.STRING, "", _SHM, refine=_object_prefix, shown="any",
            attr="key_prefix",
            help="Map only shared memory objects whose names (after the leading '/') start with this"),
    Setting("max_shm_regions", _I, 64, _SHM, minimum=1, attr="max_regions",
            help="Most system shared memory regions registered at once"),
    Setting("max_shm_size", _I, 16 << 30, _SHM, minimum=1, unit="bytes", attr="max_size",
            help="Most bytes of system shared memory mapped at once, all regions together"),
    # -- SIGTERM (docs/operations.md)
    Setting("graceful_timeout", _N, 30.0, _SHUTDOWN, below=1e6, unit=_S,
            help="Seconds calls in flight and open streams get to finish after SIGTERM/SIGINT; those "
            "still running are then cut with 'server shutting down' (a second signal: at once)"),
    Setting("shutdown_delay", _N, None, _SHUTDOWN, below=1e6, unit=_S, optional=True,
            shown="5 in a Kubernetes pod, else 0",
            help="Seconds between readiness turning false on SIGTERM/SIGINT and new connections being "
            "refused, so that load balancers stop sending first"),
    # -- logs and traces (docs/operations.md)
    Setting("log_level", _C, "info", _LOGS, choices=("debug", "info", "warning", "error"),  # true: debug
            attr="level", mlserver="debug",
            help="The least level of the lines logged"),
    Setting("log_format", _C, "text", _LOGS, choices=("text", "json"), attr="format",  # true: json
            mlserver="use_structured_logging",
            help="Every log line as text, or as one JSON object per line for log shippers"),
    Setting("access_log", _F, True, _LOGS, negatable=True,
            help="One line per request (logger podium.access, at info): protocol, route or RPC, model,"
            " version, status, duration, bytes in and out, request id, peer"),
    Setting("otel", _F, False, _LOGS,
            shown="off; on when OTEL_TRACES_EXPORTER or an OTEL_EXPORTER_OTLP_*ENDPOINT is set",
            mlserver="tracing_server",
            help="OpenTelemetry spans for every request, exported over OTLP as the standard OTEL_* "
            "variables say; needs podium[otel]"),
    # TorchServe's metric names (docs/metrics.md, "TorchServe's names")
    Setting("ts_metrics", _C, "off", _LOGS, choices=("off", "prometheus", "log"),
            torchserve="metrics_mode",
            help="TorchServe's metric names (ts_inference_requests_total, Requests2XX, QueueTime...)"
            ": on /metrics beside Podium's (prometheus), as TorchServe's log lines (log), or none"),
    Setting("metrics_config", Kind.PATH, None, _LOGS, optional=True, file=True,
            shown="TorchServe's own", torchserve="metrics_config",
            help="TorchServe's metrics.yaml: the metrics its handlers find declared in "
            "context.metrics (model_metrics), and the TorchServe names --ts-metrics serves"),
    # -- what browsers and proxies meet on the HTTP inference listener (server/http/_web.py): off by
    # default; MLServer's settings.json names them as its cors_settings, gzip_enabled, root_path
    Setting("cors_allow_origins", Kind.LIST, (), _WEB, refine=_each(_cors_origin),
            attr="allow_origins", shown="none: no CORS", mlserver="cors_settings.allow_origins",
            torchserve="cors_allowed_origin",
            help="A web origin (scheme://host[:port], or '*': any) whose pages may call the inference "
            "listener (repeatable): its answers get CORS headers and its preflight OPTIONS is "
            "answered; none (and no --cors-allow-origin-regex): no CORS at all"),
    Setting("cors_allow_origin_regex", _T, None, _WEB, optional=True, refine=_regex,
            attr="allow_origin_regex", shown="none", mlserver="cors_settings.allow_origin_regex",
            help="A regular expression an origin may match in full instead"),
    Setting("cors_allow_credentials", _F, False, _WEB, attr="allow_credentials",
            mlserver="cors_settings.allow_credentials",
            help="CORS: let pages send cookies and Authorization (Access-Control-Allow-Credentials)"),
    Setting("cors_allow_methods", Kind.LIST, ("GET",), _WEB, attr="allow_methods", shown="GET",
            refine=_each(lambda name, v: _header_or_any(name, v).upper()),
            mlserver="cors_settings.allow_methods", torchserve="cors_allowed_methods",
            help="CORS: a method a preflight admits (repeatable; '*': any)"),
    Setting("cors_allow_headers", Kind.LIST, (), _WEB, refine=_each(_header_or_any),
            attr="allow_headers", shown="the CORS-safelisted ones",
            mlserver="cors_settings.allow_headers", torchserve="cors_allowed_headers",
            help="CORS: a request header a preflight admits (repeatable; '*': any)"),
    Setting("cors_expose_headers", Kind.LIST, (), _WEB, refine=_each(_header_or_any),
            attr="expose_headers", shown="none", mlserver="cors_settings.expose_headers",
            help="CORS: a response header pages may read (repeatable)"),
    Setting("cors_max_age", _I, 600, _WEB, attr="max_age", mlserver="cors_settings.max_age",
            help="CORS: seconds a browser may keep a preflight's answer"),
    Setting("gzip", _F, False, _WEB, negatable=True, mlserver="gzip_enabled",
            shown="off; on for podium mlserver start, as MLServer",
            help="Compress the inference listener's answers with gzip for clients that accept it "
            "(Accept-Encoding), except streams and answers under --gzip-min-size"),
    Setting("gzip_min_size", _I, 500, _WEB, unit="bytes", shown="500",
            help="Smallest answer body in bytes --gzip compresses"),
    Setting("root_path", Kind.STRING, "", _WEB, refine=_root_path, shown="none",
            mlserver="root_path",
            help="The path prefix a proxy serves the inference listener under (/models/a): routes "
            "answer under it as well as at / (a proxy that strips it), and see it as ASGI's "
            "root_path"),
)
# fmt: on

#: Every server setting by its key (a flag's name with ``_``), in ``--help``'s order.
SETTINGS: Mapping[str, Setting] = MappingProxyType({s.key: s for s in _TABLE})

#: Keys of the foreign server-wide files whose Podium counterparts are a model's settings
#: (:data:`podium._model_fields.FIELDS`): server-wide defaults there, a model's own here.
MODEL_DEFAULTS: Mapping[tuple[str, str], tuple[str, ...]] = MappingProxyType(
    {
        ("torchserve", "default_workers_per_model"): ("min_workers",),
        ("torchserve", "job_queue_size"): ("max_queue_size",),
        ("torchserve", "default_response_timeout"): ("response_timeout",),
        ("mlserver", "parallel_workers"): ("workers", "min_workers", "max_workers"),
    }
)


#: One flag for a whole foreign server's behaviour (``podium serve --triton``): the settings it
#: stands for, under ``--config`` and the flags given with it.
PRESETS: Mapping[str, Mapping[str, Any]] = MappingProxyType(
    {
        # Triton's ports, model control on the inference listeners
        # (--model-control-mode=explicit), its system shared memory (on in 2.51), raw gRPC
        # answers, its ModelStreamInfer framing, and its name in the server metadata.
        "triton": MappingProxyType(
            {
                "http_port": 8000,
                "grpc_port": 8001,
                "metrics_port": 8002,
                "model_control": "inference",
                "shared_memory": "system",
                "grpc_output_contents": "raw",
                "grpc_stream_format": "triton",
                "server_name": "triton",  # Triton's examples check GET /v2's name
            }
        ),
    }
)


def foreign(source: Literal["torchserve", "mlserver"], key: str) -> tuple[Setting, ...]:
    """The settings that a key of TorchServe's ``config.properties`` (``source="torchserve"``)
    or MLServer's ``settings.json`` (``"mlserver"``) sets, in the table's order: none for a key
    Podium has no server setting for (see :data:`MODEL_DEFAULTS`), two for an address (a host
    and a port)."""
    if source not in ("torchserve", "mlserver"):
        raise ValueError(f"no spellings of {source!r}: 'torchserve' or 'mlserver'")
    return tuple(s for s in _TABLE if getattr(s, source) == key)
