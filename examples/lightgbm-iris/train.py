#!/usr/bin/env python3
"""Train the small LightGBM model that examples/lightgbm-iris serves with MLServer's runtime.

    python examples/lightgbm-iris/train.py [--out DIR]

A multiclass gradient-boosted model (20 rounds of small trees) trained on the iris data set that
ships with scikit-learn, saved in LightGBM's text format as ``model.bst`` (the name MLServer's
``mlserver_lightgbm.LightGBMModel`` looks for) in this folder, or in ``--out``. Deterministic
(one thread, fixed seed). Not committed, as the other trained examples: ``python3 dev.py
serve`` runs this script when the file is missing, and the tests train their own copy.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import lightgbm as lgb
from sklearn.datasets import load_iris

HERE = Path(__file__).resolve().parent

PARAMS = {
    "objective": "multiclass",
    "num_class": 3,
    "num_leaves": 7,
    "learning_rate": 0.2,
    "min_data_in_leaf": 5,
    "num_threads": 1,
    "deterministic": True,
    "seed": 7,
    "verbosity": -1,
}


def train(out: Path) -> Path:
    """Train the booster and write ``out/model.bst``; its path."""
    features, labels = load_iris(return_X_y=True)
    booster = lgb.train(PARAMS, lgb.Dataset(features, label=labels), num_boost_round=20)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "model.bst"
    partial = path.with_suffix(".bst.partial")
    booster.save_model(str(partial))
    partial.replace(path)  # never a half-written model.bst for a server to load
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="folder for model.bst")
    args = parser.parse_args()
    print(f"wrote {train(args.out)}")


if __name__ == "__main__":
    main()
