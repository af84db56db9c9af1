"""Side by side with the real MLServer 1.7.1 (issue 22): MLServer's own ``docs/examples`` at the
1.7.1 tag, started with the same command (``mlserver start FOLDER`` / ``podium mlserver start
FOLDER``), the same ``settings.json`` and ``MLSERVER_*`` variables, sent the same requests; every
answer written to ``docs/mlserver-conformance.md`` (and ``.json``), with what differs.

    python3 tests/conformance/mlserver/run.py [--examples DIR] [--only custom-json,...]

The first run makes ``tests/conformance/mlserver/.venv`` (gitignored) with ``mlserver==1.7.1``
and ``uvloop<0.22`` (1.7.1 does not start with uvloop 0.22). The examples come from ``--examples``
(a checkout's ``docs/examples``) or from the MLServer mirror at the 1.7.1 tag. Podium runs from
this checkout's ``src`` with the interpreter running this script. Not part of the default test
run (``tests/conftest.py`` ignores ``tests/conformance``). Loopback only, free ports, every
server stopped in ``finally``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
VENV = HERE / ".venv"
REQUIREMENTS = ("mlserver==1.7.1", "uvloop<0.22", "httptools>=0.6", "pillow")  # content-type's
MIRROR = Path("/work/.mirror/SeldonIO+MLServer/repo")
TAG = "1.7.1"
REPORT = ROOT / "docs" / "mlserver-conformance.md"
PATIENCE = 60.0


@dataclass
class Case:
    """One example served by both, and the requests sent to each."""

    id: str
    example: str  # folder under docs/examples
    what: str
    requests: list[tuple[str, str, Any]]  # (method, path, JSON body or None)
    settings: dict[str, Any] | None = None  # written as settings.json (None: the example's)
    podium_flags: tuple[str, ...] = ()  # beside the same start command (named in the report)
    env: dict[str, str] = field(default_factory=dict)


def _echo_request(text: str) -> dict[str, Any]:
    return {"inputs": [{"name": "echo_request", "shape": [len(text)], "datatype": "BYTES",
                        "data": [text]}]}  # fmt: skip


_JSON = json.dumps({"name": "Foo Bar", "message": "Hello from Client (REST)!"})
_CONTENT = {
    "inputs": [
        {"name": "parameters-np", "datatype": "INT32", "shape": [2, 2], "data": [1, 2, 3, 4],
         "parameters": {"content_type": "np"}},
        {"name": "parameters-str", "datatype": "BYTES", "shape": [1], "data": "hello world 😁",
         "parameters": {"content_type": "str"}},
    ]
}  # fmt: skip
_GENERATE = {
    "inputs": [{"name": "prompt", "shape": [1], "datatype": "BYTES",
                "data": ["What is the capital of France?"],
                "parameters": {"content_type": "str"}}],
    "outputs": [{"name": "output"}],
}  # fmt: skip

CASES = [
    Case("custom-json", "custom-json", "the example as published (settings.json: debug \"true\")",
         [("POST", "/v2/models/json-hello-world/infer", _echo_request(_JSON)),
          ("GET", "/v2/models/json-hello-world", None),
          ("GET", "/v2/models/json-hello-world/ready", None),
          ("GET", "/v2/health/ready", None),
          ("POST", "/v2/repository/index", {}),
          ("POST", "/v2/models/nope/infer", _echo_request("{}"))]),
    Case("content-type", "content-type", "content types from the request's parameters",
         [("POST", "/v2/models/content-type-example/infer", _CONTENT),
          ("GET", "/v2/models/content-type-example", None)]),
    Case("streaming", "streaming", "generate_stream as the README sends it (parallel_workers 0)",
         [("POST", "/v2/models/text-model/generate_stream", _GENERATE),
          ("POST", "/v2/models/text-model/infer", _GENERATE),
          ("GET", "/v2/models/text-model", None)]),
    Case("settings", "custom-json", "a settings.json with server-wide keys",
         [("GET", "/v2/health/ready", None),
          ("POST", "/v2/models/json-hello-world/infer", _echo_request(_JSON)),
          ("GET", "METRICS/metrics", None)],
         settings={"debug": False, "parallel_workers": 0, "metrics_endpoint": None,
                   "gzip_enabled": False, "load_models_at_startup": True}),
    Case("unload", "custom-json", "unload through the repository API, then infer",
         [("POST", "/v2/repository/models/json-hello-world/unload", {}),
          ("POST", "/v2/models/json-hello-world/infer", _echo_request(_JSON)),
          ("GET", "/v2/models/json-hello-world", None),
          ("GET", "/v2/models/json-hello-world/ready", None),
          ("POST", "/v2/repository/index", {}),
          ("POST", "/v2/repository/models/json-hello-world/load", {}),
          ("POST", "/v2/models/json-hello-world/infer", _echo_request(_JSON))],
         podium_flags=("--model-control", "inference")),
    Case("env-model", "custom-json", "no model-settings.json: the model of MLSERVER_MODEL_*",
         [("POST", "/v2/models/env-json/infer", _echo_request(_JSON))],
         env={"MLSERVER_MODEL_IMPLEMENTATION": "jsonmodels.JsonHelloWorldModel",
              "MLSERVER_MODEL_NAME": "env-json"}),
]  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ensure_venv() -> Path:
    """MLServer 1.7.1's ``mlserver`` command, in its own venv (made when missing)."""
    mlserver = VENV / "bin" / "mlserver"
    if not mlserver.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(VENV / "bin" / "pip"), "install", "--quiet",
                        "--disable-pip-version-check", *REQUIREMENTS], check=True)  # fmt: skip
    return mlserver


