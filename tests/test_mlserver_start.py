"""MLServer's start command and server settings, unchanged (issue 22, section 1): `podium
mlserver start FOLDER` and `podium serve FOLDER` read FOLDER/settings.json and the MLSERVER_*
variables as MLServer 1.7.1 reads them; MLSERVER_MODEL_* fill what a model-settings.json leaves
out; a key Podium does not honour is named at start, with why."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
import tritonclient.grpc as triton
from conftest import TEST_MODELS, run_server
from test_cli import PODIUM, free_port
from test_torchserve_start import _wait_ready

from podium._mlserver_start import MLServerSettingsError, read_settings_json
from podium.model.mlserver._settings import read_settings

PROBE = TEST_MODELS / "mlserver" / "probe"


def _settings(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_settings_json_in_podiums_words(tmp_path: Path) -> None:
    path = _settings(
        tmp_path,
        {
            "host": "127.0.0.1", "http_port": 9080, "grpc_port": 9081, "metrics_port": 9082,
            "parallel_workers": 3, "debug": False, "use_structured_logging": True,
            "grpc_max_message_length": 1024, "metrics_endpoint": None,
            "model_repository_root": "models", "load_models_at_startup": True,
            "cors_settings": {"allow_origins": ["*"]}, "gzip_enabled": False,
            "server_name": "mlserver", "frobnicate": 1,
        },
    )  # fmt: skip
    found = read_settings_json(path, environ={})
    assert found.settings == {
        "host": "127.0.0.1", "http_port": 9080, "grpc_port": 9081, "metrics_port": 9082,
        "log_level": "info", "log_format": "json", "grpc_max_message_size": 1024,
        "metrics": False, "models": ("models",), "server_name": "mlserver",
        "cors_allow_origins": ("*",), "gzip": False,
    }  # fmt: skip
    # parallel_workers: the default of every model whose own settings do not say
    assert found.defaults == {"workers": "process", "min_workers": 3, "max_workers": 3}
    notes = "\n".join(found.notes)
    assert "'frobnicate' is not a setting of MLServer 1.7.1" in notes
    # honoured (cors_settings, gzip_enabled), or what repeats Podium's behaviour: quiet
    assert "cors_settings" not in notes and "gzip_enabled" not in notes
    assert "server_name" not in notes and "load_models_at_startup" not in notes
    assert len(found.notes) == 1


def test_parallel_workers_0_is_thread_workers_and_debug_a_log_level(tmp_path: Path) -> None:
    found = read_settings_json(_settings(tmp_path, {"parallel_workers": 0, "debug": True}), {})
    assert found.defaults == {"workers": "thread"}
    assert found.settings == {"log_level": "debug"}


def test_values_read_as_pydantic_reads_them(tmp_path: Path) -> None:
    # MLServer's own examples (custom, custom-json, sklearn, kafka at 1.7.1) write strings
    data = {"debug": "true", "kafka_enabled": "true", "http_port": "9080", "grpc_port": 9081.0}
    found = read_settings_json(_settings(tmp_path, data), {})
    assert found.settings == {"log_level": "debug", "http_port": 9080, "grpc_port": 9081}
    assert any("'kafka_enabled' is not honoured: Podium serves no Kafka" in n for n in found.notes)
    off = read_settings_json(_settings(tmp_path, {"debug": 0, "gzip_enabled": "off"}), {})
    assert off.settings == {"log_level": "info", "gzip": False} and off.notes == []


def test_variables_fill_what_the_file_leaves_out(tmp_path: Path) -> None:
    environ = {
        "MLSERVER_HTTP_PORT": "7000",  # the file says 9080: the file wins
        "mlserver_grpc_port": "7001",  # any case, as pydantic-settings
        "MLSERVER_DEBUG": "yes",
        "MLSERVER_CORS_SETTINGS": '{"allow_origins": ["https://a.example"]}',  # JSON
        "MLSERVER_TRACING_SERVER": "collector:4317",
        "MLSERVER_ENVIRONMENTS_DIR": str(tmp_path / "envs"),
        "MLSERVER_MODEL_NAME": "not-a-server-setting",
    }
    found = read_settings_json(_settings(tmp_path, {"http_port": 9080}), environ)
    assert found.settings == {
        "http_port": 9080, "grpc_port": 7001, "log_level": "debug", "otel": True,
        "cors_allow_origins": ("https://a.example",),
    }  # fmt: skip
    assert found.environ == {
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4317",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc",
        "PODIUM_ENVS": str((tmp_path / "envs").resolve()),
    }
    assert not any("cors_settings" in n for n in found.notes)
    # without a file, the variables alone (mlserver start's Settings())
    alone = read_settings_json(None, {"MLSERVER_HTTP_PORT": "7000"})
    assert alone.settings == {"http_port": 7000}


@pytest.mark.parametrize(
    ("data", "environ", "words"),
    [
        ({"http_port": "80a"}, {}, "'http_port' must be an integer"),
        ({"http_port": 80.5}, {}, "'http_port' must be an integer"),
        ({"debug": "sometimes"}, {}, "'debug' must be true or false"),
        ({"debug": 2}, {}, "'debug' must be true or false"),
        ({"host": 1}, {}, "'host' must be a string"),
        ({"host": None}, {}, "'host' may not be null"),
        ({"parallel_workers": -1}, {}, "'parallel_workers' must be 0 or more"),
        ({}, {"MLSERVER_HTTP_PORT": "eighty"}, "MLSERVER_HTTP_PORT must be a number"),
        ({}, {"MLSERVER_DEBUG": "maybe"}, "MLSERVER_DEBUG must be true or false"),
        ({}, {"MLSERVER_EXTENSIONS": "[oops"}, "MLSERVER_EXTENSIONS must be JSON"),
        ({"cors_settings": ["*"]}, {}, "'cors_settings' must be an object"),
        (
            {"cors_settings": {"allow_origins": "*"}},
            {},
            "'cors_settings.allow_origins' must be a list",
        ),
        ({"cors_settings": {"max_age": "long"}}, {}, "'cors_settings.max_age' must be an integer"),
    ],
)
def test_values_mlserver_refuses_are_refused(
    tmp_path: Path, data: dict[str, Any], environ: dict[str, str], words: str
) -> None:
    with pytest.raises(MLServerSettingsError, match=words):
        read_settings_json(_settings(tmp_path, data), environ)


def test_cors_settings_key_by_key(tmp_path: Path) -> None:
    cors = {
        "allow_origins": ["https://a.example"], "allow_origin_regex": "https://.*\\.b\\.example",
        "allow_credentials": "true", "allow_methods": ["GET", "POST"], "allow_headers": ["X-A"],
        "expose_headers": ["X-B"], "max_age": 60, "allow_everything": True, "max_age_2": None,
    }  # fmt: skip
    data = {"cors_settings": cors, "gzip_enabled": True, "root_path": "/ml"}
    found = read_settings_json(_settings(tmp_path, data), {})
    assert found.settings == {
        "cors_allow_origins": ("https://a.example",),
        "cors_allow_origin_regex": "https://.*\\.b\\.example",
        "cors_allow_credentials": True, "cors_allow_methods": ("GET", "POST"),
        "cors_allow_headers": ("X-A",), "cors_expose_headers": ("X-B",), "cors_max_age": 60,
        "gzip": True, "root_path": "/ml",
    }  # fmt: skip
    assert [n.split(": ", 1)[1] for n in found.notes] == [
        "'cors_settings.allow_everything' is not a setting of MLServer 1.7.1; ignored (as "
        "MLServer ignores it)",
        "'cors_settings.max_age_2' is not a setting of MLServer 1.7.1; ignored (as MLServer "
        "ignores it)",
    ]
    # null: MLServer's default (no CORS at all for the whole object)
    assert read_settings_json(_settings(tmp_path, {"cors_settings": None}), {}).settings == {}


def test_model_variables_fill_what_model_settings_leave_out(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "model-settings.json").write_text(
        json.dumps({"implementation": "models.M", "parameters": {"version": "2"}})
    )
    environ = {
        "MLSERVER_MODEL_NAME": "from-env",
        "MLSERVER_MODEL_IMPLEMENTATION": "other.Ignored",  # the file says: the file wins
        "MLSERVER_MODEL_MAX_BATCH_SIZE": "4",
        "MLSERVER_MODEL_MAX_BATCH_TIME": "0.5",
        "MLSERVER_MODEL_URI": "/models/weights",
        "MLSERVER_MODEL_EXTRA": '{"k": 1}',
        "MLSERVER_MODEL_VERSION": "9",  # the file says 2
    }
    source = read_settings(folder / "model-settings.json", environ)
    assert (source.config.name, source.config.version) == ("from-env", "2")
    assert (source.config.batch_size, source.config.max_batch_delay_ms) == (4, 500)
    runtime = source.mlserver_parts().settings
    assert runtime["implementation"] == "models.M"
    assert runtime["parameters"] == {"version": "2", "uri": "/models/weights", "extra": {"k": 1}}
    with pytest.raises(Exception, match="MLSERVER_MODEL_MAX_BATCH_SIZE must be a number"):
        read_settings(folder / "model-settings.json", {"MLSERVER_MODEL_MAX_BATCH_SIZE": "x"})


def _start(folder: Path, env: dict[str, str], management: int = 0) -> subprocess.Popen[str]:
    """``podium mlserver start FOLDER``, its management API on ``management`` (MLServer has
    none; 0: any free port)."""
    command = [*PODIUM, "mlserver", "start", str(folder), "--management-port", str(management),
               "--grpc-management-port", "0", "--no-auth"]  # fmt: skip
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        start_new_session=True,
    )  # fmt: skip


def _infer(url: str) -> dict[str, Any]:
    body = {"inputs": [{"name": "x", "datatype": "FP64", "shape": [2], "data": [1.5, 2]}]}
    r = httpx.post(f"{url}/v2/models/mls-probe/infer", json=body, timeout=30)
    assert r.status_code == 200, r.text
    return {o["name"]: o["data"] for o in r.json()["outputs"]}


def test_mlserver_start_serves_a_folder_as_mlserver_does(tmp_path: Path) -> None:
    folder = tmp_path / "models"
    shutil.copytree(PROBE, folder / "probe")
    http, grpc_port, management = free_port(), free_port(), free_port()
    _settings(
        folder,
        {
            "debug": False, "host": "127.0.0.1", "http_port": http, "grpc_port": grpc_port,
            "metrics_endpoint": None, "parallel_workers": 0,
            "cors_settings": {"allow_origins": ["*"]},
        },
    )  # fmt: skip
    env = {
        **os.environ,
        "MLSERVER_GRPC_PORT": "1",  # the file wins
        "MLSERVER_MODEL_URI": str(tmp_path / "weights"),  # the model's file has no uri
    }
    proc = _start(folder, env, management)
    url = f"http://127.0.0.1:{http}"
    try:
        _wait_ready(url, proc)
        outputs = _infer(url)
        assert outputs["x"] == [3.0, 4.0]
        assert json.loads(outputs["info"][0])["uri"] == str(tmp_path / "weights")
        with triton.InferenceServerClient(f"127.0.0.1:{grpc_port}") as client:
            assert client.is_model_ready("mls-probe")
        # parallel_workers 0: in the server's process, as MLServer
        described = httpx.get(f"http://127.0.0.1:{management}/models/mls-probe", timeout=10)
        assert described.json()[0]["workers"][0]["pid"] == proc.pid
        # cors_settings honoured; gzip on by default, as MLServer's gzip_enabled
        asked = {"Origin": "https://a.example", "Accept-Encoding": "gzip"}
        api = httpx.get(f"{url}/v2/docs/openapi.json", headers=asked, timeout=10)
        assert api.headers["access-control-allow-origin"] == "*"
        assert api.headers["content-encoding"] == "gzip", api.headers
        assert api.json()["openapi"]
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
    assert proc.stdout is not None
    log = proc.stdout.read()
    proc.stdout.close()
    assert "MLServer's settings read from" in log and "settings.json" in log
    assert "cors_settings" not in log
    ready = next(line for line in log.splitlines() if "Podium is ready" in line)
    assert "metrics" not in ready.split("serving")[0]  # metrics_endpoint null: no listener


def test_serve_picks_up_the_settings_beside_the_models(tmp_path: Path) -> None:
    folder = tmp_path / "models"
    shutil.copytree(PROBE, folder / "probe")
    _settings(folder, {"parallel_workers": 1, "load_models_at_startup": False})
    with run_server(folder) as server:  # the flags' ports win over MLServer's
        assert _infer(server.url)["x"] == [3.0, 4.0]
        described = httpx.get(f"{server.management_url}/models/mls-probe", timeout=10).json()
        assert described[0]["workers"][0]["pid"] != server.proc.pid  # a worker process
    assert "'load_models_at_startup' is not honoured" in server.log


def test_mlserver_start_serves_the_model_of_the_variables_alone(tmp_path: Path) -> None:
    folder = tmp_path / "runtime"
    folder.mkdir()
    shutil.copy(PROBE / "models.py", folder / "models.py")  # no model-settings.json
    http = free_port()
    env = {
        **os.environ,
        "MLSERVER_HOST": "127.0.0.1",
        "MLSERVER_HTTP_PORT": str(http),
        "MLSERVER_GRPC_PORT": str(free_port()),
        "MLSERVER_METRICS_PORT": str(free_port()),
        "MLSERVER_MODEL_IMPLEMENTATION": "models.ProbeModel",
        "MLSERVER_MODEL_NAME": "mls-probe",
        "MLSERVER_MODEL_EXTRA": '{"factor": 3}',
    }
    proc = _start(folder, env)
    try:
        _wait_ready(f"http://127.0.0.1:{http}", proc)
        assert _infer(f"http://127.0.0.1:{http}")["x"] == [4.5, 6.0]
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
        if proc.stdout is not None:
            proc.stdout.close()
    # without MLSERVER_MODEL_IMPLEMENTATION there is nothing to serve, as with MLServer
    del env["MLSERVER_MODEL_IMPLEMENTATION"]
    refused = _start(folder, env)
    output, _ = refused.communicate(timeout=60)
    assert refused.returncode != 0 and "holds no model" in output


def test_serve_with_settings_and_no_folder_serves_the_model_repository_root(
    tmp_path: Path,
) -> None:
    shutil.copytree(PROBE, tmp_path / "models" / "probe")
    settings = _settings(tmp_path, {"model_repository_root": str(tmp_path / "models")})
    with run_server(args=("--settings", str(settings))) as server:
        assert _infer(server.url)["x"] == [3.0, 4.0]
    assert f"MLServer's settings read from {settings}" in server.log
