"""``python3 dev.py serve`` starts quickly: the heavy examples are served only when asked for
(``--with NAME``), and the test suite's shared examples server leaves them out as well."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from types import ModuleType

import pytest
from conftest import EXAMPLES, ROOT, default_examples


def _dev() -> ModuleType:
    spec = importlib.util.spec_from_file_location("podium_dev_script_test", ROOT / "dev.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_default_serve_leaves_the_opt_in_examples_out() -> None:
    dev = _dev()
    args = dev._serve_args([])
    assert args[-4:] == ["--host", "127.0.0.1", "--http-port", "8080"]
    served = args[:-4]
    assert str(EXAMPLES / "echo") in served
    assert str(EXAMPLES / "minilm-embeddings") not in served
    assert [str(p) for p in default_examples()] == served


def test_the_default_serve_names_only_what_podium_can_serve() -> None:
    """``examples/torchserve-mlp`` holds a model store, no model: naming it made ``podium serve``
    refuse to start ("holds no model"); its store is served instead (``EXAMPLE_STORES``)."""
    dev = _dev()
    served = dev._serve_args([], ["STORE"])[:-4]
    assert str(EXAMPLES / "torchserve-mlp") not in served and served[-1] == "STORE"
    paths = served[:-1]
    done = subprocess.run(
        [sys.executable, "-m", "podium", "check", *paths],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_with_adds_an_opt_in_example() -> None:
    dev = _dev()
    for asked in (["--with", "minilm"], ["--with=minilm"]):
        served = dev._serve_args(asked)
        assert str(EXAMPLES / "minilm-embeddings") in served
        assert str(EXAMPLES / "echo") in served
    # with arguments of its own, serve what they name, plus the --with examples
    own = dev._serve_args(["--with", "minilm", "examples/echo", "--http-port", "9000"])
    assert own == [str(EXAMPLES / "minilm-embeddings"), "examples/echo", "--http-port", "9000"]


def test_an_unknown_with_name_fails_before_any_install() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "dev.py"), "serve", "--with", "nope"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "no opt-in example nope (known: gpt2, minilm)" in done.stderr
    assert "installing" not in done.stdout


@pytest.mark.parametrize("name", ["chat-gpt2-tiny", "minilm-embeddings"])
def test_every_opt_in_example_exists(name: str) -> None:
    assert name in _dev().OPT_IN_EXAMPLES.values()
    assert (EXAMPLES / name / "model.py").is_file()
