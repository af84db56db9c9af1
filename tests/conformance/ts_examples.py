"""TorchServe's own examples at v0.12.0, side by side (issue 22, "Proof"): ``examples/image_classifier
/mnist`` (its ``mnist.py`` and ``mnist_handler.py`` from the TorchServe mirror, fixed-seed
weights: the published ``mnist_cnn.pt`` is not in the mirror), and batching set both ways the
documentation gives: ``batchSize`` / ``maxBatchDelay`` in ``config.properties``'s ``models=``
and through the management API (``POST /models?...&batch_size=&max_batch_delay=``). The real
TorchServe 0.12 and Podium are started with the same command (the README's)::

    torchserve --start --foreground --ncs --disable-token-auth --enable-model-api \\
        --model-store STORE --models mnist=mnist.mar mnist_batched=mnist_batched.mar \\
        --ts-config config.properties
    python -m podium torchserve ...the same flags...

each with a config.properties of its own (only the ports and TorchServe's private temporary
directory differ; see ``ts_default_handlers.py``, whose helpers this reuses), the real
``torch-model-archiver`` building the archives. Requests as the README sends them (``curl -T``:
a PUT of the PNG). Answers compared as JSON (floats within 1e-4 relative).

Needs the same Python as ``ts_default_handlers.py`` (torchserve 0.12.0, torch-model-archiver,
torch, torchvision, captum, Podium's dependencies) and Java 17. ``--write-doc`` puts the results
into ``docs/torchserve.md`` between its ``ts-examples`` markers. Not part of the default run.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ts_default_handlers import (  # noqa: E402
    PODIUM,
    ROOT,
    archive,
    process,
    properties,
    same,
    wait_models,
)

MIRROR = Path("/work/.mirror/pytorch+serve/repo")
TAG = "v0.12.0"
EXAMPLE = "examples/image_classifier/mnist"
DOC = ROOT / "docs" / "torchserve.md"
BEGIN, END = "<!-- ts-examples:begin -->", "<!-- ts-examples:end -->"
BATCH = {"batchSize": 4, "maxBatchDelay": 200}
DESCRIBED = ("batchSize", "maxBatchDelay", "minWorkers", "maxWorkers", "responseTimeout")


def _show(path: str) -> bytes:
    git = ["git", "--git-dir", str(MIRROR), "show", f"{TAG}:{path}"]
    return subprocess.run(git, check=True, capture_output=True).stdout


def build(work: Path, store: Path) -> dict[str, bytes]:
    """The two archives (``mnist``, ``mnist_batched``: the same files) and the test images."""
    source = work / "mnist"
    source.mkdir()
    for name in ("mnist.py", "mnist_handler.py"):
        (source / name).write_bytes(_show(f"{EXAMPLE}/{name}"))
    sys.path.insert(0, str(source))
    from mnist import Net  # the example's model class

    torch.manual_seed(0)
    torch.save(Net().state_dict(), source / "mnist_cnn.pt")
    files = {"model_file": source / "mnist.py", "serialized_file": source / "mnist_cnn.pt"}
    for name in ("mnist", "mnist_batched"):
        archive(name, str(source / "mnist_handler.py"), files, store)
    return {f"{d}.png": _show(f"{EXAMPLE}/test_data/{d}.png") for d in range(10)}


def build_micro_batching(work: Path, store: Path) -> dict[str, bytes]:
    """``examples/micro_batching``'s archive as its README builds it (resnet-18's ``model.py``,
    fixed-seed weights instead of the downloaded ones, the example's handler and config.yaml),
    and eight JPEGs made from the repository's kitten (crops and flips)."""
    source = work / "micro_batching"
    source.mkdir()
    files = {"model.py": "examples/image_classifier/resnet_18/model.py",
             "micro_batching_handler.py": "examples/micro_batching/micro_batching_handler.py",
             "config.yaml": "examples/micro_batching/config.yaml",
             "index_to_name.json": "examples/image_classifier/index_to_name.json"}  # fmt: skip
    for name, path in files.items():
        (source / name).write_bytes(_show(path))
    from torchvision.models.resnet import BasicBlock, ResNet

    torch.manual_seed(0)
    torch.save(ResNet(BasicBlock, [2, 2, 2, 2]).state_dict(), source / "resnet18.pth")
    archive("resnet-18_mb", str(source / "micro_batching_handler.py"),
            {"model_file": source / "model.py", "serialized_file": source / "resnet18.pth",
             "extra_files": source / "index_to_name.json",
             "config_file": source / "config.yaml"}, store)  # fmt: skip
    from PIL import Image, ImageOps

    kitten = Image.open(io.BytesIO(_show("examples/image_classifier/kitten.jpg"))).convert("RGB")
    variants = [kitten, ImageOps.mirror(kitten), ImageOps.flip(kitten),
                kitten.crop((0, 0, kitten.width // 2, kitten.height // 2)),
                kitten.rotate(90, expand=True), kitten.resize((160, 120)),
                ImageOps.grayscale(kitten).convert("RGB"), ImageOps.autocontrast(kitten)]  # fmt: skip
    out = {}
    for i, image in enumerate(variants):
        buffer = io.BytesIO()
        image.save(buffer, "JPEG", quality=90)
        out[f"kitten{i}.jpg"] = buffer.getvalue()
    return out


def config(work: Path, store: Path, models: str) -> tuple[Path, dict[str, int]]:
    return properties(work, store, [
        "default_workers_per_model=1", "disable_system_metrics=true",
        "install_py_dep_per_model=false", "enable_envvars_config=true",  # the example's
        *([f"models={models}"] if models else []),
    ])  # fmt: skip


def json_line(value: Any) -> str:
    import json

    return json.dumps(value, separators=(",", ":"))


#: config.properties' ``models=`` for the mnist pair: ``mnist_batched`` batches by 4
MNIST_MODELS = json_line({"mnist_batched": {"1.0": {
    "marName": "mnist_batched.mar", **BATCH, "minWorkers": 1, "maxWorkers": 1,
    "responseTimeout": 120}}})  # fmt: skip


@contextlib.contextmanager
def serving(
    server: str, store: Path, work: Path, models: list[str], models_line: str = ""
) -> Iterator[tuple[str, str, list[str]]]:
    """One server started with the README's command; (inference, management, ready models)."""
    work.mkdir()
    props, ports = config(work, store, models_line)
    flags = ["--start", "--foreground", "--ncs", "--disable-token-auth", "--enable-model-api",
             "--model-store", str(store), "--models", *models, "--ts-config", str(props)]  # fmt: skip
    env = dict(os.environ, LOG_LOCATION=str(work / "logs"), METRICS_LOCATION=str(work),
               TMPDIR=str(work / "tmp"), PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")  # fmt: skip
    if server == "torchserve":
        cmd = [str(Path(sys.executable).parent / "torchserve"), *flags]
    else:
        cmd = [sys.executable, "-c", PODIUM, "torchserve", *flags]
        env["PYTHONPATH"] = str(ROOT / "src")
    with process(server, cmd, work, env):
        management = f"http://127.0.0.1:{ports['management']}"
        ready = wait_models(
            management, [m.split("=")[0].removesuffix(".mar") for m in models], 300, settle=45
        )
        yield f"http://127.0.0.1:{ports['inference']}", management, ready


def answer(r: httpx.Response) -> tuple[int, Any]:
    try:
        return r.status_code, r.json()
    except ValueError:
        return r.status_code, r.text[:200]


def described(management: str, name: str) -> tuple[int, Any]:
    status, body = answer(httpx.get(f"{management}/models/{name}", timeout=30))
    if status == 200 and isinstance(body, list) and body:
        body = {k: body[0].get(k) for k in DESCRIBED}
    return status, body


def together(base: str, name: str, images: dict[str, bytes]) -> dict[str, tuple[int, Any]]:
    """Eight images at once: two batches of four where the model batches."""
    chosen = list(images.items())[:8]
    with ThreadPoolExecutor(len(chosen)) as pool:
        futures = {
            label: pool.submit(httpx.put, f"{base}/predictions/{name}", content=body, timeout=120)
            for label, body in chosen
        }
    return {f"together {label}": answer(f.result()) for label, f in futures.items()}


def scenarios(base: str, management: str, images: dict[str, bytes]) -> dict[str, tuple[int, Any]]:
    seen: dict[str, tuple[int, Any]] = {}
    for label, body in images.items():  # curl http://127.0.0.1:8080/predictions/mnist -T 0.png
        seen[f"mnist|PUT {label}"] = answer(
            httpx.put(f"{base}/predictions/mnist", content=body, timeout=120)
        )
    seen["mnist|POST 0.png"] = answer(
        httpx.post(f"{base}/predictions/mnist", content=images["0.png"], timeout=120)
    )
    seen["mnist|PUT /explanations 0.png"] = answer(
        httpx.put(f"{base}/explanations/mnist", content=images["0.png"], timeout=300)
    )
    seen["config batching|describe"] = described(management, "mnist_batched")
    for label, got in together(base, "mnist_batched", images).items():
        seen[f"config batching|{label}"] = got
    query = ("url=mnist.mar&model_name=mnist_api&batch_size=4&max_batch_delay=200"
             "&initial_workers=1&synchronous=true")  # fmt: skip
    status, _ = answer(httpx.post(f"{management}/models?{query}", timeout=300))
    seen["API batching|POST /models?...batch_size=4&max_batch_delay=200"] = (status, None)
    seen["API batching|describe"] = described(management, "mnist_api")
    for label, got in together(base, "mnist_api", images).items():
        seen[f"API batching|{label}"] = got
    status, _ = answer(httpx.delete(f"{management}/models/mnist_api", timeout=120))
    seen["API batching|DELETE /models/mnist_api"] = (status, None)
    return seen


def micro_scenarios(base: str, management: str, images: dict[str, bytes]) -> dict[str, Any]:
    seen: dict[str, tuple[int, Any]] = {}
    seen["micro batching|describe"] = described(management, "resnet-18_mb")
    seen["micro batching|PUT kitten0.jpg"] = answer(
        httpx.put(f"{base}/predictions/resnet-18_mb", content=images["kitten0.jpg"], timeout=300)
    )
    for label, got in together(base, "resnet-18_mb", images).items():
        seen[f"micro batching|{label}"] = got
    return seen


def shown(got: tuple[int, Any] | None) -> str:
    if got is None:
        return "—"
    status, body = got
    text = "" if body is None else json_line(body)
    return f"{status} {text[:130]}".strip().replace("|", "\\|")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write-doc", action="store_true", help=f"update {DOC.name}")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ts-examples-"))
    store = work / "store"
    store.mkdir()
    images = build(work, store)
    kittens = build_micro_batching(work, store)
    answers: dict[str, dict[str, tuple[int, Any]]] = {}
    pairs = [
        ("mnist", ["mnist=mnist.mar", "mnist_batched=mnist_batched.mar"], MNIST_MODELS,
         lambda base, management: scenarios(base, management, images)),
        ("micro", ["resnet-18_mb.mar"], "",
         lambda base, management: micro_scenarios(base, management, kittens)),
    ]  # fmt: skip
    for pair, models, models_line, run in pairs:
        for server in ("torchserve", "podium"):
            where = work / f"{pair}-{server}"
            with serving(server, store, where, models, models_line) as (base, management, ready):
                if len(ready) < len(models):
                    print(f"{server} loaded {ready}; log: {where}", file=sys.stderr)
                answers.setdefault(server, {}).update(run(base, management))
    rows, counts = [], {"same": 0, "differs": 0}
    for key in answers["torchserve"]:
        ts, pd = answers["torchserve"][key], answers["podium"].get(key)
        alike = same(ts[1], pd[1]) if pd is not None else False
        if key.endswith("describe") and pd is not None:  # the JSON itself: 200, not 200.0
            alike = json_line(ts[1]) == json_line(pd[1])
        verdict = "same" if pd is not None and ts[0] == pd[0] and alike else "differs"
        counts[verdict] += 1
        scenario, request = key.split("|", 1)
        rows.append(f"| {scenario} | {request} | `{shown(ts)}` | `{shown(pd)}` | {verdict} |")
    table = "\n".join(["| example | request | TorchServe 0.12.0 | Podium | verdict |",
                       "|---|---|---|---|---|", *rows])  # fmt: skip
    print(table)
    print(counts, file=sys.stderr)
    if args.write_doc:
        text = DOC.read_text()
        head, _, rest = text.partition(BEGIN)
        _, _, tail = rest.partition(END)
        summary = ", ".join(f"{n} {k}" for k, n in counts.items())
        when = time.strftime("%Y-%m-%d", time.gmtime())
        run = f"Run on {when}: `python tests/conformance/ts_examples.py --write-doc`: {summary}."
        DOC.write_text(f"{head}{BEGIN}\n{run}\n\n{table}\n{END}{tail}")
    return 0 if counts["differs"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
