#!/usr/bin/env python3
"""Build the two TorchServe archives of examples/torchserve-mlp with torch-model-archiver.

    python examples/torchserve-mlp/build.py [--out DIR]

1. Trains the small MLP of ``iris_mlp.py`` on the iris data set that ships with scikit-learn
   (full-batch Adam, fixed seed; a few seconds on a CPU).
2. Saves it twice: its state dict (``iris_mlp.pt``, for the eager model) and TorchScript
   (``iris_mlp_ts.pt``).
3. Runs the real ``torch-model-archiver`` (0.12.0, from PyPI) on each:
   ``iris-mlp.mar`` (``--model-file iris_mlp.py --serialized-file iris_mlp.pt``) and
   ``iris-mlp-ts.mar`` (``--serialized-file iris_mlp_ts.pt``), both with ``handler.py``,
   ``model-config.yaml`` and ``index_to_name.json``, into ``model_store/`` here (or ``--out``).

Serve them with ``podium serve examples/torchserve-mlp/model_store`` (or ``python3 dev.py serve
--with torchserve-mlp``). The archives are not committed: ``dev.py serve`` builds them when
they are missing, and the tests build their own.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import torch
from sklearn.datasets import load_iris

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from iris_mlp import IrisMLP  # noqa: E402


def train() -> IrisMLP:
    """The MLP fitted on iris (about 97% of the training rows right)."""
    torch.manual_seed(0)
    features, labels = load_iris(return_X_y=True)
    x = torch.as_tensor(features, dtype=torch.float32)
    y = torch.as_tensor(labels)
    model = IrisMLP()
    model.mean.copy_(x.mean(dim=0))
    model.scale.copy_(x.std(dim=0))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    for _ in range(200):
        optimizer.zero_grad()
        probabilities = model(x)
        loss = torch.nn.functional.nll_loss(torch.log(probabilities), y)
        loss.backward()
        optimizer.step()
    return model.eval()


def archive(out: Path, name: str, serialized: Path, model_file: Path | None) -> Path:
    """One ``.mar`` built by torch-model-archiver (the console script beside this Python)."""
    archiver = Path(sys.executable).parent / "torch-model-archiver"
    command = [
        str(archiver) if archiver.exists() else "torch-model-archiver",
        "--model-name", name,
        "--version", "1.0",
        "--serialized-file", str(serialized),
        "--handler", str(HERE / "handler.py"),
        "--extra-files", str(HERE / "index_to_name.json"),
        "--config-file", str(HERE / "model-config.yaml"),
        "--export-path", str(out),
        "--force",
    ]  # fmt: skip
    if model_file is not None:
        command += ["--model-file", str(model_file)]
    subprocess.run(command, check=True)
    return out / f"{name}.mar"


def build(out: Path) -> list[Path]:
    """Train, save, archive; the paths of the two archives."""
    model = train()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        eager, scripted = work / "iris_mlp.pt", work / "iris_mlp_ts.pt"
        torch.save(model.state_dict(), eager)
        with warnings.catch_warnings():
            # TorchScript is deprecated in torch 2.x, yet it is what TorchServe's BaseHandler
            # loads for an archive without --model-file: the variant this example shows.
            warnings.filterwarnings("ignore", "`torch.jit.script` is deprecated")
            torch.jit.save(torch.jit.script(model), scripted)
        shutil.copy(HERE / "iris_mlp.py", work / "iris_mlp.py")
        return [
            archive(out, "iris-mlp", eager, work / "iris_mlp.py"),
            archive(out, "iris-mlp-ts", scripted, None),
        ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "model_store", help="export path")
    args = parser.parse_args()
    for path in build(args.out):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
