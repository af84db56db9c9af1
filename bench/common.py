"""Shared plumbing for bench/run.py and bench/stream.py.

Environment set-up (MLServer's own virtual env, wrk), free ports, CPU pinning, and a `Server`
that starts one server process in its own process group pinned to one core, waits until it is
ready, and always kills the whole group on the way out.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import http.client
import os
import platform
import re
import resource
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
VENVS = BENCH / ".venvs"
MLSERVER_VENV = VENVS / "mlserver"
#: MLServer under test. httptools lets its uvicorn use the fast HTTP parser (as Podium's does);
#: without it uvicorn falls back to h11 and MLServer would be measured with a handicap.
MLSERVER_REQUIREMENTS = ("mlserver>=1.6,<2", "httptools>=0.6")

SERVER_CPU = 0
CLIENT_CPU = 1


class BenchError(RuntimeError):
    """A benchmark step failed; the message says which and why."""


def log(message: str) -> None:
    """Progress goes to stderr so stdout holds only the report."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def repo_bin(name: str) -> Path:
    """An executable of the repo's own virtual env (.venv), else next to this interpreter."""
    for folder in (ROOT / ".venv" / "bin", Path(sys.executable).parent):
        candidate = folder / name
        if candidate.exists():
            return candidate
    return Path(name)


# --------------------------------------------------------------------------- environment


def _mlserver_python() -> Path:
    return MLSERVER_VENV / "bin" / "python"


def mlserver_ready() -> bool:
    python = _mlserver_python()
    if not python.exists():
        return False
    probe = subprocess.run(
        [str(python), "-c", "import mlserver, httptools, uvloop"],
        capture_output=True,
        timeout=120,
    )
    return probe.returncode == 0


def ensure_mlserver() -> Path:
    """MLServer in its own virtual env; created and installed only when missing or broken.

    Returns the `mlserver` executable. Raises BenchError when it cannot be installed.
    """
    if not mlserver_ready():
        log(f"installing {' '.join(MLSERVER_REQUIREMENTS)} into {MLSERVER_VENV}")
        VENVS.mkdir(parents=True, exist_ok=True)
        if not _mlserver_python().exists():
            _run_checked([sys.executable, "-m", "venv", str(MLSERVER_VENV)], timeout=300)
        _run_checked(
            [
                str(_mlserver_python()),
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                *MLSERVER_REQUIREMENTS,
            ],
            timeout=1200,
        )
        if not mlserver_ready():
            raise BenchError(f"mlserver installed into {MLSERVER_VENV} but does not import")
    return MLSERVER_VENV / "bin" / "mlserver"


