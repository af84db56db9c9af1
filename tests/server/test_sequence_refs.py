"""How each protocol names a call's place in a stateful sequence (server/_sequences.py)."""

from __future__ import annotations

from typing import Any

import pytest

from podium.errors import InvalidInput, http_status
from podium.server import _sequences
from podium.types import SequenceRef

NAME = "ts_request_sequence_id"


def headers(**values: str) -> Any:
    return lambda name: values.get(name)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(True, True), (False, False), (1, True), (0, False), ("true", True), ("TRUE", True),
     ("1", True), ("yes", True), ("on", True), ("false", False), ("0", False), ("", False),
     (None, False), (b"true", True), (b"no", False)],
)  # fmt: skip
def test_flags(value: Any, expected: bool) -> None:
    assert _sequences.flag(value) is expected


def test_from_headers() -> None:
    assert _sequences.from_headers(headers(), NAME) is None  # not a sequence call at all
    ref = _sequences.from_headers(headers(ts_request_sequence_id="abc"), NAME)
    assert ref == SequenceRef(id="abc")
    ref = _sequences.from_headers(
        headers(ts_request_sequence_id=" s-1 ", ts_request_sequence_id_end="true"), NAME
    )
    assert ref == SequenceRef(id="s-1", end=True)
    ref = _sequences.from_headers(headers(ts_request_sequence_id_start="1"), NAME)
    assert ref == SequenceRef(id=None, start=True)  # no id: the server makes one
    assert _sequences.from_headers(headers(ts_request_sequence_id=""), NAME) == SequenceRef()


def test_from_headers_takes_torchserve_s_own_flag_names() -> None:
    ref = _sequences.from_headers(
        headers(ts_request_sequence_id="a", ts_request_sequence_start="true"), NAME
    )
    assert ref == SequenceRef(id="a", start=True)
    ref = _sequences.from_headers(headers(ts_request_sequence_end="1"), NAME)
    assert ref == SequenceRef(end=True)
    # with another id header name, TorchServe's flag names still count
    ref = _sequences.from_headers(headers(session="s", ts_request_sequence_end="yes"), "session")
    assert ref == SequenceRef(id="s", end=True)


def test_an_id_joined_from_repeated_lines_is_that_id_or_a_clear_refusal() -> None:
    ref = _sequences.from_headers(headers(ts_request_sequence_id="abc, abc"), NAME)
    assert ref == SequenceRef(id="abc")
    ref = _sequences.from_headers(headers(ts_request_sequence_id=b"abc,abc, abc"), NAME)
    assert ref == SequenceRef(id="abc")
    with pytest.raises(InvalidInput, match="names 2 different sequences") as caught:
        _sequences.from_headers(headers(ts_request_sequence_id="abc, xyz"), NAME)
    assert http_status(caught.value) == 400


def test_from_parameters_as_triton_sends_them() -> None:
    assert _sequences.from_parameters(None) is None
    assert _sequences.from_parameters({"other": 1}) is None
    ref = _sequences.from_parameters({"sequence_id": 42, "sequence_start": True})
    assert ref == SequenceRef(id="42", start=True)
    assert _sequences.from_parameters({"sequence_id": 0}) == SequenceRef()  # 0: none
    ref = _sequences.from_parameters({"sequence_id": "chat-7", "sequence_end": True})
    assert ref == SequenceRef(id="chat-7", end=True)


def test_merged_takes_what_either_says() -> None:
    a = SequenceRef(id="x")
    b = SequenceRef(end=True)
    assert _sequences.merged(a, None) is a and _sequences.merged(None, b) is b
    assert _sequences.merged(a, b) == SequenceRef(id="x", end=True)


def test_response_headers() -> None:
    assert _sequences.response_headers(None, NAME) == []
    assert _sequences.response_headers(SequenceRef(), NAME) == []
    ref = SequenceRef(id="abc", ended=True, headers={"X-Step": "3"})
    assert _sequences.response_headers(ref, NAME) == [
        (b"ts_request_sequence_id", b"abc"),
        (b"ts_request_sequence_id_end", b"true"),
        (b"x-step", b"3"),
    ]
    # a header the model set replaces Podium's own of the same name (one line each)
    ref = SequenceRef(id="abc", headers={"TS_Request_Sequence_Id": "abc"})
    assert _sequences.response_headers(ref, NAME) == [(b"ts_request_sequence_id", b"abc")]
