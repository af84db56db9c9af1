"""podium.logs (the formatters, the request id filter) and the access record's pieces
(server/_access.py): unit tests. The end-to-end ones are tests/server/test_logs_e2e.py."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from podium import request_id
from podium.devices import using
from podium.logs import (
    MAX_LOG_MESSAGE,
    JsonFormatter,
    LineWriter,
    RequestIdFilter,
    TextFormatter,
    configure,
    configured,
)
from podium.model._calls import run_sync
from podium.server._access import (
    MAX_PATH,
    Access,
    AccessLog,
    RequestIds,
    adopt,
    client_id,
    printable,
    with_request_id,
)
from podium.server.http import INFERENCE_ROUTES, AccessMiddleware
from podium.server.http._access import KNOWN
from podium.types import RequestInfo, current_request


def record(message: str, *args: object, exc: BaseException | None = None) -> logging.LogRecord:
    info = (type(exc), exc, exc.__traceback__) if exc is not None else None
    made = logging.LogRecord("podium.test", logging.WARNING, __file__, 1, message, args, info)
    RequestIdFilter().filter(made)
    return made


def test_json_lines_have_the_stable_keys() -> None:
    token = current_request.set(RequestInfo("r-1"))
    try:
        line = JsonFormatter().format(record("serving %s", "m"))
    finally:
        current_request.reset(token)
    parsed = json.loads(line)
    assert set(parsed) == {"ts", "level", "logger", "message", "request_id"}
    assert parsed["level"] == "WARNING"
    assert parsed["logger"] == "podium.test"
    assert parsed["message"] == "serving m"
    assert parsed["request_id"] == "r-1"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", parsed["ts"])
    assert json.loads(JsonFormatter().format(record("outside")))["request_id"] is None


def test_json_lines_escape_and_bound_what_they_carry() -> None:
    nasty = 'a "quote", a \\ backslash,\na newline, \x00 and \u2028' + "v" * 20_000_000
    try:
        raise ValueError("bad input " + "w" * 5_000_000)
    except ValueError as exc:
        caught = exc
    line = JsonFormatter({"worker": "1"}).format(record("%s", nasty, exc=caught))
    assert "\n" not in line  # one object per line
    parsed = json.loads(line)
    assert parsed["message"].startswith(nasty[:60])
    assert len(parsed["message"]) < MAX_LOG_MESSAGE + 100
    assert parsed["exception"].startswith("Traceback (most recent call last):")
    assert len(parsed["exception"]) < 40_000
    assert parsed["worker"] == "1"


def test_a_records_fields_become_keys_without_replacing_the_standard_ones() -> None:
    made = record("hello")
    made.fields = {"protocol": "oip_rest", "message": "not this", "size": 3}  # type: ignore[attr-defined]
    parsed = json.loads(JsonFormatter().format(made))
    assert parsed["protocol"] == "oip_rest"
    assert parsed["size"] == 3
    assert parsed["message"] == "hello"


def test_text_lines_put_the_request_id_in_brackets() -> None:
    formatter = TextFormatter()
    token = current_request.set(RequestInfo("r-2"))
    try:
        line = formatter.format(record("predicting"))
    finally:
        current_request.reset(token)
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} WARNING podium\.test \[r-2\]: predicting", line
    )
    assert formatter.format(record("idle")).endswith(" WARNING podium.test: idle")
    assert (
        TextFormatter("worker 1 pid 9")
        .format(record("x"))
        .endswith("podium.test [worker 1 pid 9]: x")
    )
    huge = formatter.format(record("%s", "v" * 20_000_000))
    assert len(huge) < MAX_LOG_MESSAGE + 200


def test_configure_installs_one_bounded_handler_in_the_chosen_format() -> None:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    stream = io.StringIO()
    try:
        root.handlers.clear()
        configure("INFO", "json", stream=stream)
        logging.getLogger("models.x").info("hello %d", 1)
        assert json.loads(stream.getvalue())["message"] == "hello 1"
        with pytest.raises(ValueError, match="log-format must be 'text' or 'json'"):
            configure("INFO", "yaml")
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)


@pytest.mark.anyio
async def test_model_threads_log_with_the_request_they_serve() -> None:
    """Sync model code runs in the pool's threads with the request's context (run_sync)."""
    seen: list[tuple[str | None, str]] = []

    def predict() -> None:
        seen.append((request_id(), threading.current_thread().name))

    with ThreadPoolExecutor(2, thread_name_prefix="model") as pool:

        async def serve(rid: str) -> None:
            current_request.set(RequestInfo(rid))
            await run_sync(pool, predict)

        await asyncio.gather(*(asyncio.create_task(serve(f"r{i}")) for i in range(6)))
        await run_sync(pool, predict)  # outside a request
    assert sorted(rid or "" for rid, _ in seen) == ["", "r0", "r1", "r2", "r3", "r4", "r5"]
    assert all(name.startswith("model") for _, name in seen)


# -- ids --------------------------------------------------------------------------------------


def test_made_ids_are_unique_and_share_a_random_prefix() -> None:
    ids = RequestIds()
    made = [ids.make() for _ in range(1000)]
    assert len(set(made)) == 1000
    assert all(re.fullmatch(r"[0-9a-f]{12}-[0-9a-f]+", m) for m in made)
    assert RequestIds().prefix != ids.prefix


@pytest.mark.parametrize(
    ("sent", "taken"),
    [
        (b"abc-123", "abc-123"),
        ("4bf92f3577b34da6a3ce929d0e0e4736", "4bf92f3577b34da6a3ce929d0e0e4736"),
        (  # AWS's trace header fits: ';' and '=' are allowed
            "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1",
            "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1",
        ),
        (b"x" * 128, "x" * 128),
        (b"x" * 129, None),
        (b"", None),
        (None, None),
        (b"has space", None),
        (b'quote"', None),
        ("line\nbreak", None),
        ("ünïcode", None),
        (b"\xff\xfe", None),
    ],
)
def test_a_client_id_is_taken_only_if_short_and_plain(
    sent: bytes | str | None, taken: str | None
) -> None:
    assert client_id(sent) == taken


def test_an_oip_id_is_adopted_only_when_the_client_named_none() -> None:
    access = Access("made-1", False, 0)
    token = current_request.set(access)
    try:
        adopt("bad id")
        assert access.id == "made-1"
        adopt("oip-1")
        assert access.id == "oip-1"
        adopt("oip-2")  # the first the client gave stays
        assert access.id == "oip-1"
        assert with_request_id((("a", "1"), ("x-request-id", "old"))) == (
            ("a", "1"),
            ("x-request-id", "oip-1"),
        )
    finally:
        current_request.reset(token)


def test_printable_paths_cannot_forge_lines_or_end_a_field() -> None:
    assert printable("/v2/models/m/infer") == "/v2/models/m/infer"
    escaped = printable('/a"b\nc\\d\x1b')
    assert "\n" not in escaped and '"' not in escaped.replace('\\"', "")
    assert len(printable("/" + "x" * 10_000)) <= 513


# -- the access line ---------------------------------------------------------------------------


def test_an_access_line_is_one_record_of_podium_access() -> None:
    handler_records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, made: logging.LogRecord) -> None:
            handler_records.append(made)

    log = AccessLog(logger="podium.access.test")
    log.logger.addHandler(Keep())
    log.logger.setLevel(logging.INFO)
    access = Access("r-9", True, time.perf_counter_ns())
    access.protocol, access.route, access.method, access.path = (
        "oip_rest",
        "modelInfer",
        "POST",
        "/p",
    )
    access.status, access.bytes_in, access.bytes_out, access.peer = 200, 3, 4, "127.0.0.1:1"
    access.model = "m"
    access.ended()
    log.write(access)
    (made,) = handler_records
    assert made.getMessage().startswith('127.0.0.1:1 oip_rest modelInfer "POST /p" 200 ')
    assert made.getMessage().endswith("ms in=3 out=4 model=m version=-")
    assert json.loads(JsonFormatter().format(made))["bytes_out"] == 4
    assert TextFormatter().format(made).split(" ", 5)[4] == "[r-9]:"
    log.enabled = False
    log.write(access)
    assert len(handler_records) == 1


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_an_access_line_written_directly_is_the_line_its_record_makes(fmt: str) -> None:
    # as podium serve configures logging, the line goes straight to the writer (no record);
    # logging set up any other way, through a record: the same line either way
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    stream = io.StringIO()
    try:
        root.handlers.clear()
        writer = configure("INFO", fmt, stream=stream)
        assert configured() is writer
        log = AccessLog()
        access = Access("r-7", True, time.perf_counter_ns())
        access.protocol, access.method, access.path, access.status = "truss", "POST", "/p", 200
        access.ended()
        log.write(access)  # handed to the log's thread
        log.flush()  # (which has written it now)
        direct = stream.getvalue()
        kept: list[logging.LogRecord] = []

        class Keep(logging.Handler):
            def emit(self, made: logging.LogRecord) -> None:
                kept.append(made)

        keep = Keep()
        root.addHandler(keep)  # logging is no longer only Podium's: the next log makes records
        try:
            assert configured() is None
            AccessLog().write(access)
        finally:
            root.removeHandler(keep)
        via_record = stream.getvalue()[len(direct) :]
        assert len(kept) == 1 and kept[0].name == "podium.access"
        if fmt == "json":
            one, two = json.loads(direct), json.loads(via_record)
            assert one.pop("ts")[:16] == two.pop("ts")[:16]
            assert one == two
            assert one["request_id"] == "r-7" and one["logger"] == "podium.access"
        else:
            assert direct[24:] == via_record[24:]  # after the time stamp
            assert direct[24:].startswith('INFO podium.access [r-7]: - truss - "POST /p" 200 ')
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)
    assert configured() is None  # (its writer is no longer the root's)


def test_access_lines_of_one_turn_are_made_and_written_together_at_its_end() -> None:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    stream = Writes()
    try:
        root.handlers.clear()
        writer = configure("INFO", "text", stream=stream)
        log = AccessLog()
        described: list[str] = []

        def access(n: int) -> Access:
            made = Access(f"r-{n}", True, time.perf_counter_ns())
            made.status = 200
            made.describe = lambda a: (described.append(a.id), setattr(a, "path", f"/p{n}"))
            made.ended()
            return made

        async def main() -> None:
            for n in range(3):
                log.write(access(n))
            assert stream.writes == [] and described == []  # nothing made yet
            await asyncio.sleep(0)  # the turn ends: handed to the log's thread
            log.flush()  # (which makes and writes them; this waits for it)
            assert described == ["r-0", "r-1", "r-2"]
            assert len(stream.writes) == 1 and stream.writes[0].count("\n") == 3
            assert "/p2" in stream.writes[0]
            log.write(access(3))  # held when the process exits: logging.shutdown flushes
            writer.flush()
            assert "[r-3]" in stream.getvalue()

        asyncio.run(main())
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)


def test_route_names_come_from_the_same_table() -> None:
    names = INFERENCE_ROUTES.names()
    route, _ = names.match("POST", "/v2/models/m/versions/2/infer")
    assert (route.name, route.protocol.value) == ("modelVersionInfer", "oip_rest")
    route, _ = names.match("HEAD", "/v2/health/live")
    assert route.name == "serverLive"
    assert names.match("GET", "/nowhere") is None


def test_an_access_line_describes_its_request_with_a_bounded_memory_of_paths() -> None:
    middleware = AccessMiddleware(
        None,  # type: ignore[arg-type]
        log=AccessLog(),
        ids=RequestIds(),
        routes=INFERENCE_ROUTES,
    )

    def described(method: str, path: str) -> Access:
        access = Access("r", True, time.perf_counter_ns())
        access.context = {"method": method, "path": path, "client": ("10.0.0.1", 5)}
        middleware._describe(access)
        return access

    for _ in range(2):  # looked up, then remembered: the same line
        line = described("POST", "/v1/models/m:predict")
        assert (line.route, line.protocol, line.path) == (
            "trussPredict",
            "truss",
            "/v1/models/m:predict",
        )
        assert line.peer == "10.0.0.1:5" and line.method == "POST"
    assert described("GET", "/v1/models/m:predict").route is None  # (another method: 405)
    assert described("POST", '/x"y').path == '/x\\"y'  # printable, remembered or not
    for n in range(KNOWN + 10):  # clients' paths never grow the memory past KNOWN
        described("GET", f"/nowhere/{n}")
        assert len(middleware._known) <= KNOWN
    long_path = "/" + "a" * MAX_PATH
    assert described("GET", long_path).path.endswith("…")
    assert ("GET", long_path) not in middleware._known  # long paths are not remembered
    line = described("POST", "/v2/models/m/infer")  # looked up again after forgetting
    assert line.route == "modelInfer"


class Writes(io.StringIO):
    """A stream that keeps each ``write`` apart."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return super().write(text)


