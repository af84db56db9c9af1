"""The stateful examples' README commands, run as written (with curl, against a live server):
they send the body as TorchServe handlers need it and send the sequence's id back."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import EXAMPLES, ROOT, Server

pytest_plugins = ["e2e_fixtures"]

_BLOCK = re.compile(r"```sh\n(.*?)```", re.S)


def _blocks(path: Path, after: str = "") -> list[str]:
    text = path.read_text(encoding="utf-8")
    return _BLOCK.findall(text[text.index(after) :] if after else text)


def _run(script: str, server: Server, tmp_path: Path) -> list[str]:
    script = script.replace("localhost:8080", server.url.removeprefix("http://"))
    script = script.replace("/tmp/headers", str(tmp_path / "headers"))
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
@pytest.mark.parametrize(
    ("readme", "after", "expected"),
    [
        (
            EXAMPLES / "running-total" / "README.md",
            "",
            ['{"total":3,"mean":3.0}', '{"total":8,"mean":4.0}', '{"total":9,"mean":3.0}'],
        ),
        (EXAMPLES / "stateful-sum" / "README.md", "", ["3", "7", "7"]),
        (
            ROOT / "README.md",
            "**running-total**",
            ['{"total":3,"mean":3.0}', '{"total":8,"mean":4.0}', '{"total":9,"mean":3.0}']
            + ["3", "7"],
        ),
    ],
)
def test_the_readme_commands_continue_the_sequence_they_started(
    examples_server: Server, tmp_path: Path, readme: Path, after: str, expected: list[str]
) -> None:
    script = _blocks(readme, after)[0]
    assert "--data-binary" in script or "stateful" not in script  # never a form body
    assert _run(script, examples_server, tmp_path) == expected
