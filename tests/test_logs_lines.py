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
from podium.server._access import Access, AccessLog, printable

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


DURATIONS = [0, 1, 499, 500, 501, 1_499, 1_500, 2_500, 1_000_500, 1_234_567, 999_999_999] + [
    10**15 - 1,
    10**15,
    10**15 + 500,
    2**62,
    123_456_789_012_345,
    -1,
    -1_500,
]


@pytest.mark.parametrize("ns", DURATIONS)
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


def test_a_json_lines_duration_is_the_one_duration_ms_rounds() -> None:
    rng = random.Random(30)
    made = Access("r", False, 0)
    at = made.json_keys.index("duration_ms")
    for ns in DURATIONS + [rng.randrange(10 ** rng.randrange(1, 17)) for _ in range(20_000)]:
        made.end = ns
        duration = made.json_values()[at]
        assert repr(duration) == repr(made.duration_ms) == repr(round(ns / 1e6, 3))


@pytest.mark.parametrize("formatter", [TextFormatter(), TextFormatter("worker 1"), JsonFormatter()])
def test_lines_made_together_are_the_lines_made_one_by_one(formatter: Any) -> None:
    items = [("r-1", "one", access()), (None, "two", None), ("r-3", 'th"ree', {"a": 1})]
    created = 1764400000.125
    one_by_one = "".join(formatter.line(created, "INFO", "n", *item) + "\n" for item in items)
    assert formatter.lines(created, "INFO", "n", items, "\n") == one_by_one
    assert formatter.lines(created, "INFO", "n", [], "\n") == ""


#: 2025-11-29T07:06:40.250Z
CREATED = 1764400000.25
HEAD = '{"ts":"2025-11-29T07:06:40.250Z","level":"INFO","logger":"podium.access","message":'


def kinds_of_request() -> list[Access]:
    """Requests whose lines differ in every way a line can: protocols, errors, what is not
    known, non-ASCII and escaped paths, durations."""
    grpc = Access("g-2", False, 0)
    grpc.end = 250_000
    grpc.protocol, grpc.route = "oip_grpc", "ModelInfer"
    grpc.path = "/inference.GRPCInferenceService/ModelInfer"
    grpc.status, grpc.code, grpc.peer = 3, "INVALID_ARGUMENT", "[::1]:5000"
    grpc.bytes_in, grpc.model = 10, "echo"
    unknown = Access("e-3", True, 0)  # a 404: no route, model or peer; no time passed
    unknown.method, unknown.path, unknown.status = "GET", "/nowhere", 404
    accented = Access("u-4", False, 5)
    accented.end = 5 + 98_765_432_109
    accented.protocol, accented.route, accented.method = "truss", "predict", "POST"
    accented.path = printable("/v1/models/modèle/😀:predict")  # printable: kept as it is
    accented.status, accented.model, accented.version = 500, "modèle", "ü"
    accented.peer, accented.bytes_out = "10.0.0.2:7", 33
    escaped = Access("x-5", False, 0)
    escaped.end = 1_500  # a tie: rounds to even
    escaped.protocol, escaped.method, escaped.status = "torchserve", "GET", 499
    escaped.path = printable('/predictions/a"b\\c\x07\u2028é')  # not printable: escaped
    return [access(), grpc, unknown, accented, escaped]


#: Each request's line, as JsonFormatter has always made it (msgspec: non-ASCII written as it
#: is, '"' and '\' escaped by a backslash, control characters as \uXXXX or \n and the like).
LINES = [
    f'{HEAD}{json.dumps(MESSAGE)},"request_id":"r-1",{KEYS}}}',  # (ASCII: as msgspec writes)
    HEAD + '"[::1]:5000 oip_grpc ModelInfer \\"/inference.GRPCInferenceService/ModelInfer\\" '
    'INVALID_ARGUMENT 0.250ms in=10 out=0 model=echo version=-","request_id":"g-2",'
    '"protocol":"oip_grpc","route":"ModelInfer","method":null,'
    '"path":"/inference.GRPCInferenceService/ModelInfer","status":3,"code":"INVALID_ARGUMENT",'
    '"duration_ms":0.25,"bytes_in":10,"bytes_out":0,"model":"echo","version":null,'
    '"peer":"[::1]:5000"}',
    HEAD + '"- - - \\"GET /nowhere\\" 404 0.000ms in=0 out=0 model=- version=-",'
    '"request_id":"e-3","protocol":null,"route":null,"method":"GET","path":"/nowhere",'
    '"status":404,"code":null,"duration_ms":0.0,"bytes_in":0,"bytes_out":0,"model":null,'
    '"version":null,"peer":null}',
    HEAD + '"10.0.0.2:7 truss predict \\"POST /v1/models/modèle/😀:predict\\" 500 98765.432ms '
    'in=0 out=33 model=modèle version=ü","request_id":"u-4","protocol":"truss",'
    '"route":"predict","method":"POST","path":"/v1/models/modèle/😀:predict","status":500,'
    '"code":null,"duration_ms":98765.432,"bytes_in":0,"bytes_out":33,"model":"modèle",'
    '"version":"ü","peer":"10.0.0.2:7"}',
    HEAD + '"- torchserve - \\"GET /predictions/a\\\\\\"b\\\\\\\\c\\\\x07\\\\u2028\\\\xe9\\" 499 '
    '0.002ms in=0 out=0 model=- version=-","request_id":"x-5","protocol":"torchserve",'
    '"route":null,"method":"GET","path":"/predictions/a\\\\\\"b\\\\\\\\c\\\\x07\\\\u2028\\\\xe9",'
    '"status":499,"code":null,"duration_ms":0.002,"bytes_in":0,"bytes_out":0,"model":null,'
    '"version":null,"peer":null}',
]


