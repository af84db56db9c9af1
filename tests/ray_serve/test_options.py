"""podium.ray without a cluster: each version's deployment options from its config (replicas,
autoscaling, its ``ray:`` section, the sequence router), the builder's arguments, the versions
an application deploys, and the core install staying free of Ray. Needs no Ray installed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import EXAMPLES

from podium.config import ModelConfig
from podium.errors import DefinitionError
from podium.ray import AppSettings, deployment_options, discover_versions


def config(**fields: object) -> ModelConfig:
    return ModelConfig(name="m", **fields)  # type: ignore[arg-type]


def test_fixed_workers_are_a_fixed_number_of_replicas() -> None:
    options = deployment_options(config(min_workers=3, max_workers=3))
    assert options["name"] == "model:m"
    assert options["num_replicas"] == 3
    assert "autoscaling_config" not in options
    assert options["ray_actor_options"] == {}
    assert "request_router_config" not in options


def test_a_worker_range_autoscales_on_the_replicas_slots() -> None:
    c = config(min_workers=0, max_workers=4, predict_concurrency=2, batch_size=8)
    options = deployment_options(c)
    assert "num_replicas" not in options
    assert options["autoscaling_config"] == {
        "min_replicas": 0,
        "max_replicas": 4,
        "target_ongoing_requests": 16,
    }
    # twice the slots, so that a replica's own batcher can fill its batches
    assert options["max_ongoing_requests"] == 32


def test_the_ray_section_gives_actor_options_and_deployment_options() -> None:
    section = {
        "num_cpus": 2,
        "num_gpus": 0.5,
        "max_queued_requests": 10,
        "autoscaling_config": {"upscale_delay_s": 3, "max_replicas": 8},
    }
    options = deployment_options(config(version="2", min_workers=1, max_workers=2, ray=section))
    assert options["name"] == "model:m:2"
    assert options["ray_actor_options"] == {"num_cpus": 2, "num_gpus": 0.5}
    assert options["max_queued_requests"] == 10
    # the section's autoscaling keys win over those made from the workers
    assert options["autoscaling_config"]["max_replicas"] == 8
    assert options["autoscaling_config"]["upscale_delay_s"] == 3
    assert options["autoscaling_config"]["min_replicas"] == 1
    # num_replicas in the section is its own choice
    fixed = deployment_options(config(min_workers=1, max_workers=3, ray={"num_replicas": 5}))
    assert fixed["num_replicas"] == 5 and "autoscaling_config" not in fixed


def test_a_sequence_model_gets_the_sticky_router_by_import_path() -> None:
    options = deployment_options(config(sequence_batching=True))
    router = options["request_router_config"]
    assert router["request_router_class"] == "podium.ray._router:SequenceRouter"
    assert router["request_router_kwargs"] == {"deployment": "model:m", "label": "model 'm'"}


@pytest.mark.parametrize(
    ("section", "says"),
    [
        ({"num_cpu": 1}, "unknown key 'ray.num_cpu'"),
        ({"num_cpus": "two"}, "'ray.num_cpus' must be a number"),
        ({"num_gpus": True}, "'ray.num_gpus' must be a number"),
        ({"resources": [1]}, "'ray.resources' must be a mapping"),
    ],
)
def test_a_bad_ray_section_names_the_model_and_the_key(section: dict, says: str) -> None:
    with pytest.raises(DefinitionError) as info:
        deployment_options(config(ray=section))
    assert says in str(info.value) and "model 'm'" in str(info.value)


def test_builder_arguments_from_serve_run_and_a_config_file(tmp_path: Path) -> None:
    settings = AppSettings.from_args({"paths": f"{EXAMPLES}/echo, {EXAMPLES}/batch-sum"})
    assert settings.paths == (str(EXAMPLES / "echo"), str(EXAMPLES / "batch-sum"))
    assert settings.ingress_replicas == 1
    (tmp_path / "podium.yaml").write_text(
        f"models: [{EXAMPLES}/echo]\nthreads: 8\nmax-request-size: 1000\nlog_level: debug\n"
    )
    settings = AppSettings.from_args(
        {"config": str(tmp_path / "podium.yaml"), "threads": "4", "ingress_replicas": 2}
    )
    assert settings.paths == (str(EXAMPLES / "echo"),)
    assert settings.replica.threads == 4  # an argument wins over the file
    assert settings.ingress.max_request_size == 1000
    assert settings.replica.log_level == settings.ingress.log_level == "debug"
    assert settings.ingress_replicas == 2


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ({}, "no models given"),
        ({"paths": "x", "port": 1}, "unknown argument(s) port"),
        ({"paths": "x", "threads": "0"}, "threads must be an integer >= 1"),
        ({"paths": 3}, "'paths' must be a list"),
    ],
)
def test_bad_builder_arguments_say_which_and_why(args: dict, says: str) -> None:
    with pytest.raises(ValueError) as info:
        AppSettings.from_args(args)
    assert says in str(info.value)


def test_a_config_file_asking_for_what_serve_cannot_give_is_refused(tmp_path: Path) -> None:
    (tmp_path / "podium.yaml").write_text("models: [m]\nauth: true\nshared_memory: system\n")
    with pytest.raises(ValueError) as info:
        AppSettings.from_args({"config": str(tmp_path / "podium.yaml")})
    assert "auth" in str(info.value) and "shared_memory" in str(info.value)


def test_the_examples_are_one_deployment_per_version_each_from_its_own_path() -> None:
    versions = discover_versions((str(EXAMPLES),))
    names = {(c.name, c.version) for _, c in versions}
    assert ("echo", None) in names and ("ts-sentiment", "1.0") in names
    # every directory of examples/ is one model, but torchserve-mlp: a model store its build
    # script fills (served as a store of its own)
    models = [path for path in EXAMPLES.iterdir() if path.name != "torchserve-mlp"]
    assert len(names) == len(versions) == len(models)
    for unit, _ in versions:  # a replica imports its own model's code, nothing else
        assert Path(unit).parent == EXAMPLES


def test_a_model_defined_twice_or_badly_is_refused_before_anything_starts(
    tmp_path: Path,
) -> None:
    for where in ("a", "b"):
        (tmp_path / where / "twin").mkdir(parents=True)
        (tmp_path / where / "twin" / "model.py").write_text(
            "class Model:\n    def predict(self, x):\n        return x\n"
        )
    (tmp_path / "a" / "odd").mkdir()
    (tmp_path / "a" / "odd" / "model.py").write_text((tmp_path / "a/twin/model.py").read_text())
    (tmp_path / "a" / "odd" / "config.yaml").write_text("ray: {gpus: 1}\n")
    with pytest.raises(DefinitionError) as info:
        discover_versions((str(tmp_path / "a"), str(tmp_path / "b")))
    problems = "\n".join(info.value.problems)
    assert "model 'twin': defined twice" in problems
    assert "unknown key 'ray.gpus'" in problems


_NO_RAY = textwrap.dedent(
    """
    import sys
    import podium, podium.cli, podium.server, podium.dataplane, podium.runtime, podium.ray
    from podium.ray import AppSettings, deployment_options, discover_versions
    discover_versions((sys.argv[1],))
    found = sorted(m for m in sys.modules if m == "ray" or m.startswith("ray."))
    print(found)
    """
)


def test_the_core_and_podium_ray_import_no_ray() -> None:
    """Ray is an extra: serving, and even building the options, never imports it (only the
    builder and the replicas do, inside Ray)."""
    run = subprocess.run(
        [sys.executable, "-c", _NO_RAY, str(EXAMPLES)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"


def test_podium_ray_is_a_command() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "podium", "ray", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert "--address" in run.stdout and "Ray Serve" in run.stdout
