"""podium.compat.mlserver's PandasCodec: MLServer 1.7's wire forms, pandas imported on first use.

The expected forms are what MLServer 1.7.1's own PandasCodec produces for the same frames
(checked side by side with MLServer installed in tests/examples/test_with_peers_installed.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

try:
    import pandas as pd
except ImportError as exc:  # a failure with the reason, never a silent skip
    pytest.fail(f"pandas is not installed ({exc}); python3 dev.py test installs podium[examples]")

from podium.compat.mlserver import MLModel, ModelSettings, codecs, types  # noqa: E402
from podium.compat.mlserver.codecs import PandasCodec, decode_args  # noqa: E402
from podium.compat.mlserver.codecs.base import (  # noqa: E402
    find_request_codec,
    find_request_codec_by_payload,
    find_request_codec_by_type_hint,
)


def frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "a": [1.5, np.nan, 3.0],
            "n": np.array([1, 2, 3], dtype=np.int32),
            "s": pd.Series(["x", "y", "z"], dtype=object),
            "o": [{"k": 1}, [1, 2], "t"],
            "f": [True, False, True],
        }
    )


def test_a_frame_encodes_one_output_per_column_as_mlserver_does() -> None:
    response = PandasCodec.encode_response("m", frame(), "1")
    assert response.model_dump() == {
        "model_name": "m",
        "model_version": "1",
        "parameters": {"content_type": "pd"},
        "outputs": [
            {"name": "a", "shape": [3, 1], "datatype": "FP64", "data": [1.5, None, 3.0]},
            {"name": "n", "shape": [3, 1], "datatype": "INT32", "data": [1, 2, 3]},
            {
                "name": "s",
                "shape": [3, 1],
                "datatype": "BYTES",
                "parameters": {"content_type": "str"},
                "data": [b"x", b"y", b"z"],
            },
            {
                "name": "o",
                "shape": [3, 1],
                "datatype": "BYTES",
                "parameters": {"content_type": "pd_json"},
                "data": [b'{"k":1}', b"[1,2]", b'"t"'],
            },
            {"name": "f", "shape": [3, 1], "datatype": "BOOL", "data": [True, False, True]},
        ],
    }
    as_text = PandasCodec.encode_request(frame(), use_bytes=False)
    assert as_text.parameters is not None and as_text.parameters.content_type == "pd"
    assert [i.data.root for i in as_text.inputs][2:4] == [
        ["x", "y", "z"],
        ['{"k":1}', "[1,2]", '"t"'],
    ]


def test_a_request_decodes_to_a_frame_column_by_column() -> None:
    request = types.InferenceRequest.model_validate(
        {
            "parameters": {"content_type": "pd"},
            "inputs": [
                {"name": "x", "datatype": "FP64", "shape": [2, 1], "data": [1.0, 2.0]},
                {
                    "name": "w",
                    "datatype": "BYTES",
                    "shape": [2],
                    "data": ["hi", "yo"],
                    "parameters": {"content_type": "str"},
                },
                {
                    "name": "j",
                    "datatype": "BYTES",
                    "shape": [2],
                    "data": ['{"a":1}', "[1]"],
                    "parameters": {"content_type": "pd_json"},
                },
            ],
        }
    )
    decoded = PandasCodec.decode_request(request)
    assert list(decoded.columns) == ["x", "w", "j"]
    assert decoded["x"].dtype == np.float64 and decoded["x"].tolist() == [1.0, 2.0]
    assert decoded["w"].tolist() == ["hi", "yo"]
    assert decoded["j"].tolist() == [{"a": 1}, [1]]


def test_encode_then_decode_gives_the_frame_back() -> None:
    wire = json.loads(PandasCodec.encode_request(frame()).model_dump_json())
    back = PandasCodec.decode_request(types.InferenceRequest.model_validate(wire))
    assert back["n"].dtype == np.int32 and back["n"].tolist() == [1, 2, 3]
    assert np.isnan(back["a"][1]) and back["a"][0] == 1.5
    assert back["s"].tolist() == ["x", "y", "z"]
    assert back["o"].tolist() == [{"k": 1}, [1, 2], "t"]
    assert back["f"].tolist() == [True, False, True]
    response = PandasCodec.encode_response("m", frame())
    assert PandasCodec.decode_response(response)["n"].tolist() == [1, 2, 3]


def test_text_columns_of_pandas_3_and_gaps_encode() -> None:
    # pandas >= 3 keeps text in its "str" dtype, where MLServer 1.7 raises KeyError('O');
    # a text column with a gap is sent as JSON elements, the gap as null.
    outputs = PandasCodec.encode_outputs(pd.DataFrame({"t": ["x", "y"], "g": ["x", None]}))
    assert outputs[0].datatype == "BYTES"
    assert outputs[0].parameters is not None and outputs[0].parameters.content_type == "str"
    assert outputs[0].data.root == [b"x", b"y"]
    assert outputs[1].parameters is not None and outputs[1].parameters.content_type == "pd_json"
    assert outputs[1].data.root == [b'"x"', b"null"]


def test_the_codec_is_found_by_content_type_payload_and_type_hint() -> None:
    assert find_request_codec("pd") is PandasCodec
    assert find_request_codec_by_payload(frame()) is PandasCodec
    assert find_request_codec_by_type_hint(pd.DataFrame) is PandasCodec
    assert not PandasCodec.can_encode([1, 2]) and not PandasCodec.can_encode(np.ones(2))
    assert codecs.PandasCodec is PandasCodec


@pytest.mark.anyio
async def test_runtimes_reach_it_through_decode_request_and_decode_args() -> None:
    class Runtime(MLModel):
        async def predict(self, payload: types.InferenceRequest) -> types.InferenceResponse:
            table = self.decode_request(payload)
            assert isinstance(table, pd.DataFrame)
            return self.encode_response(table * 2)

        @decode_args
        async def typed(self, table: pd.DataFrame) -> pd.DataFrame:
            return table + 1

    runtime = Runtime(ModelSettings(name="tab", implementation=Runtime))
    request = PandasCodec.encode_request(pd.DataFrame({"v": [1.0, 2.0]}))
    answer = await runtime.predict(request)
    assert answer.parameters is not None and answer.parameters.content_type == "pd"
    assert answer.outputs[0].data.root == [2.0, 4.0]
    typed = await runtime.typed(PandasCodec.encode_request(pd.DataFrame({"v": [1.0, 2.0]})))
    assert typed.outputs[0].name == "v" and typed.outputs[0].data.root == [2.0, 3.0]


def test_pandas_is_imported_only_when_the_codec_first_converts() -> None:
    script = textwrap.dedent(
        """
        import sys
        from podium.compat.mlserver.codecs import PandasCodec
        assert "pandas" not in sys.modules, "imported with mlserver.codecs"
        assert not PandasCodec.can_encode([1])
        assert "pandas" not in sys.modules, "imported by can_encode"
        import pandas
        assert PandasCodec.TypeHint is pandas.DataFrame
        print("ok")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
