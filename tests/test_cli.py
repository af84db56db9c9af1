"""The ``podium`` command end to end: ``serve`` refusing broken models, ``check``, and
``--config`` files (flags win over them). Every run is a real subprocess with a time-out."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import EXAMPLES, TEST_MODELS

BROKEN = TEST_MODELS / "broken"
SERVE_MODELS = TEST_MODELS / "serve"
PODIUM = [sys.executable, "-m", "podium"]
_READY = re.compile(r"Podium is ready; listening on http-inference (\S+)[ ;]")


def podium(*args: str | Path, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PODIUM, *map(str, args)], capture_output=True, text=True, timeout=timeout
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: A config file's lines that put every listener but HTTP inference on a free port.
OTHER_PORTS = "grpc_port: 0\nmanagement_port: 0\nmetrics_port: 0\ngrpc_management_port: 0\n"


@contextlib.contextmanager
def serving(*args: str | Path, timeout: float = 30) -> Iterator[str]:
    """``podium serve ARGS`` exactly as given (no port added); yield its URL once ready."""
    proc = subprocess.Popen(
        [*PODIUM, "serve", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    found: list[str] = []
    ready = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            match = _READY.search(line)
            if match:
                found.append(match.group(1))
                ready.set()
        ready.set()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        ready.wait(timeout)
        assert found, f"podium serve did not become ready:\n{''.join(lines)}"
        yield found[0]
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        reader.join(5)
        if proc.stdout is not None:
            proc.stdout.close()


# -- serve refuses broken models ------------------------------------------------------------------


def serve_broken(name: str) -> subprocess.CompletedProcess[str]:
    result = podium("serve", BROKEN / name, "--host", "127.0.0.1", "--http-port", "0")
    assert result.returncode != 0
    assert "Podium is ready" not in result.stdout + result.stderr
    return result


def test_serve_refuses_a_model_that_breaks_a_rule() -> None:
    err = serve_broken("rule").stderr
    assert "podium: cannot serve; these models cannot be loaded:\n  - " in err
    assert "model 'rule'" in err
    assert str(BROKEN / "rule" / "model.py") in err
    # Both rules it breaks, each naming the method.
    assert "Model.predict is a generator (streaming) and cannot be combined with postprocess" in err
    assert "Model.postprocess takes only the request" in err


def test_serve_refuses_a_model_that_cannot_be_imported() -> None:
    err = serve_broken("import-error").stderr
    assert "model 'import-error'" in err
    assert str(BROKEN / "import-error" / "model.py") in err
    assert "ModuleNotFoundError" in err and "podium_e2e_no_such_module" in err


def test_serve_refuses_a_model_whose_init_raises() -> None:
    err = serve_broken("init-raises").stderr
    assert "model 'init-raises'" in err
    assert "Model.__init__ raised RuntimeError: cannot open the weights (on purpose)" in err


def test_serve_names_the_file_of_a_model_whose_init_raises() -> None:
    err = serve_broken("init-raises").stderr
    assert str(BROKEN / "init-raises" / "model.py") in err


# -- check ----------------------------------------------------------------------------------------


def test_check_prints_every_definition_error() -> None:
    result = podium("check", BROKEN)
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    rule_file, import_file = BROKEN / "rule" / "model.py", BROKEN / "import-error" / "model.py"
    assert len(errors) == 3, result.stderr
    assert any(f"model 'rule' ({rule_file})" in e and "postprocess takes only" in e for e in errors)
    assert any(f"model 'rule' ({rule_file})" in e and "is a generator" in e for e in errors)
    assert any(
        f"model 'import-error' ({import_file})" in e and "ModuleNotFoundError" in e for e in errors
    )
    assert "3 problem(s) found" in result.stderr
    assert "ok:" not in result.stdout


def test_check_passes_the_examples() -> None:
    result = podium("check", EXAMPLES)
    assert result.returncode == 0, result.stderr
    oks = sorted(line for line in result.stdout.splitlines() if line.startswith("ok: "))
    names = [
        "batch-sum",
        "cancellable",
        "chat-gpt2-tiny",
        "continuous-words",
        "cpu-heavy",
        "echo",
        "io-bound",
    ]
    names += ["minilm-embeddings", "sklearn-iris"]  # minilm: checked without its libraries
    native = [f"ok: model '{n}' ({EXAMPLES / n / 'model.py'})" for n in names]
    mlserver = (
        f"ok: model 'mlserver-text' version '1' ({EXAMPLES / 'mlserver-text' / 'text_model.py'})"
    )
    running = f"ok: model 'running-total' ({EXAMPLES / 'running-total' / 'model.py'})"
    stateful_handler = EXAMPLES / "stateful-sum" / "handler.py"
    stateful = f"ok: model 'stateful-sum' version '1.0' ({stateful_handler})"
    streaming_handler = EXAMPLES / "stateful-stream" / "handler.py"
    streaming = f"ok: model 'stateful-stream' version '1.0' ({streaming_handler})"
    text = f"ok: model 'text-stream' ({EXAMPLES / 'text-stream' / 'model.py'})"
    handler = EXAMPLES / "torchserve-handler" / "handler.py"
    torchserve = f"ok: model 'ts-sentiment' version '1.0' ({handler})"
    # MLServer's own runtimes (mlserver_sklearn, mlserver_lightgbm), named by model-settings.json
    runtimes = [
        f"ok: model '{n}' version '1' ({EXAMPLES / n / 'model-settings.json'})"
        for n in ("lightgbm-iris", "sklearn-iris-mlserver")
    ]
    truss = (  # examples/truss-sentiment: a truss (config.yaml, model/model.py)
        f"ok: model 'truss-sentiment' ({EXAMPLES / 'truss-sentiment' / 'model' / 'model.py'}) "
        "(a truss)"
    )
    expected = [*native, mlserver, running, streaming, stateful, text, torchserve, *runtimes]
    expected.append(truss)
    assert oks == sorted(expected)
    assert f"{len(expected)} model(s) checked, no problems" in result.stdout
    assert result.stderr == ""


def test_check_names_each_version() -> None:
    result = podium("check", SERVE_MODELS / "versioned", EXAMPLES / "echo")
    assert result.returncode == 0, result.stderr
    for version in ("1", "2", "10"):
        assert f"ok: model 'versioned' version '{version}'" in result.stdout
    assert "ok: model 'echo'" in result.stdout
    assert "4 model(s) checked" in result.stdout


@pytest.mark.parametrize(
    "source",
    [
        "from ts.torch_handler.base_handler import BaseHandler\n\n"
        "class Handler(BaseHandler):\n    pass\n",
        "def handle(data, context):\n    return data\n",
    ],
)
def test_check_of_a_bare_torchserve_handler_says_how_to_check_it(
    tmp_path: Path, source: str
) -> None:
    """A handler file alone is not a TorchServe model (TorchServe's is an archive, or a directory
    with its manifest): the error says how to make one (issue 12)."""
    handler = tmp_path / "handler.py"
    handler.write_text(source)
    result = podium("check", handler)
    assert result.returncode == 1
    assert "This looks like a TorchServe handler" in result.stderr
    assert "podium archive --model-name NAME --handler handler.py --archive-format no-archive" in (
        result.stderr
    )
    made = podium(
        "archive", "--model-name", "h", "--handler", handler, "--archive-format", "no-archive",
        "--export-path", tmp_path / "out",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    checked = podium("check", tmp_path / "out" / "h")
    assert "This looks like" not in checked.stderr  # now judged as a handler


def test_the_start_log_names_what_failed_first_and_serves_only_what_loaded() -> None:
    """The ready line never names a model that failed to load, and comes after the failure."""
    proc = subprocess.Popen(
        [*PODIUM, "serve", TEST_MODELS / "failing-load", "--host", "127.0.0.1",
         "--http-port", "0", "--grpc-port", "0", "--management-port", "0",
         "--grpc-management-port", "0", "--no-auth"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )  # fmt: skip
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "Podium is ready" in line:
                break
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(15)
        assert proc.stdout is not None
        proc.stdout.close()
    ready = lines[-1]
    assert "serving model 'fine'; not serving model 'failing'" in ready, ready
    assert "WARNING" in ready
    failed = [i for i, line in enumerate(lines) if "model 'failing'" in line]
    assert failed[0] < len(lines) - 1  # its failure was told before the ready line


# -- --config -------------------------------------------------------------------------------------


def test_config_file_sets_the_port_the_limit_and_the_models(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "podium.yaml"
    models = os.path.relpath(EXAMPLES / "echo", tmp_path)  # relative to the config file
    config.write_text(
        f"host: 127.0.0.1\nhttp-port: {port}\n{OTHER_PORTS}max_request_size: 300\n"
        f"models: [{models}]\n"
    )
    with serving("--config", config) as url:
        assert url == f"http://127.0.0.1:{port}"
        small = {"inputs": [{"name": "a", "datatype": "INT8", "shape": [1], "data": [1]}]}
        r = httpx.post(url + "/v2/models/echo/infer", json=small)
        assert r.status_code == 200, r.text
        big = {"inputs": [{"name": "a" * 400, "datatype": "INT8", "shape": [1], "data": [1]}]}
        r = httpx.post(url + "/v2/models/echo/infer", json=big)
        assert r.status_code == 413
        assert "300" in r.json()["error"]


def test_flags_win_over_the_config_file(tmp_path: Path) -> None:
    config_port, flag_port = free_port(), free_port()
    config = tmp_path / "podium.yaml"
    config.write_text(
        f"host: 127.0.0.1\nhttp_port: {config_port}\n{OTHER_PORTS}max_request_size: 300\n"
    )
    with serving(
        EXAMPLES / "echo",
        "--config",
        config,
        "--http-port",
        str(flag_port),
        "--max-request-size",
        "100000",
    ) as url:
        assert url == f"http://127.0.0.1:{flag_port}"
        big = {"inputs": [{"name": "a" * 400, "datatype": "INT8", "shape": [1], "data": [1]}]}
        r = httpx.post(url + "/v2/models/echo/infer", json=big)
        assert r.status_code == 200, r.text


def test_unknown_config_key_is_a_usage_error_naming_it(tmp_path: Path) -> None:
    config = tmp_path / "podium.yaml"
    config.write_text("http_port: 0\nhttp_prot: 8080\n")
    result = podium("serve", EXAMPLES / "echo", "--config", config)
    assert result.returncode == 2
    assert "http_prot" in result.stderr
    assert str(config) in result.stderr


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("http_port: [1, 2\n", ["invalid YAML"]),
        ("- just\n- a list\n", ["mapping"]),
        ("http_port: 70000\n", ["http-port", "70000"]),
    ],
)
def test_bad_config_file_is_a_usage_error(tmp_path: Path, text: str, words: list[str]) -> None:
    config = tmp_path / "podium.yaml"
    config.write_text(text)
    result = podium("serve", EXAMPLES / "echo", "--config", config)
    assert result.returncode == 2
    for word in words:
        assert word in result.stderr


def test_serve_without_models_is_a_usage_error() -> None:
    result = podium("serve", "--http-port", "0")
    assert result.returncode == 2
    assert "no models given" in result.stderr


def test_serve_on_a_port_in_use_exits_with_the_address() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = podium(
            "serve",
            EXAMPLES / "echo",
            "--host",
            "127.0.0.1",
            "--http-port",
            str(port),
            "--grpc-port",
            "0",
        )
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr


def test_serve_on_a_grpc_port_in_use_exits_with_the_address() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = podium(
            "serve",
            EXAMPLES / "echo",
            "--host",
            "127.0.0.1",
            "--http-port",
            "0",
            "--grpc-port",
            str(port),
        )
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port} for gRPC" in result.stderr
    assert "Podium is ready" not in result.stdout + result.stderr
