"""TorchServe's start command and config.properties, unchanged (issue 22, section 1):
`podium torchserve --start --ncs --model-store ... --models name=file.mar --ts-config ...`, and
`podium serve --ts-config`; `--stop` stops what `--start` started."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from conftest import EXAMPLES
from test_cli import PODIUM, free_port

from podium._properties import PropertiesError
from podium._torchserve_start import read_ts_config

HANDLER = EXAMPLES / "torchserve-handler"


def _store(tmp_path: Path) -> Path:
    """A model store holding the sentiment handler's archive, as torch-model-archiver makes it."""
    store = tmp_path / "model_store"
    store.mkdir()
    done = subprocess.run(
        [*PODIUM, "archive", "--model-name", "sentiment", "--version", "1.0",
         "--handler", str(HANDLER / "handler.py"), "--config-file",
         str(HANDLER / "model-config.yaml"), "--extra-files", str(HANDLER / "lexicon.json"),
         "--export-path", str(store)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return store


def _properties(tmp_path: Path, store: Path, http: int, extra: str = "") -> Path:
    path = tmp_path / "config.properties"
    path.write_text(
        f"inference_address=http://127.0.0.1:{http}\n"
        f"management_address=http://127.0.0.1:{free_port()}\n"
        f"metrics_address=http://127.0.0.1:{free_port()}\n"
        f"grpc_inference_port={free_port()}\n"
        f"grpc_management_port={free_port()}\n"
        f"model_store={store}\n"
        "number_of_netty_threads=4\n"
        "default_workers_per_model=2\n"
        "disable_token_authorization=true\n" + extra
    )
    return path


def test_config_properties_in_podiums_words(tmp_path: Path) -> None:
    store = tmp_path / "store"
    path = _properties(tmp_path, store, 9080, "job_queue_size=50\nload_models=all\n"
                       'models={"m": {"2.0": {"marName": "m.mar", "batchSize": 4, '
                       '"maxBatchDelay": 100, "defaultVersion": true}}}\n'
                       "metrics_mode=Prometheus \nmetrics_config=metrics.yaml\n"
                       "model_metrics_auto_detect=true\n")  # fmt: skip
    found = read_ts_config(path, environ={})
    # metrics.yaml and metrics_mode are read (docs/metrics.md, "TorchServe's names")
    assert found.settings["ts_metrics"] == "prometheus"
    assert found.settings["metrics_config"] == "metrics.yaml"
    assert any("'model_metrics_auto_detect' is not honoured" in n for n in found.notes)
    assert found.settings["host"] == "127.0.0.1" and found.settings["http_port"] == 9080
    assert found.settings["model_store"] == str(store)
    assert found.settings["auth"] is False  # disable_token_authorization=true
    assert found.defaults == {"min_workers": 2, "max_queue_size": 50}
    assert found.models == {
        "m": {"batch_size": 4, "max_batch_delay": 100, "default_version": "2.0"}
    }
    assert found.load_models == ["all", "m=m.mar"]
    assert any("'number_of_netty_threads' is not honoured" in n for n in found.notes)


def test_cors_keys_set_podiums_cors_settings(tmp_path: Path) -> None:
    """TorchServe's documented example (docs/configuration.md, "Configure CORS")."""
    path = tmp_path / "c.properties"
    path.write_text(
        "cors_allowed_origin=https://yourdomain.com\n"
        "cors_allowed_methods=GET, POST, PUT, OPTIONS\n"
        "cors_allowed_headers=X-Custom-Header\n"
    )
    found = read_ts_config(path, environ={})
    assert found.settings == {
        "cors_allow_origins": ("https://yourdomain.com",),
        "cors_allow_methods": ("GET", "POST", "PUT", "OPTIONS"),
        "cors_allow_headers": ("X-Custom-Header",),
    }
    assert found.notes == []


def test_envvars_config_and_refusals(tmp_path: Path) -> None:
    path = tmp_path / "c.properties"
    path.write_text("enable_envvars_config=true\ninference_address=http://0.0.0.0:8080\n")
    found = read_ts_config(path, environ={"TS_INFERENCE_ADDRESS": "http://127.0.0.1:9999"})
    assert found.settings["http_port"] == 9999
    path.write_text("inference_address=https://0.0.0.0:8443\n")
    with pytest.raises(PropertiesError, match="HTTPS"):
        read_ts_config(path, environ={})
    path.write_text('models={"m": {"1": {"frobnicate": 1}}}\n')
    with pytest.raises(PropertiesError, match="'frobnicate'"):
        read_ts_config(path, environ={})


def _wait_ready(url: str, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        try:
            if httpx.get(url + "/ping", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise AssertionError("the server did not become ready")


def test_torchserves_start_command_serves_and_stop_stops(tmp_path: Path) -> None:
    store = _store(tmp_path)
    shutil.copy(store / "sentiment.mar", store / "again.mar")
    http = free_port()
    config = _properties(tmp_path, store, http, "models={\\\n  \"sent\": {\"1.0\": {\\\n"
                         '    "minWorkers": 1, "maxWorkers": 3, "responseTimeout": 60,\\\n'
                         # the archive named here too, as TorchServe's custom_metrics example
                         # does: one model, not two
                         '    "marName": "sentiment.mar"}}}\n'
                         "cors_allowed_origin=https://yourdomain.com\n"
                         "cors_allowed_methods=GET, POST, PUT, OPTIONS\n"
                         "cors_allowed_headers=X-Custom-Header\n")  # fmt: skip
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen(
        [*PODIUM, "torchserve", "--start", "--ncs", "--model-store", str(store),
         "--models", "sent=sentiment.mar", "again=again.mar", "--ts-config", str(config),
         "--workflow-store", str(tmp_path / "wf_store")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{http}"
    try:
        _wait_ready(url, proc)
        r = httpx.post(url + "/predictions/sent", json={"text": "I love it"}, timeout=30)
        assert r.status_code == 200, r.text
        # cors_allowed_*: a page of that origin may call the inference API, preflight included
        page = {"origin": "https://yourdomain.com"}
        r = httpx.post(url + "/predictions/sent", json={"text": "ok"}, headers=page, timeout=30)
        assert r.headers["access-control-allow-origin"] == "https://yourdomain.com"
        asks = {"access-control-request-method": "PUT",
                "access-control-request-headers": "X-Custom-Header"}  # fmt: skip
        r = httpx.options(url + "/predictions/sent", headers=page | asks, timeout=10)
        assert r.status_code == 200, r.text
        assert "PUT" in r.headers["access-control-allow-methods"]
        assert "x-custom-header" in r.headers["access-control-allow-headers"].lower()
        other = {"origin": "https://elsewhere.example"}
        r = httpx.post(url + "/predictions/sent", json={"text": "ok"}, headers=other, timeout=30)
        assert "access-control-allow-origin" not in r.headers
        # several models after one --models, as TorchServe's argparse (nargs="+") takes them
        r = httpx.post(url + "/predictions/again", json={"text": "I love it"}, timeout=30)
        assert r.status_code == 200, r.text
        # models= gave it 1-3 workers (the archive's own model-config.yaml says 1-1)
        described = httpx.get(f"http://127.0.0.1:{_port(config, 'management')}/models/sent").json()
        assert described[0]["minWorkers"] == 1 and described[0]["maxWorkers"] == 3
        stopped = subprocess.run(
            [*PODIUM, "torchserve", "--stop"], capture_output=True, text=True, env=env, timeout=90
        )
        assert stopped.returncode == 0 and "stopped" in stopped.stdout
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    assert proc.stdout is not None
    log = proc.stdout.read()
    proc.stdout.close()
    assert "'number_of_netty_threads' is not honoured" in log
    assert "--workflow-store" in log and "workflows (.war, /workflows, /wfpredict) are not" in log


def _port(config: Path, which: str) -> int:
    for line in config.read_text().splitlines():
        if line.startswith(f"{which}_address="):
            return int(line.rsplit(":", 1)[1])
    raise AssertionError(which)


def test_serve_takes_ts_config_with_load_models(tmp_path: Path) -> None:
    store = _store(tmp_path)
    shutil.copy(store / "sentiment.mar", store / "other.mar")
    http = free_port()
    config = _properties(tmp_path, store, http, "load_models=sentiment.mar\n")
    proc = subprocess.Popen(
        [*PODIUM, "serve", "--ts-config", str(config)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{http}"
    try:
        _wait_ready(url, proc)
        listed = httpx.get(f"http://127.0.0.1:{_port(config, 'management')}/models").json()
        assert [m["modelName"] for m in listed["models"]] == ["sentiment"]
        # default_workers_per_model=2, but the archive's model-config.yaml sets minWorkers: 1
        described = httpx.get(f"http://127.0.0.1:{_port(config, 'management')}/models/sentiment")
        assert described.json()[0]["minWorkers"] == 1
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
        if proc.stdout is not None:
            proc.stdout.close()


def test_models_are_named_after_models_flag(tmp_path: Path) -> None:
    """TorchServe's ``--models`` takes several names; a name without it is a usage error."""
    done = subprocess.run([*PODIUM, "torchserve", "--start", "sentiment.mar"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2
    assert "name the models after --models (--models a=a.mar b=b.mar)" in done.stderr


def test_a_bare_model_name_finds_its_archive_in_the_store_by_every_suffix(tmp_path: Path) -> None:
    from podium.cli import _store_entry

    for file in ("a.mar", "b.tar.gz", "c.tgz"):
        (tmp_path / file).write_bytes(b"")
    assert _store_entry("a", tmp_path) == (tmp_path / "a.mar", None)
    assert _store_entry("b", tmp_path) == (tmp_path / "b.tar.gz", None)
    assert _store_entry("x=c", tmp_path) == (tmp_path / "c.tgz", "x")
    assert _store_entry("d", tmp_path) == (tmp_path / "d", None)  # nothing: as named


@pytest.mark.parametrize("content", [None, "not a pid", "stale"])
def test_stop_without_a_started_server_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: str | None
) -> None:
    from click.testing import CliRunner

    from podium import cli

    pid_file = tmp_path / ".podium_model_server.pid"
    if content == "stale":  # the pid of a process that has exited
        done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, timeout=30, check=True)  # fmt: skip
        content = done.stdout.strip()
    if content is not None:
        pid_file.write_text(content)
    monkeypatch.setattr(cli, "PID_FILE", pid_file)
    result = CliRunner().invoke(cli.main, ["torchserve", "--stop"])
    assert result.exit_code == 0, result.output
    assert "no server started with `podium torchserve --start` is running" in result.output
    assert not pid_file.exists()