def examples(given: Path | None, into: Path) -> Path:
    """``docs/examples`` at 1.7.1: ``given``, or the cases' examples read file by file from the
    mirror into ``into`` (the mirror lacks some large files of other examples)."""
    if given is not None:
        return given
    git = ["git", "--git-dir", str(MIRROR)]
    for name in sorted({case.example for case in CASES}):
        listed = subprocess.run([*git, "ls-tree", "-r", "--name-only", TAG,
                                 f"docs/examples/{name}"],
                                check=True, capture_output=True, text=True).stdout  # fmt: skip
        for path in listed.split():
            data = subprocess.run([*git, "show", f"{TAG}:{path}"], check=True,
                                  capture_output=True).stdout  # fmt: skip
            target = into / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
    return into / "docs" / "examples"


@contextlib.contextmanager
def serving(command: list[str], env: dict[str, str], url: str, cwd: Path) -> Iterator[list[str]]:
    """``command`` started in its own process group, until ``url``'s readiness is 200 (or
    PATIENCE passed, or it exited); the list it yields holds its output once stopped."""
    log = tempfile.TemporaryFile("w+")
    proc = subprocess.Popen(command, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)  # fmt: skip
    output: list[str] = []
    try:
        deadline = time.monotonic() + PATIENCE
        while time.monotonic() < deadline and proc.poll() is None:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/v2/health/ready", timeout=2).status_code == 200:
                    break
            time.sleep(0.3)
        yield output
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        log.seek(0)
        output.append(log.read())
        log.close()


def observe(method: str, url: str, body: Any) -> dict[str, Any]:
    """What a client sees: the status, and the body with generated fields masked."""
    try:
        r = httpx.request(method, url, json=body, timeout=30)
    except httpx.TransportError as exc:
        return {"error": type(exc).__name__}
    seen: dict[str, Any] = {"status": r.status_code}
    kind = r.headers.get("content-type", "")
    if "event-stream" in kind:
        seen["events"] = [_masked(json.loads(line[5:])) for line in r.text.splitlines()
                          if line.startswith("data:")]  # fmt: skip
    elif r.content:
        try:
            seen["body"] = _masked(r.json())
        except ValueError:
            seen["text"] = r.text[:200]
    return seen


