"""deploy/kserve/ checked without a cluster: the manifests load into KServe's own SDK model
classes (strictly: a field the SDK does not know fails), the Dockerfile passes hadolint, and the
image, the ServingRuntimes and the InferenceServices agree with each other and with Podium's CLI
(ports, probes, the model path, the protocol each one serves)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from kserve_fixtures import (
    DOCKERFILE,
    KSERVE_MODEL_DIR,
    RUNTIMES,
    SERVICES,
    container,
    dockerfile,
    documents,
    final_stage,
    run_sdk,
    runtimes,
    tools_python,
)

from podium.cli import main as cli
from podium.config import SETTINGS, ServerConfig

__all__ = ["tools_python"]  # the fixture, imported for the tests below

# The first test to ask for the tools' venv may have to install it (about a minute, once).
pytestmark = pytest.mark.timeout(600)

# KServe's conventions for a custom predictor (its own Python model server's defaults): OIP REST
# on 8080, gRPC on 8081.
HTTP_PORT, GRPC_PORT = 8080, 8081

#: Kubernetes' default terminationGracePeriodSeconds, and Knative's default revision timeout (which
#: Knative makes the pod's grace period).
DEFAULT_GRACE_S, KNATIVE_DEFAULT_TIMEOUT_S = 30, 300
#: After --graceful-timeout: about a second to cut the calls still running, at most 5 s to stop
#: worker processes (docs/operations.md, "Shutdown").
CUT_S, WORKERS_STOP_S = 1, 5


def _image() -> dict[str, object]:
    stage = final_stage(dockerfile())
    by_keyword = {ins.keyword: ins for ins in stage}
    return {
        "user": by_keyword["USER"].args,
        "entrypoint": by_keyword["ENTRYPOINT"].exec_form(),
        "cmd": by_keyword["CMD"].exec_form(),
        "healthcheck": by_keyword["HEALTHCHECK"].exec_form(),
        "expose": {int(p.split("/")[0]) for p in by_keyword["EXPOSE"].args.split()},
        "workdir": by_keyword["WORKDIR"].args,
    }


def _serve_config(args: list[str]) -> ServerConfig:
    """What ``podium ARGS`` (a ``serve`` command line) sets, parsed by Podium's own CLI."""
    assert args[0] == "serve", args
    serve = cli.commands["serve"]  # type: ignore[attr-defined]
    context = serve.make_context("serve", list(args[1:]))
    params = context.params
    return ServerConfig(
        **{k: v for k, v in params.items() if k in SETTINGS and v is not None},
        models=tuple(str(p) for p in params["paths"]),
    )


def test_manifests_load_into_the_kserve_sdk_model_classes(tools_python: Path) -> None:
    answer = run_sdk(tools_python, "manifests", str(RUNTIMES), str(SERVICES))
    loaded = {(d["kind"], d["name"]): d for d in answer["documents"]}
    assert [d["errors"] for d in answer["documents"]] == [[]] * 4, answer
    assert {key: d["class"] for key, d in loaded.items()} == {
        ("ServingRuntime", "podium"): "V1alpha1ServingRuntime",
        ("ServingRuntime", "podium-grpc"): "V1alpha1ServingRuntime",
        ("InferenceService", "podium-examples"): "V1beta1InferenceService",
        ("InferenceService", "podium-examples-grpc"): "V1beta1InferenceService",
    }
    # The SDK's serialization gives back every field as written (nothing dropped or renamed),
    # plus the defaults it fills in.
    originals = documents(RUNTIMES) + documents(SERVICES)
    for original, loaded_doc in zip(originals, answer["documents"], strict=True):
        assert _within(original, loaded_doc["serialized"]), (original, loaded_doc["serialized"])


def _within(written: object, serialized: object) -> bool:
    """Whether everything ``written`` says is in ``serialized``, with the same value."""
    if isinstance(written, dict):
        return isinstance(serialized, dict) and all(
            key in serialized and _within(value, serialized[key]) for key, value in written.items()
        )
    if isinstance(written, list):
        return (
            isinstance(serialized, list)
            and len(written) == len(serialized)
            and all(_within(w, s) for w, s in zip(written, serialized, strict=True))
        )
    return written == serialized and type(written) is type(serialized)


