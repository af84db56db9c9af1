#!/usr/bin/env python3
"""Train the iris classifier that examples/sklearn-iris and examples/sklearn-iris-mlserver serve.

    python examples/sklearn-iris/train.py [--out DIR]

A scikit-learn pipeline (standard scaling, then a logistic regression) fitted on the iris data
set that ships with scikit-learn, saved with joblib as ``model.joblib`` (the name MLServer's
``mlserver_sklearn.SKLearnModel`` looks for) in this folder's ``data/`` (the native model's
``data_dir``), or in ``--out``. Deterministic: the same library versions give the same model.
A pickle is tied to the scikit-learn version that wrote it, so the file is not committed;
``python3 dev.py serve`` runs this script when it is missing, and the tests train their own.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import joblib
from sklearn.datasets import load_iris
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

HERE = Path(__file__).resolve().parent


def train(out: Path) -> Path:
    """Fit the pipeline and write ``out/model.joblib``; its path."""
    features, labels = load_iris(return_X_y=True)
    pipeline = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
    pipeline.fit(features, labels)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "model.joblib"
    partial = path.with_suffix(".joblib.partial")
    joblib.dump(pipeline, partial)
    partial.replace(path)  # never a half-written model.joblib for a server to load
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "data", help="folder for model.joblib")
    args = parser.parse_args()
    print(f"wrote {train(args.out)}")


if __name__ == "__main__":
    main()
