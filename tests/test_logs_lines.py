"""The access line and the formatters' lines, pinned byte for byte (podium.logs,
server/_access.py): what the cheaper making of a line must keep exactly."""

from __future__ import annotations

import io
import json
import logging
import random
import re
import threading
import time
from typing import Any

import pytest

from podium.logs import JsonFormatter, TextFormatter, configure, configured
from podium.server._access import Access, AccessLog

MESSAGE = (
    '10.0.0.1:5 oip_rest modelInfer "POST /v2/models/echo/infer" 200 1.235ms in=80 out=120 '
    "model=echo version=1"
)
KEYS = (
    '"protocol":"oip_rest","route":"modelInfer","method":"POST","path":"/v2/models/echo/infer",'
    '"status":200,"code":null,"duration_ms":1.235,"bytes_in":80,"bytes_out":120,"model":"echo",'
    '"version":"1","peer":"10.0.0.1:5"'
)


def access() -> Access:
    made = Access("r-1", True, 1_000)
    made.end = 1_000 + 1_234_567
    made.protocol, made.route, made.method = "oip_rest", "modelInfer", "POST"
    made.path, made.status, made.peer = "/v2/models/echo/infer", 200, "10.0.0.1:5"
    made.bytes_in, made.bytes_out, made.model, made.version = 80, 120, "echo", "1"
    return made


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_an_access_line_is_pinned_byte_for_byte(fmt: str) -> None:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    stream = io.StringIO()
    try:
        root.handlers.clear()
        configure("INFO", fmt, stream=stream)
        assert configured() is not None
        log = AccessLog()
        log.write(access())  # made by the writer's formatter, on the log's thread
        log.write(access())
        log.flush()  # (which has written both now)
        written = stream.getvalue()
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)
    if fmt == "text":
        stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}"
        one = f" INFO podium.access [r-1]: {MESSAGE}\n"
        assert re.fullmatch(f"({stamp}{re.escape(one)}){{2}}", written)
    else:
        one = (
            '{"ts":"TS","level":"INFO","logger":"podium.access",'
            f'"message":{json.dumps(MESSAGE)},"request_id":"r-1",{KEYS}}}\n'
        )
        stamp = r'"ts":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"'
        assert re.sub(stamp, '"ts":"TS"', written) == one * 2


def test_stamps_are_the_clocks_to_the_millisecond_whatever_came_before() -> None:
    text, js = TextFormatter(), JsonFormatter()
    # the same second, another millisecond; the same time again; the next second; back
    for created in (1764400000.25, 1764400000.9995, 1764400000.9995, 1764400001.0, 1764400000.25):
        local = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(int(created)))
        ms = f"{int((created % 1) * 1000):03d}"
        assert text.line(created, "INFO", "n", None, "m", None) == f"{local},{ms} INFO n: m"
        parsed = json.loads(js.line(created, "INFO", "n", None, "m", None))
        assert parsed["ts"] == time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(int(created))) + (
            f".{ms}Z"
        )
    assert json.loads(js.line(1764400000.25, "INFO", "n", None, "m", None))["ts"] == (
        "2025-11-29T07:06:40.250Z"
    )


def test_stamps_made_on_many_threads_at_once_are_each_their_own_times() -> None:
    formatter = JsonFormatter()
    wrong: list[float] = []

    def log(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(2_000):
            created = 1764400000 + rng.randrange(3_000) / 1000
            ts = json.loads(formatter.line(created, "INFO", "n", None, "m", None))["ts"]
            if ts[-4:-1] != f"{int((created % 1) * 1000):03d}":
                wrong.append(created)

    threads = [threading.Thread(target=log, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wrong == []


def test_json_keys_keep_their_order_and_static_and_standard_keys_win() -> None:
    formatter = JsonFormatter({"worker": "1", "level": "not this"})
    line = formatter.line(1764400000.25, "INFO", "n", "r", "m", {"a": 1, "worker": 2, "b": 3})
    assert line == (
        '{"ts":"2025-11-29T07:06:40.250Z","level":"INFO","logger":"n","message":"m",'
        '"request_id":"r","worker":"1","a":1,"b":3}'
    )
    line = formatter.line(1764400000.25, "INFO", "n", None, "m", {"a": 1, "b": [2]})
    assert line.endswith('"request_id":null,"worker":"1","a":1,"b":[2]}')


@pytest.mark.parametrize(
    "ns",
    [0, 1, 499, 500, 501, 1_499, 1_500, 2_500, 1_000_500, 1_234_567, 999_999_999, 10**15 - 1]
    + [10**15, 10**15 + 500, 2**62, 123_456_789_012_345],
)
def test_a_duration_is_rounded_to_the_microsecond_as_round_rounds_it(ns: int) -> None:
    made = Access("r", False, 0)
    made.end = ns
    assert repr(made.duration_ms) == repr(round(ns / 1e6, 3))


def test_durations_at_random_round_as_round_rounds_them() -> None:
    rng = random.Random(26)
    made = Access("r", False, 0)
    for _ in range(20_000):
        made.end = rng.randrange(10 ** rng.randrange(1, 17))
        assert made.duration_ms == round(made.end / 1e6, 3)


@pytest.mark.parametrize("formatter", [TextFormatter(), TextFormatter("worker 1"), JsonFormatter()])
def test_lines_made_together_are_the_lines_made_one_by_one(formatter: Any) -> None:
    items = [("r-1", "one", access()), (None, "two", None), ("r-3", 'th"ree', {"a": 1})]
    created = 1764400000.125
    one_by_one = "".join(formatter.line(created, "INFO", "n", *item) + "\n" for item in items)
    assert formatter.lines(created, "INFO", "n", items, "\n") == one_by_one
    assert formatter.lines(created, "INFO", "n", [], "\n") == ""