def mlserver_version() -> str:
    out = subprocess.run(
        [str(_mlserver_python()), "-c", "import mlserver; print(mlserver.__version__)"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return out.stdout.strip() or "?"


def venv_python(name: str) -> Path:
    """The python of the benchmark's virtual env `name` (bench/.venvs/NAME)."""
    return VENVS / name / "bin" / "python"


def ensure_venv(name: str, requirements: Sequence[str], probe: str) -> Path:
    """bench/.venvs/NAME holding `requirements`, created and installed only when the python
    code `probe` fails in it (missing or broken). Returns its python; BenchError when it cannot
    be installed."""
    python = venv_python(name)

    def ready() -> bool:
        if not python.exists():
            return False
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            return (
                subprocess.run(
                    [str(python), "-c", probe], capture_output=True, timeout=300
                ).returncode
                == 0
            )
        return False

    if not ready():
        log(f"installing {' '.join(requirements)} into {python.parent.parent}")
        VENVS.mkdir(parents=True, exist_ok=True)
        if not python.exists():
            _run_checked([sys.executable, "-m", "venv", str(python.parent.parent)], timeout=300)
        pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        _run_checked([*pip, *requirements], timeout=1800)
        if not ready():
            raise BenchError(f"{name} installed into {python.parent.parent} but `{probe}` fails")
    return python


def venv_package_version(python: Path, dist: str) -> str:
    """The version of distribution `dist` in the virtual env of `python`, or '?'."""
    code = f"import importlib.metadata as m; print(m.version({dist!r}))"
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        done = subprocess.run(
            [str(python), "-c", code], capture_output=True, text=True, timeout=120
        )
        if done.returncode == 0 and done.stdout.strip():
            return done.stdout.strip()
    return "?"


def ensure_wrk() -> str | None:
    """Path of wrk; installed with apt-get when missing and we are root. None if unavailable."""
    return ensure_apt_tool("wrk", "wrk")


def ensure_apt_tool(binary: str, package: str) -> str | None:
    """Path of `binary`; when missing and we are root, `apt-get install -y package` (after an
    `apt-get update` if the first try fails). None if it still cannot be had."""
    found = shutil.which(binary)
    if found:
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        log(f"{binary} not found and cannot apt-get it (not root or no apt-get)")
        return None
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for step in (["apt-get", "install", "-y", package], ["apt-get", "update"]):
        log(f"running {' '.join(step)}")
        with contextlib.suppress(subprocess.TimeoutExpired, OSError):
            subprocess.run(step, env=env, capture_output=True, timeout=600)
        found = shutil.which(binary)
        if found:
            return found
    with contextlib.suppress(subprocess.TimeoutExpired, OSError):
        subprocess.run(
            ["apt-get", "install", "-y", package], env=env, capture_output=True, timeout=600
        )
    return shutil.which(binary)


def _run_checked(argv: Sequence[str], timeout: float) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BenchError(f"{shlex.join(argv)} failed: {exc}") from exc
    if done.returncode != 0:
        tail = (done.stdout + done.stderr)[-2000:]
        raise BenchError(f"{shlex.join(argv)} exited {done.returncode}:\n{tail}")


def run_client(
    argv: list[str], duration: float, env: dict[str, str] | None = None
) -> tuple[str, float]:
    """Run a load generator to completion; its stdout and the share of one CPU it used over
    `duration` seconds. `env` is added to this process's environment."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=duration + 60,
            env={**os.environ, **env} if env else None,
        )
    except subprocess.TimeoutExpired as exc:
        raise BenchError(f"load generator did not finish: {shlex.join(argv)}") from exc
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise BenchError(f"{shlex.join(argv)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return done.stdout, 100 * cpu / duration


# --------------------------------------------------------------------------- machine


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


#: The CPUs this process may use, read before pin_self() narrows them.
_START_CPUS = frozenset(os.sched_getaffinity(0))


def can_pin() -> bool:
    """Whether servers and load generator can each get their own CPU."""
    return bool(shutil.which("taskset")) and {SERVER_CPU, CLIENT_CPU} <= _START_CPUS


def pinned(argv: Sequence[str], cpu: int) -> list[str]:
    """argv prefixed with `taskset -c CPU` where pinning is possible."""
    return ["taskset", "-c", str(cpu), *argv] if can_pin() else list(argv)


def exit_on_signals() -> None:
    """Turn SIGTERM/SIGHUP into SystemExit so every `finally` (server clean-up) still runs."""

    def _raise(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise)


def pin_self(cpu: int) -> None:
    """Keep this orchestrating process (and its load generation) off the server's core."""
    if can_pin():
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, {cpu})


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def machine_lines(command: str) -> list[str]:
    """Date, machine and command lines for the head of a report."""
    now = _dt.datetime.now().astimezone()
    return [
        f"- date: {now:%Y-%m-%d %H:%M %Z}",
        f"- machine: `{platform.machine()}`, {cpu_model()}, {os.cpu_count()} logical CPUs, "
        f"{platform.system()} {platform.release()}",
        f"- python: {platform.python_version()}; Podium source: {git_state()}",
        f"- pinning: servers on CPU {SERVER_CPU}, load generator on CPU {CLIENT_CPU}"
        if can_pin()
        else "- pinning: NOT pinned (taskset missing or fewer than 2 CPUs)",
        f"- command: `{command}`",
    ]


def git_state() -> str:
    """The repo's commit, and whether Podium's sources differ from it."""
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "src", "examples"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown commit"
    if not sha:
        return "unknown commit"
    return f"commit {sha}" + (" + uncommitted changes in src/ or examples/" if dirty else "")


def command_line() -> str:
    try:
        script = str(Path(sys.argv[0]).resolve().relative_to(ROOT))
    except ValueError:
        script = sys.argv[0]
    return shlex.join(["python", script, *sys.argv[1:]])


def tool_version(argv: Sequence[str]) -> str:
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        text = (done.stdout or done.stderr).strip().splitlines()
        if text:
            return text[0].strip()
    return "?"


def package_version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


# --------------------------------------------------------------------------- servers


def http_get(port: int, path: str, timeout: float = 2.0) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        headers = {k.lower(): v for k, v in resp.getheaders()}
        return resp.status, headers, resp.read()
    finally:
        conn.close()


def http_post_json(
    port: int, path: str, body: bytes, timeout: float = 10.0
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        headers = {k.lower(): v for k, v in resp.getheaders()}
        return resp.status, headers, resp.read()
    finally:
        conn.close()


@dataclass
class Server:
    """One server process: started pinned to SERVER_CPU in its own process group.

    Use as a context manager: `with Server(...) as srv:` starts it and waits until
    `GET ready_path` answers 200; leaving the block kills the whole process group.
    """

    name: str
    argv: list[str]
    port: int
    cwd: Path = ROOT
    env: dict[str, str] = field(default_factory=dict)
    ready_path: str = "/v2/health/ready"
    ready_timeout: float = 120.0
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    ready_headers: dict[str, str] = field(default_factory=dict)

    def __enter__(self) -> Server:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        fd, name = tempfile.mkstemp(prefix=f"bench-{self.name}-", suffix=".log")
        self.log_path = Path(name)
        argv = pinned(self.argv, SERVER_CPU)
        log(f"starting {self.name}: {shlex.join(argv)}")
        with os.fdopen(fd, "wb") as out:
            self.proc = subprocess.Popen(
                argv,
                cwd=self.cwd,
                env={**os.environ, **self.env},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own process group: killed as one
            )

    def usage(self) -> ProcessUsage:
        """CPU seconds and context switches of the server process so far (all its threads)."""
        assert self.proc is not None
        return process_usage(self.proc.pid)

    def tree_usage(self) -> TreeUsage:
        """The same, summed over its whole process tree (tree_usage)."""
        assert self.proc is not None
        return tree_usage(self.proc.pid)

    def log_tail(self, chars: int = 3000) -> str:
        if self.log_path is None:
            return ""
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-chars:]
        return ""

    def wait_ready(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            code = self.proc.poll()
            if code is not None:
                raise BenchError(
                    f"{self.name} exited with {code} before it was ready:\n{self.log_tail()}"
                )
            with contextlib.suppress(OSError, http.client.HTTPException):
                status, headers, _ = http_get(self.port, self.ready_path, timeout=1.0)
                if status == 200:
                    self.ready_headers = headers
                    return
            time.sleep(0.1)
        raise BenchError(
            f"{self.name} not ready after {self.ready_timeout:.0f}s:\n{self.log_tail()}"
        )

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        tree = process_tree(proc.pid)
        if proc.poll() is None:
            _kill_group(proc, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                log(f"{self.name} ignored SIGTERM; killing")
        # Whatever it spawned goes too, even when the leader already exited.
        _kill_group(proc, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
        _kill_leftovers(tree)
        if self.log_path is not None:
            with contextlib.suppress(OSError):
                self.log_path.unlink()
            self.log_path = None


@dataclass(frozen=True)
class ProcessUsage:
    """A process's CPU time (user + system, seconds) and context switches, all threads summed
    (voluntary: it waited, e.g. a thread woken by another; involuntary: preempted)."""

    cpu_s: float
    voluntary: int
    involuntary: int

    def __sub__(self, other: ProcessUsage) -> ProcessUsage:
        return ProcessUsage(
            self.cpu_s - other.cpu_s,
            self.voluntary - other.voluntary,
            self.involuntary - other.involuntary,
        )


_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_usage(pid: int) -> ProcessUsage:
    """Read from /proc: utime + stime of the process, and the context switches of each of its
    live threads (a thread that has exited is no longer counted: a server's threads live long).
    Zeros where /proc cannot be read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / _TICKS
    except (OSError, IndexError, ValueError):
        return ProcessUsage(0.0, 0, 0)
    vol = invol = 0
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                for line in (task / "status").read_text().splitlines():
                    if line.startswith("voluntary_ctxt_switches"):
                        vol += int(line.split()[1])
                    elif line.startswith("nonvoluntary_ctxt_switches"):
                        invol += int(line.split()[1])
    return ProcessUsage(cpu, vol, invol)


@dataclass(frozen=True)
class TreeUsage:
    """ProcessUsage summed over a server's whole process tree, how many processes that was, and
    how many of them may run on a CPU other than the server's (pinning that did not hold)."""

    usage: ProcessUsage
    processes: int
    unpinned: int


def _stat(pid: int) -> tuple[int, int, int, float] | None:
    """(ppid, session id, start time in ticks, CPU seconds) of a live process, or None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (
            int(fields[1]),
            int(fields[3]),
            int(fields[19]),
            (int(fields[11]) + int(fields[12])) / _TICKS,
        )
    except (OSError, IndexError, ValueError):
        return None


def process_tree(root: int) -> dict[int, int]:
    """pid → start time of `root`, its descendants, and every process in its session (Ray,
    BentoML, MLServer and LitServe start several; a grandchild whose parent exited is still in
    the session)."""
    stats: dict[int, tuple[int, int, int, float]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None:
                stats[int(entry.name)] = stat
    if root not in stats:
        return {}
    tree = {pid for pid, (_, sid, _, _) in stats.items() if sid == root} | {root}
    grew = True
    while grew:
        children = {pid for pid, (ppid, _, _, _) in stats.items() if ppid in tree} - tree
        tree |= children
        grew = bool(children)
    return {pid: stats[pid][2] for pid in tree}


def tree_usage(root: int) -> TreeUsage:
    """CPU time and context switches of every process in `root`'s tree (process_tree), read
    from /proc: a multi-process server's whole cost, not just its first process's."""
    cpu = 0.0
    vol = invol = unpinned = 0
    tree = process_tree(root)
    for pid in tree:
        one = process_usage(pid)
        cpu, vol, invol = cpu + one.cpu_s, vol + one.voluntary, invol + one.involuntary
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("Cpus_allowed_list:") and line.split()[1] != str(SERVER_CPU):
                    unpinned += 1
    return TreeUsage(ProcessUsage(cpu, vol, invol), len(tree), unpinned)


def _kill_leftovers(tree: dict[int, int]) -> None:
    """SIGKILL whatever of a snapshot of a process tree is still alive (the same process: same
    pid and start time), e.g. a helper that started its own session."""
    for pid, started in tree.items():
        stat = _stat(pid)
        if stat is not None and stat[2] == started:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def _kill_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    # start_new_session=True makes the child's pid its process group id.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def podium_help() -> str:
    """`podium serve --help`, or '' when the CLI does not work yet."""
    podium = repo_bin("podium")
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        done = subprocess.run(
            [str(podium), "serve", "--help"], capture_output=True, text=True, timeout=60
        )
        if done.returncode == 0:
            return done.stdout
    return ""


#: Podium's other listeners, each given a free port where `serve` accepts the option, so a
#: benchmark run never collides with anything else on the machine.
_PODIUM_EXTRA_PORTS = (
    "--grpc-port",
    "--management-port",
    "--metrics-port",
    "--grpc-management-port",
)


def podium_argv(model_dir: Path, port: int, http_server: str | None) -> list[str]:
    """The `podium serve` command line for one model directory."""
    help_text = podium_help()
    if not help_text:
        raise BenchError("`podium serve --help` does not work (Podium's CLI not available)")
    argv = [
        str(repo_bin("podium")),
        "serve",
        str(model_dir),
        "--host",
        "127.0.0.1",
        "--http-port",
        str(port),
    ]
    for option in _PODIUM_EXTRA_PORTS:
        if re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", help_text):
            argv += [option, str(free_port())]
    if http_server:
        if "--http-server" not in help_text:
            raise BenchError("`podium serve` has no --http-server option (yet)")
        argv += ["--http-server", http_server]
    return argv


def podium_http_server(requested: str | None, srv: Server) -> str | None:
    """Which HTTP server Podium runs on: the one asked for, else read from its logs/headers."""
    if requested:
        return requested
    server_header = srv.ready_headers.get("server", "").lower()
    for name in ("granian", "uvicorn"):
        if name in server_header:
            return name
    text = srv.log_tail(20000).lower()
    found = [name for name in ("granian", "uvicorn") if name in text]
    if not found and "--http-server" not in podium_help():
        return "uvicorn"  # Podium's only HTTP server, whose start lines it keeps quiet
    return found[0] if len(found) == 1 else None


def mlserver_server(mlserver: Path, folder: Path, port: int) -> Server:
    """MLServer serving `folder` (settings.json + model-settings.json) on REST `port`.

    Ports come from environment variables because values in settings.json would override
    them; gRPC gets a free port (MLServer cannot turn it off), metrics are disabled in
    settings.json.
    """
    env = {
        "MLSERVER_HOST": "127.0.0.1",
        "MLSERVER_HTTP_PORT": str(port),
        "MLSERVER_GRPC_PORT": str(free_port()),
        "MLSERVER_METRICS_PORT": str(free_port()),
        "PYTHONUNBUFFERED": "1",
    }
    return Server(
        name="mlserver",
        argv=[str(mlserver), "start", str(folder)],
        port=port,
        cwd=folder,
        env=env,
    )


def asgi_servers(
    http_servers: Iterator[str] | Sequence[str],
    app: str = "hello_app:app",
    prefix: str = "hello",
    factory: bool = False,
) -> list[Server]:
    """An ASGI app from bench/ (the hello app by default) under each named HTTP server."""
    out: list[Server] = []
    for name in http_servers:
        port = free_port()
        extra = ["--factory"] if factory else []
        if name == "granian":
            argv = [
                str(repo_bin("granian")),
                "--interface",
                "asgi",
                "--workers",
                "1",
                "--loop",
                "uvloop",
                "--no-access-log",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                *extra,
                app,
            ]
        elif name == "uvicorn":
            argv = [
                str(repo_bin("uvicorn")),
                "--loop",
                "uvloop",
                "--http",
                "httptools",
                "--no-access-log",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                *extra,
                app,
            ]
        else:
            raise BenchError(f"unknown HTTP server {name!r}")
        out.append(Server(name=f"{prefix}-{name}", argv=argv, port=port, cwd=BENCH))
    return out


# -- callgrind (instruction counts, unmoved by load) ----------------------------------------------


def callgrind_dump(label: str) -> None:
    """In a process running under callgrind: have it write (and zero) its counters now, as the
    dump ``label``."""
    subprocess.run(
        ["callgrind_control", f"--dump={label}", str(os.getpid())],
        check=True,
        capture_output=True,
        timeout=300,
    )


def callgrind_dumps(out: Path) -> dict[str, int]:
    """The instructions of each labelled dump (:func:`callgrind_dump`) that callgrind wrote
    beside ``out`` (its ``--callgrind-out-file``), by label."""
    found: dict[str, int] = {}
    for dump in out.parent.glob(out.name + ".*"):
        text = dump.read_text(errors="replace")
        label = re.search(r"(?m)^desc: Trigger: .*?(\S+)\s*$", text)
        total = re.search(r"(?m)^(?:summary|totals):\s*(\d+)", text)
        if label and total:
            found[label.group(1)] = int(total.group(1))
    return found