def writer() -> tuple[LineWriter, Writes]:
    stream = Writes()
    handler = LineWriter(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    return handler, stream


def emit(handler: logging.Handler, message: str, level: int = logging.INFO) -> None:
    handler.handle(logging.LogRecord("t", level, __file__, 0, message, (), None))


def test_line_writer_writes_each_record_at_once_and_lines_made_ahead_in_one_write() -> None:
    handler, stream = writer()

    async def main() -> None:
        emit(handler, "on the loop")
        assert stream.writes == ["on the loop\n"]  # not held to the end of the turn
        emit(handler, "warn", logging.WARNING)
        await asyncio.to_thread(handler.write_now, "a\nb\n")  # the access log's thread

    asyncio.run(main())
    assert stream.writes == ["on the loop\n", "warn\n", "a\nb\n"]


def test_configure_logs_through_a_line_writer() -> None:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        root.handlers.clear()
        handler = configure("INFO", "text", stream=io.StringIO())
        assert isinstance(handler, LineWriter)
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)


def test_json_lines_made_on_a_gpu_name_it_and_text_lines_stay_as_they_were() -> None:
    with using("cuda:2"):
        on_gpu = record("on %s", "gpu")
    with using("cpu"):
        on_cpu = record("on cpu")
    assert json.loads(JsonFormatter().format(on_gpu))["device"] == "cuda:2"
    assert "device" not in json.loads(JsonFormatter().format(on_cpu))
    assert "device" not in json.loads(JsonFormatter().format(record("outside")))
    # a worker process's lines name it once for all; its static key is not replaced
    static = JsonFormatter({"worker": "1", "device": "cuda:1"})
    assert json.loads(static.format(on_gpu))["device"] == "cuda:1"
    assert TextFormatter().format(on_gpu).endswith("podium.test: on gpu")
