"""The venv where MLServer 1.7.1 and TorchServe 0.12.0 are installed (example_kit.peers_python):
its ``mlserver`` and ``ts`` are the real packages, so the examples' tests that run on it
exercise Podium under the real ones; and MLServer's own PandasCodec gives the same wire forms as
podium.compat.mlserver's for the frames both handle."""

from __future__ import annotations

import json
import subprocess
import textwrap
from typing import Any

import pytest
from conftest import ROOT
from example_kit import need, peers_python

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # the venv is built on first use

#: Frames MLServer 1.7's codec can encode (it fails on pandas 3's "str" columns, which
#: tests/test_compat_mlserver_pandas.py covers on Podium's side), as Python source.
FRAMES = """
import numpy as np
import pandas as pd
FRAMES = [
    pd.DataFrame({"x": [1.5, 2.5], "n": np.array([1, 2], dtype=np.int32), "b": [True, False]}),
    pd.DataFrame({"s": pd.Series(["ab", "c"], dtype=object), "a": [0.25, np.nan]}),
    pd.DataFrame({"o": pd.Series([{"k": 1}, [1, 2]], dtype=object), "i": [7, 8]}),
]
"""

ENCODE = FRAMES + textwrap.dedent(
    """
    import json, sys
    from mlserver.codecs import PandasCodec
    out = []
    for frame in FRAMES:
        out.append({
            "response": json.loads(PandasCodec.encode_response("m", frame, "1").model_dump_json()),
            "request": json.loads(PandasCodec.encode_request(frame).model_dump_json()),
            "text": json.loads(
                PandasCodec.encode_request(frame, use_bytes=False).model_dump_json()
            ),
        })
    print(json.dumps(out))
    """
)


def _peers(script: str) -> Any:
    done = subprocess.run(
        [peers_python(), "-c", script], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_peers_venv_has_the_real_mlserver_and_torchserve() -> None:
    found = _peers(
        "import json, mlserver, mlserver_sklearn, mlserver_lightgbm, ts, ts.version\n"
        "from ts.torch_handler.base_handler import BaseHandler\n"
        "print(json.dumps([mlserver.__version__, mlserver.__file__, ts.version.__version__,"
        " ts.__file__, BaseHandler.__module__]))"
    )
    mlserver_version, mlserver_file, ts_version, ts_file, base_handler = found
    assert mlserver_version == "1.7.1" and ts_version == "0.12.0"
    for file in (mlserver_file, ts_file):
        assert "site-packages" in file and "podium" not in file
    assert base_handler == "ts.torch_handler.base_handler"


def test_podiums_pandas_codec_encodes_as_mlservers() -> None:
    mlservers = _peers(ENCODE)
    need("pandas")
    from podium.compat.mlserver.codecs import PandasCodec

    namespace: dict[str, Any] = {}
    exec(FRAMES, namespace)
    for frame, theirs in zip(namespace["FRAMES"], mlservers, strict=True):
        ours = {
            "response": PandasCodec.encode_response("m", frame, "1").model_dump_json(),
            "request": PandasCodec.encode_request(frame).model_dump_json(),
            "text": PandasCodec.encode_request(frame, use_bytes=False).model_dump_json(),
        }
        assert {k: json.loads(v) for k, v in ours.items()} == theirs


def test_mlservers_pandas_codec_decodes_what_podiums_encodes() -> None:
    need("pandas")
    from podium.compat.mlserver.codecs import PandasCodec

    namespace: dict[str, Any] = {}
    exec(FRAMES, namespace)
    wires = [PandasCodec.encode_request(f).model_dump_json() for f in namespace["FRAMES"]]
    script = FRAMES + textwrap.dedent(
        f"""
        import json
        from mlserver.codecs import PandasCodec
        from mlserver.types import InferenceRequest
        wires = {wires!r}
        same = []
        for frame, wire in zip(FRAMES, wires):
            back = PandasCodec.decode_request(InferenceRequest.model_validate_json(wire))
            # values and numeric dtypes (pandas 3 may read text back as its "str" dtype)
            numeric = [c for c in frame if frame[c].dtype != object]
            same.append(
                back.astype(object).equals(frame.astype(object))
                and list(back[numeric].dtypes) == list(frame[numeric].dtypes)
            )
        print(json.dumps(same))
        """
    )
    assert _peers(script) == [True, True, True]
