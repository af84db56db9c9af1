"""Why a JSON body does not decode: invalid UTF-8 and lone surrogate escapes named exactly."""

from __future__ import annotations

import msgspec
import pytest

from podium.codecs import JSON_ERRORS, json_problem


def problem(data: bytes) -> str:
    with pytest.raises(JSON_ERRORS) as caught:
        msgspec.json.decode(data)
    return json_problem(caught.value, data)


def test_invalid_utf8_names_the_byte_and_its_offset_in_the_body() -> None:
    # msgspec < 0.23 raises a bare UnicodeDecodeError here, with an offset inside the string;
    # 0.23 a DecodeError "Invalid UTF-8 encoded string", with none.
    with pytest.raises((UnicodeDecodeError, msgspec.DecodeError)):
        msgspec.json.decode(b'{"a": "ok\xff"}')
    said = problem(b'{"a": "ok\xff"}')
    assert said.startswith("invalid UTF-8: byte 0xff at offset 9 (invalid start byte)")
    assert "JSON text must be UTF-8" in said
    assert "offset 2" in problem(b'{"\xc3\x28": 1}')  # a broken two-byte sequence in a key


@pytest.mark.parametrize(
    ("data", "escape", "offset"),
    [
        (rb'"\ud800"', r"\ud800", 1),  # msgspec: "Input data was truncated"
        (rb'{"text": "\ud800", "n": 1}', r"\ud800", 10),  # likewise
        (rb'["\udc00"]', r"\udc00", 2),  # a low half alone: "invalid utf-16 surrogate pair"
        (rb'"\ud800\u0041"', r"\ud800", 1),  # a high half followed by no low half
        (rb'"\\\ud800"', r"\ud800", 3),  # an escaped backslash, then the lone escape
        (rb'["\ud83d\ude00", "\uDBFF"]', r"\uDBFF", 18),  # a whole pair first, then a half
    ],
)
def test_a_lone_surrogate_escape_is_named(data: bytes, escape: str, offset: int) -> None:
    said = problem(data)
    assert said.startswith(f"lone UTF-16 surrogate escape '{escape}' at offset {offset}: ")
    assert "truncated" not in said


def test_other_faults_keep_msgspecs_words() -> None:
    assert problem(b'{"a": 1,}') == "JSON is malformed: trailing comma in object (byte 8)"
    assert problem(b'{"a": ') == "Input data was truncated"
    # msgspec stops at the first fault: a lone escape after it is not blamed.
    assert "trailing comma" in problem(rb'[1,] "\ud800"')


def test_pairs_and_escaped_backslashes_decode() -> None:
    assert msgspec.json.decode(rb'["\ud83d\ude00", "\\ud800"]') == ["\U0001f600", "\\ud800"]


def test_text_input_is_scanned_too() -> None:
    with pytest.raises(JSON_ERRORS) as caught:
        msgspec.json.decode('"\\ud800"')
    assert "lone UTF-16 surrogate" in json_problem(caught.value, '"\\ud800"')
