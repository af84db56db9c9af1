"""examples/chat-gpt2-tiny served from a worker process (``workers: process``): the same model,
the same greedy text as in a thread worker, with the continuous batch's steps run in the worker
process (runtime/process/_steps.py) and the tokenizer in the server. One server serves a copy
of the example each way; the real ``openai`` client asks both.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import EXAMPLES, run_server

pytestmark = pytest.mark.slow  # loads torch and transformers, twice: seconds

openai = pytest.importorskip("openai", reason="the 'openai' client is not installed")
pytest.importorskip("torch", reason="the extra 'examples' (torch) is not installed")
pytest.importorskip("transformers", reason="the extra 'examples' (transformers) is not installed")

PROMPTS = ["Hello there", "Once upon a time, in a land far away, there lived a", "A"]


def copy_as(tmp_path: Path, name: str, workers: str) -> Path:
    folder = tmp_path / name
    shutil.copytree(EXAMPLES / "chat-gpt2-tiny", folder, ignore=shutil.ignore_patterns("data"))
    with (folder / "config.yaml").open("a") as config:
        config.write(f"workers: {workers}\n")
    return folder


def test_a_worker_process_gives_the_same_greedy_text(tmp_path: Path) -> None:
    thread = copy_as(tmp_path, "gpt2-thread", "thread")
    process = copy_as(tmp_path, "gpt2-process", "process")
    env = {"GPT2_TINY_TORCH_THREADS": "1"}
    with (
        run_server(thread, process, env=env, timeout=300) as running,
        openai.OpenAI(base_url=running.url + "/v1", api_key="unused", max_retries=0) as c,
    ):

        def greedy(model: str, prompt: str, stream: bool = False) -> str:
            messages = [{"role": "user", "content": prompt}]
            if stream:
                chunks = c.chat.completions.create(
                    model=model, messages=messages, max_tokens=16, temperature=0, stream=True
                )
                return "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
            r = c.chat.completions.create(
                model=model, messages=messages, max_tokens=16, temperature=0
            )
            return r.choices[0].message.content or ""

        for prompt in PROMPTS:
            expected = greedy("gpt2-thread", prompt)
            assert expected  # (random weights: gibberish, but 16 tokens of it)
            assert greedy("gpt2-process", prompt) == expected
            assert greedy("gpt2-process", prompt, stream=True) == expected
        # two prompts of one request: two generations in the worker process's batch
        greedy8 = {"max_tokens": 8, "temperature": 0}
        both = c.completions.create(model="gpt2-process", prompt=PROMPTS[:2], **greedy8)
        alone = [
            c.completions.create(model="gpt2-thread", prompt=p, **greedy8).choices[0].text
            for p in PROMPTS[:2]
        ]
        assert [ch.text for ch in sorted(both.choices, key=lambda ch: ch.index)] == alone
