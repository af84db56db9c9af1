"""``podium serve`` and ``podium check`` on trusses, end to end (real subprocesses): a lone truss
that cannot load exits as Truss's server does unless told to keep running; check reports a truss
and the requirements it names that are not installed."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
from conftest import TEST_MODELS
from test_cli import podium, serving

TRUSSES = TEST_MODELS / "trusses"
PORTS = ("--host", "127.0.0.1", "--http-port", "0", "--grpc-port", "0", "--management-port",
         "0", "--grpc-management-port", "0", "--metrics-port", "0")  # fmt: skip


def test_a_lone_truss_that_cannot_load_exits_1_with_the_reason() -> None:
    result = podium("serve", TRUSSES / "failing-load", *PORTS)
    assert result.returncode == 1
    err = result.stderr
    assert "model 'failing-truss'" in err
    assert "RuntimeError: the weights are not there" in err
    assert "--keep-running" in err


def test_keep_running_keeps_a_lone_failed_truss_up_and_not_ready() -> None:
    with serving(TRUSSES / "failing-load", *PORTS, "--keep-running") as url:
        ready = httpx.get(url.replace("0.0.0.0", "127.0.0.1") + "/v2/health/ready")
        assert ready.status_code == 503


def test_a_failed_truss_beside_other_models_leaves_the_server_up() -> None:
    with serving(TRUSSES, *PORTS) as url:  # a folder: the hello truss serves
        base = url.replace("0.0.0.0", "127.0.0.1")
        r = httpx.post(base + "/v1/models/hello-truss:predict", json={"name": "Ada"})
        assert r.status_code == 200
        assert r.json() == {"greeting": "Hello, Ada!"}


def test_check_reports_a_truss_and_its_missing_requirements(tmp_path: Path) -> None:
    root = tmp_path / "t"
    shutil.copytree(TRUSSES / "hello", root)
    config = (root / "config.yaml").read_text()
    (root / "config.yaml").write_text(config + "requirements: [podium-absent-package>=1]\n")
    result = podium("check", root)
    assert result.returncode == 0, result.stderr
    assert f"ok: model 'hello-truss' ({root / 'model' / 'model.py'}) (a truss)" in result.stdout
    assert "requirements not installed here: podium-absent-package>=1" in result.stdout
    assert "pip install podium-absent-package>=1" in result.stdout


def test_a_server_of_one_truss_answers_truss_ping() -> None:
    with serving(TRUSSES / "hello", *PORTS) as url:
        base = url.replace("0.0.0.0", "127.0.0.1")
        r = httpx.get(base + "/ping")
        assert (r.status_code, r.json()) == (200, {})  # Truss's (SageMaker's) answer
    with serving(TRUSSES / "failing-load", *PORTS, "--keep-running") as url:
        r = httpx.get(url.replace("0.0.0.0", "127.0.0.1") + "/ping")
        assert r.status_code == 503
        assert r.json()["error"].startswith("Model with name failing-truss is not ready.")
        assert r.headers["x-baseten-error-code"] == "600"
    with serving(TRUSSES, *PORTS) as url:  # beside another model: TorchServe's /ping
        r = httpx.get(url.replace("0.0.0.0", "127.0.0.1") + "/ping")
        assert r.json()["status"] in ("Healthy", "Partial Healthy")