def test_the_runtimes_load_as_cluster_serving_runtimes_too(
    tools_python: Path, tmp_path: Path
) -> None:
    text = RUNTIMES.read_text().replace("kind: ServingRuntime", "kind: ClusterServingRuntime")
    (tmp_path / "cluster.yaml").write_text(text)
    answer = run_sdk(tools_python, "manifests", str(tmp_path / "cluster.yaml"))
    assert [(d["class"], d["errors"]) for d in answer["documents"]] == [
        ("V1alpha1ClusterServingRuntime", [])
    ] * 2


def test_the_strict_load_rejects_unknown_fields_wrong_types_and_missing_ones(
    tools_python: Path, tmp_path: Path
) -> None:
    """Without this strictness a misspelt field would pass: the SDK's own deserializer, like
    the API server without field validation, drops what it does not know."""
    bad = RUNTIMES.read_text().split("\n---\n")[0]
    bad = bad.replace("readinessProbe:", "readinesProbe:", 1)  # misspelt
    bad = bad.replace("- name: kserve-container", "- nam: kserve-container", 1)  # name required
    (tmp_path / "bad.yaml").write_text(bad)
    (doc,) = run_sdk(tools_python, "manifests", str(tmp_path / "bad.yaml"))["documents"]
    errors = "\n".join(doc["errors"])
    assert ".spec.containers[0].readinesProbe: not a field of V1Container" in errors
    assert ".spec.containers[0].nam: not a field of V1Container" in errors
    assert re.search(r"\.spec\.containers\[0\]: V1Container: .*name Field required", errors)
    wrong = RUNTIMES.read_text().replace('"8080"', "8080", 1)  # args are strings
    wrong = wrong.replace("periodSeconds: 5", "periodSeconds: five", 1)  # an integer
    (tmp_path / "types.yaml").write_text(wrong)
    (doc, _) = run_sdk(tools_python, "manifests", str(tmp_path / "types.yaml"))["documents"]
    errors = "\n".join(doc["errors"])
    assert ".spec.containers[0].args[3]: expected str, got 8080" in errors
    assert ".spec.containers[0].readinessProbe.periodSeconds: expected int, got 'five'" in errors


