"""Train the models of MLServer's runtime examples (``docs/examples`` at 1.7.1) as their READMEs
do, small and seeded, and write the READMEs' requests beside them.

    python train.py EXAMPLE FOLDER AGARICUS_DIR

Run by ``run.py`` with the MLServer venv's interpreter (it has scikit-learn, xgboost and
lightgbm, MLServer's runtimes' dependencies), once per case: both servers then load the same
files. ``FOLDER/requests.json`` maps a model's name to the README's request (``x_0``, the test
set's first row, as FP32). ``AGARICUS_DIR`` holds ``agaricus.txt.train`` / ``.test`` (the xgboost
example's copies).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

SEED = 0


def _request(name: str, row: Any) -> dict[str, Any]:
    x_0 = row.reshape(1, -1)
    return {"inputs": [{"name": name, "shape": list(x_0.shape), "datatype": "FP32",
                        "data": x_0.tolist()}]}  # fmt: skip


def mnist_svm(path: Path) -> dict[str, Any]:
    """``sklearn``'s README: an SVC on the first half of the digits."""
    import joblib
    from sklearn import datasets, svm
    from sklearn.model_selection import train_test_split

    digits = datasets.load_digits()
    data = digits.images.reshape((len(digits.images), -1))
    x_train, x_test, y_train, _ = train_test_split(
        data, digits.target, test_size=0.5, shuffle=False
    )
    classifier = svm.SVC(gamma=0.001)
    classifier.fit(x_train, y_train)
    path.parent.mkdir(parents=True, exist_ok=True)
    joblib.dump(classifier, path)
    return _request("predict", x_test[0])


def mushroom_xgboost(path: Path, agaricus: Path) -> dict[str, Any]:
    """``xgboost``'s README: two rounds of depth-2 trees on agaricus."""
    import xgboost as xgb
    from sklearn.datasets import load_svmlight_file

    x_train, y_train = load_svmlight_file(str(agaricus / "agaricus.txt.train"))
    x_test, _ = load_svmlight_file(str(agaricus / "agaricus.txt.test"), n_features=x_train.shape[1])
    dtrain = xgb.DMatrix(data=x_train.toarray(), label=y_train)
    param = {"max_depth": 2, "eta": 1, "objective": "binary:logistic", "seed": SEED}
    booster = xgb.train(param, dtrain, 2)
    path.parent.mkdir(parents=True, exist_ok=True)
    booster.save_model(str(path))
    return _request("predict", x_test.toarray()[0])


def iris_lightgbm(path: Path) -> dict[str, Any]:
    """``lightgbm``'s README: a multiclass booster on iris (the split seeded)."""
    import lightgbm as lgb
    from sklearn.datasets import load_iris
    from sklearn.model_selection import train_test_split

    iris = load_iris()
    x_train, x_test, y_train, _ = train_test_split(
        iris["data"], iris["target"], test_size=0.1, random_state=SEED
    )
    params = {"objective": "multiclass", "metric": "softmax", "num_class": 3, "seed": SEED,
              "deterministic": True, "verbose": -1}  # fmt: skip
    booster = lgb.train(params=params, train_set=lgb.Dataset(x_train, label=y_train))
    path.parent.mkdir(parents=True, exist_ok=True)
    booster.save_model(str(path))
    return _request("predict-prob", x_test[0])


def main(example: str, folder: Path, agaricus: Path) -> None:
    requests: dict[str, Any] = {}
    if example == "sklearn":
        requests["mnist-svm"] = mnist_svm(folder / "mnist-svm.joblib")
    elif example == "xgboost":
        requests["mushroom-xgboost"] = mushroom_xgboost(folder / "mushroom-xgboost.json", agaricus)
    elif example == "lightgbm":
        requests["iris-lgb"] = iris_lightgbm(folder / "iris-lightgbm.bst")
    elif example in ("mms", "model-repository"):  # the runtimes' default file names
        requests["mnist-svm"] = mnist_svm(folder / "models" / "mnist-svm" / "model.joblib")
        requests["mushroom-xgboost"] = mushroom_xgboost(
            folder / "models" / "mushroom-xgboost" / "model.json", agaricus
        )
    else:
        raise SystemExit(f"no training for example {example!r}")
    (folder / "requests.json").write_text(json.dumps(requests))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]))
