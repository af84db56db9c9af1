"""The error hierarchy's promises: one table of statuses, and messages of bounded size."""

from __future__ import annotations

import logging

import pytest

from podium import errors
from podium.errors import (
    MAX_DETAILS,
    MAX_MESSAGE,
    Forbidden,
    InvalidInput,
    ModelError,
    ModelStatus,
    PodiumError,
    ValidationFailed,
    bounded,
    grpc_code,
    http_status,
)
from podium.logs import MAX_LOG_LINE, MAX_LOG_MESSAGE, MAX_TRACEBACK, BoundedFormatter


def test_forbidden_is_403_and_permission_denied() -> None:
    exc = Forbidden("no")
    assert (http_status(exc), grpc_code(exc)) == (403, "PERMISSION_DENIED")


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (400, "INVALID_ARGUMENT"),
        (404, "NOT_FOUND"),
        (405, "UNIMPLEMENTED"),
        (429, "RESOURCE_EXHAUSTED"),
        (501, "UNIMPLEMENTED"),
        (503, "UNAVAILABLE"),  # Unavailable's, not SequenceLimit's
        (507, "RESOURCE_EXHAUSTED"),
        (418, "UNKNOWN"),
        (502, "INTERNAL"),
    ],
)
def test_a_status_the_model_chose_has_the_tables_code(status: int, code: str) -> None:
    exc = ModelStatus("the model's own", status)
    assert (http_status(exc), grpc_code(exc)) == (status, code)


def test_bounded_cuts_and_says_how_long_it_was() -> None:
    assert bounded("short") == "short"
    assert bounded("x" * MAX_MESSAGE) == "x" * MAX_MESSAGE
    cut = bounded("y" * 5000, 10)
    assert cut == "yyyyyyyyyy… (cut at 10 of 5000 characters)"


@pytest.mark.parametrize("cls", [PodiumError, InvalidInput, ModelError, Forbidden])
def test_every_error_message_is_bounded(cls: type[PodiumError]) -> None:
    huge = "model 'm' got " + "z" * 20_000_000
    exc = cls(huge)
    assert len(exc.message) < MAX_MESSAGE + 64
    assert str(exc) == exc.message and exc.args == (exc.message,)
    assert exc.message.endswith(f"(cut at {MAX_MESSAGE} of {len(huge)} characters)")
    assert exc.message.startswith("model 'm' got zzz")


def test_validation_details_are_bounded_in_number_and_size() -> None:
    details: list[dict[str, object]] = [
        {"loc": ["k" * 10_000, i], "msg": "m" * 10_000, "type": "int_parsing"} for i in range(1000)
    ]
    exc = ValidationFailed("bad", details)
    assert len(exc.details) == MAX_DETAILS
    first = exc.details[0]
    loc = first["loc"]
    assert isinstance(loc, list) and len(loc[0]) < 300 and loc[1] == 0
    assert isinstance(first["msg"], str) and len(first["msg"]) < 300
    assert first["type"] == "int_parsing"


def test_the_table_covers_every_error() -> None:
    for name in errors.__all__:
        value = getattr(errors, name)
        if isinstance(value, type) and issubclass(value, PodiumError):
            assert 400 <= http_status(value("x")) < 600


def record(message: str, *args: object, exc: BaseException | None = None) -> logging.LogRecord:
    info = (type(exc), exc, exc.__traceback__) if exc is not None else None
    return logging.LogRecord("podium.test", logging.ERROR, __file__, 1, message, args, info)


def test_log_lines_are_bounded() -> None:
    formatter = BoundedFormatter("%(levelname)s %(name)s: %(message)s")
    huge = "v" * 20_000_000
    line = formatter.format(record("stream failed: %s", huge))
    assert len(line) < MAX_LOG_MESSAGE + 100
    assert line.startswith("ERROR podium.test: stream failed: vvv")
    assert line.endswith(f"(cut at {MAX_LOG_MESSAGE} of {len(huge) + 15} characters)")
    short = formatter.format(record("ready; serving %s", "model 'a'"))
    assert short == "ERROR podium.test: ready; serving model 'a'"


def test_a_traceback_quoting_a_huge_value_is_bounded() -> None:
    try:
        try:
            raise KeyError("k" * 5_000_000)
        except KeyError as inner:
            raise ValueError("bad input " + "v" * 20_000_000 + "\n" * 100_000) from inner
    except ValueError as exc:
        caught = exc
    text = BoundedFormatter().format(record("model 'm' predict raised", exc=caught))
    assert len(text) < 2 * MAX_TRACEBACK + 200
    assert text.startswith("model 'm' predict raised\nTraceback (most recent call last):")
    assert "KeyError: 'kkkk" in text
    assert all(len(line) <= MAX_LOG_LINE + 64 for line in text.split("\n"))