def test_the_dockerfile_passes_hadolint(tools_python: Path) -> None:
    hadolint = tools_python.parent / "hadolint"
    done = subprocess.run([str(hadolint), str(DOCKERFILE)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_image_runs_podium_as_a_non_root_user_under_tini() -> None:
    image = _image()
    # numeric, so that the kubelet can check runAsNonRoot; not uid 0
    user, _, group = str(image["user"]).partition(":")
    assert user.isdigit() and int(user) != 0, image["user"]
    assert group in ("", "0")  # group 0: OpenShift's arbitrary uids can write the home directory
    # exec form: tini is PID 1 and hands SIGTERM to Podium, no shell in between
    assert image["entrypoint"] == ["tini", "--", "podium"]
    cmd = image["cmd"]
    assert isinstance(cmd, list) and cmd[:2] == ["serve", KSERVE_MODEL_DIR]
    assert image["workdir"] == "/home/podium"  # where the management key is written


def test_the_image_serves_kserve_ports_and_moves_management_off_8081() -> None:
    image = _image()
    config = _serve_config(image["cmd"])  # type: ignore[arg-type]
    assert config.serving.paths == (KSERVE_MODEL_DIR,)
    assert (config.listeners.http_port, config.listeners.grpc_port) == (HTTP_PORT, GRPC_PORT)
    # TorchServe's management default (8081) would take KServe's gRPC port
    ports = [
        config.listeners.http_port,
        config.listeners.grpc_port,
        config.listeners.management_port,
        config.listeners.grpc_management_port,
        config.listeners.metrics_port,
    ]
    assert len(set(ports)) == len(ports), ports
    assert config.listeners.management_host == "127.0.0.1"  # management stays off the pod's network
    assert image["expose"] == {HTTP_PORT, GRPC_PORT}
    # docker run's health check asks the liveness route on the HTTP port
    assert image["healthcheck"][:2] == ["python3", "-c"]  # type: ignore[index]
    assert f"http://127.0.0.1:{HTTP_PORT}/v2/health/live" in image["healthcheck"][2]  # type: ignore[index]


def test_each_runtime_runs_the_image_cmd_and_probes_the_oip_health_routes() -> None:
    image = _image()
    found = runtimes()
    assert set(found) == {"podium", "podium-grpc"}
    for runtime in found.values():
        c = container(runtime)
        assert c["args"] == image["cmd"], runtime["metadata"]["name"]
        assert "command" not in c  # the image's ENTRYPOINT (tini) stays
        security = c["securityContext"]
        assert security["runAsNonRoot"] is True
        assert security["allowPrivilegeEscalation"] is False
        assert security["capabilities"] == {"drop": ["ALL"]}
        assert runtime["spec"]["supportedModelFormats"][0]["name"] == "podium"

    http = container(found["podium"])
    assert found["podium"]["spec"]["protocolVersions"] == ["v2"]
    assert "ports" not in http  # KServe's default: 8080, plain HTTP
    assert http["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": HTTP_PORT}
    assert http["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": HTTP_PORT}

    grpc = container(found["podium-grpc"])
    assert found["podium-grpc"]["spec"]["protocolVersions"] == ["grpc-v2"]
    # one port (Knative allows no more), named h2c so that it is spoken to as HTTP/2
    assert grpc["ports"] == [{"name": "h2c", "containerPort": GRPC_PORT, "protocol": "TCP"}]
    assert grpc["readinessProbe"]["grpc"] == {"port": GRPC_PORT}  # grpc.health.v1, service ""
    assert grpc["livenessProbe"]["exec"]["command"] == image["healthcheck"]


def test_the_probe_timings_and_the_drain_fit_the_pods_grace_period() -> None:
    """Readiness turns false at once on SIGTERM (docs/operations.md); liveness tolerates a
    minute, more than a drain takes, so a draining pod is never restarted; and the whole drain
    ends before the kubelet's SIGKILL."""
    config = _serve_config(_image()["cmd"])  # type: ignore[arg-type]
    # given, not guessed from KUBERNETES_SERVICE_HOST: the budget below is the one that runs
    assert config.shutdown.shutdown_delay is not None
    # the delay, the grace, ~1 s to cut what still runs, <= 5 s to stop worker processes
    drain = (
        config.shutdown.shutdown_delay + config.shutdown.graceful_timeout + CUT_S + WORKERS_STOP_S
    )
    for runtime in runtimes().values():
        c = container(runtime)
        ready, live = c["readinessProbe"], c["livenessProbe"]
        assert ready["failureThreshold"] == 1
        assert live["periodSeconds"] * live["failureThreshold"] >= 60 > drain
    for service in documents(SERVICES):
        predictor = service["spec"]["predictor"]
        # Standard mode: the pod's own grace (Kubernetes' default when not given); Knative mode
        # sets it to the revision's timeout, which is longer unless set shorter
        grace = predictor.get("terminationGracePeriodSeconds", DEFAULT_GRACE_S)
        assert drain <= grace, service["metadata"]["name"]
        assert predictor.get("timeout", KNATIVE_DEFAULT_TIMEOUT_S) >= drain


def test_each_inference_service_names_a_runtime_that_serves_its_protocol() -> None:
    found = runtimes()
    services = {doc["metadata"]["name"]: doc for doc in documents(SERVICES)}
    assert set(services) == {"podium-examples", "podium-examples-grpc"}
    protocols = {}
    for name, service in services.items():
        assert service["kind"] == "InferenceService"
        assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name) and len(name) <= 45
        model = service["spec"]["predictor"]["model"]
        runtime = found[model["runtime"]]["spec"]
        assert model["protocolVersion"] in runtime["protocolVersions"]
        formats = {f["name"] for f in runtime["supportedModelFormats"]}
        assert model["modelFormat"]["name"] in formats
        assert model["storageUri"]
        protocols[name] = model["protocolVersion"]
    assert protocols == {"podium-examples": "v2", "podium-examples-grpc": "grpc-v2"}