def _masked(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: ("<id>" if k == "id" else _masked(v)) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [_masked(v) for v in value]
    return value


def run_case(case: Case, mlserver: Path, source: Path, work: Path) -> dict[str, Any]:
    answers: dict[str, Any] = {}
    for server in ("mlserver", "podium"):
        folder = work / f"{case.id}-{server}"
        subprocess.run(["cp", "-r", str(source / case.example), str(folder)], check=True)
        if case.settings is not None:
            (folder / "settings.json").write_text(json.dumps(case.settings))
        if case.id == "env-model":
            (folder / "model-settings.json").unlink()
        http, grpc, metrics = free_port(), free_port(), free_port()
        env = {**os.environ, **case.env, "MLSERVER_HOST": "127.0.0.1",
               "MLSERVER_HTTP_PORT": str(http), "MLSERVER_GRPC_PORT": str(grpc),
               "MLSERVER_METRICS_PORT": str(metrics)}  # fmt: skip
        if server == "mlserver":
            command = [str(mlserver), "start", str(folder)]
        else:
            env["PYTHONPATH"] = str(ROOT / "src")
            command = [sys.executable, "-m", "podium", "mlserver", "start", str(folder),
                       "--management-port", str(free_port()), "--grpc-management-port",
                       str(free_port()), "--no-auth", *case.podium_flags]  # fmt: skip
        url = f"http://127.0.0.1:{http}"
        seen: dict[str, Any] = {}
        with serving(command, env, url, folder) as output:
            for index, (method, path, body) in enumerate(case.requests, 1):
                target = path.replace("METRICS", f"http://127.0.0.1:{metrics}")
                full = target if target.startswith("http") else url + target
                seen[f"{index}. {method} {path}"] = observe(method, full, body)
        answers[server] = seen
        answers[f"{server} log"] = output[0][-3000:] if output else ""
    return answers


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Where ``a`` (MLServer's answer) and ``b`` (Podium's) differ, as paths into them."""
    if type(a) is not type(b):
        return [path or "/"]
    if isinstance(a, dict):
        found: list[str] = []
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                found.append(f"{path}/{key}")
            else:
                found += differences(a[key], b[key], f"{path}/{key}")
        return found
    if isinstance(a, list):
        if len(a) != len(b):
            return [f"{path} (length)"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True))
                for d in differences(x, y, f"{path}[{i}]")]  # fmt: skip
    return [] if a == b else [path or "/"]


#: Each difference a run shows, judged: (a word of the request, the start of the path) → why.
JUDGED: list[tuple[str, str, str]] = [
    (
        "infer",
        "/body/parameters",
        "MLServer's data plane adds its CloudEvents headers to every answer's `parameters` "
        "and its REST layer moves them to HTTP headers, leaving `{}`; Podium sends no "
        "CloudEvents headers and leaves out an empty `parameters`: a client reading "
        "`parameters` gets no value either way",
    ),
    (
        "/ready",
        "/body",
        "the same status; Podium's readiness answers carry KServe's JSON body "
        "(`ready`), MLServer's none",
    ),
    (
        "GET /v2/models/",
        "/body/parameters/state",
        "deliberate: Podium adds the version's "
        "`state`, and lists the served versions when model-settings.json has no `versions` "
        '(docs/mlserver.md, "Metadata and repository index")',
    ),
    ("GET /v2/models/", "/body/versions", "deliberate: as above"),
    (
        "GET /v2/models/json-hello-world/ready",
        "/status",
        "deliberate: an unloaded model's readiness is 503 (not ready) where MLServer forgets "
        "the model (404); neither is 200, which is what clients read (docs/mlserver.md, "
        '"Unloaded models")',
    ),
    (
        "GET /v2/models/json-hello-world",
        "/status",
        "deliberate: an unloaded model's metadata still answers, with its `state`, so that a "
        "client sees it and can load it again; MLServer forgets it (404)",
    ),
    (
        "index",
        "/body[0]/reason",
        "deliberate: Podium adds the `version`, and a `reason` only when there is one (after "
        "an unload: `unloaded on request`), where MLServer sends an empty one "
        '(docs/mlserver.md, "Metadata and repository index")',
    ),
    (
        "nope",
        "/body/error",
        "deliberate: the same status; one wording per error on every "
        "protocol, Triton's, which its clients match on (MLServer's: `Model nope not found`)",
    ),
    (
        "infer",
        "/body/error",
        "deliberate: the same 404; Triton's words for an unloaded model "
        '(docs/mlserver.md, "Unloaded models")',
    ),
    (
        "generate_stream",
        "/events",
        "MLServer adds CloudEvents headers (`Ce-*`) to each item's "
        "parameters; Podium sends none (`mlserver.cloudevents` is MLServer's server: not "
        "provided, docs/mlserver.md)",
    ),
    (
        "text-model/infer",
        "/body",
        "the same 500; Podium's body names the model and the error "
        "(JSON), MLServer's is Starlette's plain text",
    ),
]


def judged(request: str, paths: list[str]) -> str:
    if "/status" in paths:  # a status that differs is what matters first
        paths = ["/status", *(p for p in paths if p != "/status")]
    for word, start, why in JUDGED:
        if word in request and paths and paths[0].startswith(start):
            return why
    return "not judged yet"


def report(results: dict[str, dict[str, Any]]) -> str:
    lines = [
        "# Conformance: Podium side by side with MLServer 1.7.1",
        "",
        "Generated by `tests/conformance/mlserver/run.py`; every run overwrites this file (and",
        "`mlserver-conformance.json`, with every answer). Do not edit by hand.",
        "",
        f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- reference: MLServer {TAG} (`mlserver start FOLDER`), its `docs/examples` at {TAG}",
        "- Podium: `podium mlserver start FOLDER` (plus `--management-port`, "
        "`--grpc-management-port`, `--no-auth`, and any flag the case names)",
        "- both: the example's `settings.json` (or the case's), `MLSERVER_HOST`/`_HTTP_PORT`/"
        "`_GRPC_PORT`/`_METRICS_PORT` on free loopback ports; `id` fields masked",
        "",
        "| case | request | verdict | where | why, and who is right | MLServer | Podium |",
        "|---|---|---|---|---|---|---|",
    ]
    for case in CASES:
        if case.id not in results:
            continue
        got = results[case.id]
        for key in got["mlserver"]:
            a, b = got["mlserver"][key], got["podium"][key]
            paths = differences(a, b)
            verdict = "same" if not paths else "**differs**"
            if "/status" in paths:
                paths = ["/status", *(p for p in paths if p != "/status")]
            where = ", ".join(f"`{p}`" for p in paths[:3]) + (" …" if len(paths) > 3 else "")
            why = judged(key, paths) if paths else ""
            shown = [json.dumps(x, ensure_ascii=False)[:120].replace("|", "\\|") for x in (a, b)]
            lines.append(
                f"| {case.id} | `{key}` | {verdict} | {where} | {why} | `{shown[0]}` | `{shown[1]}` |"
            )
    lines += ["", "Cases:", ""]
    lines += [f"- `{c.id}`: {c.what} (example `{c.example}`"
              + (f"; Podium with `{' '.join(c.podium_flags)}`" if c.podium_flags else "") + ")"
              for c in CASES if c.id in results]  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=Path, default=None)
    parser.add_argument("--only", default=None)
    args = parser.parse_args()
    mlserver = ensure_venv()
    wanted = set(args.only.split(",")) if args.only else None
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        source = examples(args.examples, Path(tmp))
        for case in CASES:
            if wanted is None or case.id in wanted:
                print(f"case {case.id} ...", file=sys.stderr, flush=True)
                results[case.id] = run_case(case, mlserver, source, Path(tmp))
    REPORT.write_text(report(results), encoding="utf-8")
    REPORT.with_suffix(".json").write_text(
        json.dumps(results, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    print(f"wrote {REPORT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