def test_json_access_lines_of_every_kind_of_request_are_pinned_byte_for_byte() -> None:
    made = kinds_of_request()
    items: Any = [(one.id, str(one), one) for one in made]
    formatter = JsonFormatter()
    assert formatter.lines(CREATED, "INFO", "podium.access", items, "\n") == (
        "".join(line + "\n" for line in LINES)
    )
    assert formatter.lines(CREATED, "INFO", "podium.access", items, "\r\n") == (
        "".join(line + "\r\n" for line in LINES)
    )
    # each line as a record's (the keys through a dict) is the same line
    for one, line in zip(made, LINES, strict=True):
        assert formatter.line(CREATED, "INFO", "podium.access", one.id, str(one), one) == line
    # with no request id
    assert formatter.lines(CREATED, "INFO", "n", [(None, "m", made[2])], "\n") == (
        '{"ts":"2025-11-29T07:06:40.250Z","level":"INFO","logger":"n","message":"m",'
        '"request_id":null,' + LINES[2].split('"request_id":"e-3",')[1] + "\n"
    )


def test_an_access_names_its_json_keys_and_values_as_its_fields_do() -> None:
    for one in kinds_of_request():
        pairs = list(zip(one.json_keys, one.json_values(), strict=True))
        assert list(one.fields().items()) == pairs


def test_json_access_lines_written_by_the_log_are_pinned_byte_for_byte() -> None:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    stream = io.StringIO()
    try:
        root.handlers.clear()
        configure("INFO", "json", stream=stream)
        log = AccessLog()
        for one in kinds_of_request():
            log.write(one)  # made on the log's thread
        log.flush()
        written = stream.getvalue()
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)
    stamp = r'"ts":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"'
    assert re.sub(stamp, '"ts":"2025-11-29T07:06:40.250Z"', written) == "".join(
        line + "\n" for line in LINES
    )


def test_json_lines_with_static_keys_are_pinned_byte_for_byte() -> None:
    formatter = JsonFormatter({"worker": "w-1", "level": "not this", "pid": 7})
    items: Any = [(one.id, str(one), one) for one in kinds_of_request()[1:3]]
    static = '"worker":"w-1","pid":7,'
    expected = [line.replace('"protocol":', static + '"protocol":', 1) for line in LINES[1:3]]
    assert formatter.lines(CREATED, "INFO", "podium.access", items, "\n") == "".join(
        line + "\n" for line in expected
    )


class Keys:
    """Fields that name their keys (as Access does), which ``fields()`` gives too."""

    json_keys: tuple[Any, ...] = ("a", "b")

    def __init__(self, *values: Any) -> None:
        self.values = values

    def json_values(self) -> tuple[Any, ...]:
        return self.values

    def fields(self) -> dict[Any, Any]:
        return dict(zip(self.json_keys, self.values, strict=True))


class Clashing(Keys):
    json_keys = ("a", "message", "b")


class Unwritable(Keys):
    json_keys = ('a"', "b\\", "c\n")


class Twice(Keys):
    json_keys = ("a", "b", "a")


class Strange:
    def __str__(self) -> str:
        return 'strange "one"'


@pytest.mark.parametrize(
    ("fields", "keys"),
    [
        (Keys(1, [2.5, None]), '"a":1,"b":[2.5,null]'),
        (Keys(Strange(), "é"), '"a":"strange \\"one\\"","b":"é"'),  # JSON cannot carry it
        (Clashing(1, "not this", 3), '"a":1,"b":3'),  # a standard key is never replaced
        (Unwritable(1, 2, 3), '"a\\"":1,"b\\\\":2,"c\\n":3'),
        (Twice(1, 2, 3), '"a":3,"b":2'),
    ],
)
def test_json_lines_of_any_fields_are_the_lines_their_dicts_make(fields: Any, keys: str) -> None:
    formatter = JsonFormatter()
    line = (
        '{"ts":"2025-11-29T07:06:40.250Z","level":"INFO","logger":"n","message":"m",'
        f'"request_id":"r",{keys}}}'
    )
    assert formatter.line(CREATED, "INFO", "n", "r", "m", fields) == line
    plain = line.replace(keys, '"a":1,"b":2')
    items: Any = [("r", "m", fields), ("r", "m", Keys(1, 2))]
    assert formatter.lines(CREATED, "INFO", "n", items, "\n") == f"{line}\n{plain}\n"


def test_json_access_lines_are_made_without_a_dict_of_their_keys() -> None:
    class Undicted(Keys):
        def fields(self) -> dict[Any, Any]:
            raise AssertionError("the lines' keys were made into a dict")

    items: Any = [("r", "m", Undicted(1, "x")), ("s", "n", Undicted(2, None))]
    assert JsonFormatter().lines(CREATED, "INFO", "n", items, "\n") == (
        '{"ts":"2025-11-29T07:06:40.250Z","level":"INFO","logger":"n","message":"m",'
        '"request_id":"r","a":1,"b":"x"}\n'
        '{"ts":"2025-11-29T07:06:40.250Z","level":"INFO","logger":"n","message":"n",'
        '"request_id":"s","a":2,"b":null}\n'
    )
