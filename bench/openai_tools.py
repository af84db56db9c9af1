"""Real OpenAI-API tools against examples/chat-gpt2-tiny on Podium: lm-eval's
``local-completions`` (loglikelihood and generation tasks) and guidellm (a load sweep).

    .venv/bin/python bench/openai_tools.py [--only lm-eval,guidellm] [--limit N] [--seconds S]

Each tool goes into its own virtual env under bench/.venvs/ (created when missing). Nothing is
downloaded at run time: the tasks are the small JSON files in bench/openai_tools/ (lm-eval reads
them with its ``json`` dataset loader), and both tools get the example's tokenizer saved to a
temporary folder (they default to a hub tokenizer). Scores are meaningless (the model's weights
are random); the point is that each tool's requests are answered and parsed end to end. The
tools' own output is printed; the exit status is 1 when a tool failed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from common import (
    ROOT,
    VENVS,
    BenchError,
    Server,
    exit_on_signals,
    free_port,
    log,
    podium_argv,
)

TOOLS_DIR = Path(__file__).resolve().parent / "openai_tools"
EXAMPLE = ROOT / "examples" / "chat-gpt2-tiny"
MODEL = EXAMPLE.name
#: Each tool's env: what goes in, and what must import for it to count as installed.
TOOLS: dict[str, tuple[tuple[str, ...], str]] = {
    "lm-eval": (
        ("lm-eval[api]==0.4.13", "transformers>=4.41,<6", "tokenizers>=0.19,<1"),
        "import lm_eval, transformers",
    ),
    "guidellm": (("guidellm==0.8.1",), "import guidellm"),
}
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def tool_python(name: str) -> Path:
    """The python of bench/.venvs/NAME with the tool installed (installed when missing)."""
    requirements, probe = TOOLS[name]
    python = VENVS / name / "bin" / "python"
    if (
        python.exists()
        and subprocess.run([python, "-c", probe], capture_output=True).returncode == 0
    ):
        return python
    log(f"installing {' '.join(requirements)} into {VENVS / name}")
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENVS / name)], check=True, timeout=300)
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, *requirements], check=True, timeout=1800)
    return python


def save_tokenizer(folder: Path) -> Path:
    """The example's tokenizer as a transformers tokenizer folder (tokenizer.json and config)."""
    spec = importlib.util.spec_from_file_location("gpt2_tiny_engine_tools", EXAMPLE / "engine.py")
    if spec is None or spec.loader is None:
        raise BenchError(f"cannot import {EXAMPLE / 'engine.py'}")
    engine = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(engine)
    engine.build_tokenizer().save_pretrained(folder)
    return folder


def run(argv: list[str], cwd: Path, timeout: float) -> int:
    log("running " + " ".join(argv))
    done = subprocess.run(
        argv, cwd=cwd, env={**os.environ, **OFFLINE}, timeout=timeout, text=True,
        capture_output=True,
    )  # fmt: skip
    print(f"### `{' '.join(Path(a).name if '/' in a else a for a in argv[:3])} ...` "
          f"(exit {done.returncode})\n")  # fmt: skip
    print("```\n" + (done.stdout[-6000:] or done.stderr[-6000:]) + "\n```\n", flush=True)
    if done.returncode != 0:
        log(done.stderr[-4000:])
    return done.returncode


def lm_eval(url: str, tokenizer: Path, limit: int) -> int:
    python = tool_python("lm-eval")
    args = ",".join(
        [
            f"model={MODEL}",
            f"base_url={url}/v1/completions",
            "tokenizer_backend=huggingface",
            f"tokenizer={tokenizer}",
            "num_concurrent=4",
            "max_retries=1",
            "tokenized_requests=True",
        ]
    )
    argv = [str(python), "-m", "lm_eval", "--model", "local-completions", "--model_args", args]
    argv += ["--tasks", "podium_tiny_mc,podium_tiny_gen", "--include_path", str(TOOLS_DIR)]
    argv += ["--limit", str(limit), "--batch_size", "1"]
    return run(argv, TOOLS_DIR, 900)


def guidellm(url: str, tokenizer: Path, seconds: float, scratch: Path) -> int:
    python = tool_python("guidellm")
    # guidellm checks GET {target}/health (vLLM's); Podium's readiness route answers instead
    scenario = {
        "spec": {
            "backend": {
                "kind": "openai_http",
                "target": url,
                "model": MODEL,
                "request_format": "/v1/chat/completions",
                "api_routes": {
                    "/health": "v2/health/ready",
                    "/v1/models": "v1/models",
                    "/v1/chat/completions": "v1/chat/completions",
                },
            },
            "tokenizer": {"kind": "huggingface_auto", "model": str(tokenizer)},
            "data": [{"kind": "synthetic_text", "prompt_tokens": 32, "output_tokens": 32}],
            "profile": {"kind": "concurrent"},
            "constraints": [{"kind": "max_duration", "seconds": seconds}],
        },
        "benchmarks": [{"profile.streams": 1}, {"profile.streams": 8}],
    }
    (scratch / "scenario.json").write_text(json.dumps(scenario))
    argv = [str(python), "-m", "guidellm", "run", "-c", str(scratch / "scenario.json")]
    argv += ["--output", "kind=console", "--output", f"kind=json,path={scratch / 'guidellm.json'}"]
    argv += ["--disable-console-interactive"]
    return run(argv, scratch, 900)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=",".join(TOOLS))
    parser.add_argument("--limit", type=int, default=10, help="lm-eval documents per task")
    parser.add_argument("--seconds", type=float, default=15.0, help="guidellm: per rate")
    args = parser.parse_args(argv)
    exit_on_signals()
    names = [n for n in args.only.split(",") if n]
    failed = 0
    with tempfile.TemporaryDirectory(prefix="podium-openai-tools-") as scratch:
        tokenizer = save_tokenizer(Path(scratch) / "tokenizer")
        port = free_port()
        env = {"GPT2_TINY_TORCH_THREADS": "1"}
        with Server(
            name="podium", argv=podium_argv(EXAMPLE, port, None), port=port, env=env,
            ready_timeout=300.0,
        ) as server:  # fmt: skip
            if "lm-eval" in names:
                failed |= lm_eval(server.url, tokenizer, args.limit) != 0
            if "guidellm" in names:
                failed |= guidellm(server.url, tokenizer, args.seconds, Path(scratch)) != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
