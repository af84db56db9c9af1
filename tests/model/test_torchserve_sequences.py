"""TorchServe handlers of stateful sequences: podium.model.torchserve with current_context set,
and model-config.yaml's sequence keys (podium.model.torchserve._config)."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from ts_kit import FakeRequest, load

from podium.errors import DefinitionError
from podium.model.torchserve import archive_model
from podium.model.torchserve._config import model_config
from podium.types import Context, Reply, current_context

# TorchServe's stateful example, reduced: a running sum per sequence in the handler's own cache
STATEFUL = """
from ts.context import Context


class StatefulHandler:
    def initialize(self, context):
        self.context = context
        self.sums = {}  # TorchServe's example keeps an LRU: the sequence stays on this worker

    def handle(self, data, context):
        out = []
        for idx, row in enumerate(data):
            seq = context.get_sequence_id(idx)
            start = context.get_request_header(idx, context.header_key_sequence_start)
            value = int(row["body"])
            total = (0 if start else self.sums.get(seq, 0)) + value
            self.sums[seq] = total
            context.cache[seq] = total
            context.set_response_header(idx, context.header_key_sequence_id, seq)
            if value == 0:
                context.set_response_header(idx, context.header_key_sequence_end, seq)
            out.append({"seq": seq, "start": start, "total": total})
        return out
"""

SEQUENCE_CONFIG = """
sequenceBatching: true
sequenceMaxIdleMSec: 500
"""


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    pool = ThreadPoolExecutor(2)
    yield pool
    pool.shutdown(wait=True)


def handler_model(tmp_path: Path, source: str, config: str) -> Path:
    src = tmp_path / "src"
    src.mkdir(parents=True, exist_ok=True)
    (src / "handler.py").write_text(textwrap.dedent(source), encoding="utf-8")
    (src / "model-config.yaml").write_text(textwrap.dedent(config), encoding="utf-8")
    return archive_model(
        model_name="stateful",
        handler=src / "handler.py",
        export_path=tmp_path / "store",
        config_file=src / "model-config.yaml",
        archive_format="no-archive",
        force=True,
    )


def ctx(sequence_id: str, first: bool = False) -> Context:
    return Context(sequence_id, first=first, state={})


async def call(inst: Any, value: Any, context: Any, request: Any = None) -> Any:
    token = current_context.set(context)
    try:
        return await inst.predict(value, request if request is not None else FakeRequest())
    finally:
        current_context.reset(token)


def body(reply: Any) -> Any:
    assert isinstance(reply, Reply)  # the handler set headers
    return reply.body


# -- the handler's Context in a sequence ---------------------------------------------------


@pytest.mark.anyio
async def test_get_sequence_id_and_start_header_come_from_the_podium_context(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    inst = await load(handler_model(tmp_path, STATEFUL, SEQUENCE_CONFIG), executor)
    a, b = ctx("server-made-1", first=True), ctx("client-b", first=True)
    first = await call(inst, b"5", a)
    assert body(first) == {"seq": "server-made-1", "start": "true", "total": 5}
    assert first.headers["ts_request_sequence_id"] == "server-made-1"
    assert body(await call(inst, b"7", b)) == {"seq": "client-b", "start": "true", "total": 7}
    a.first = False
    assert body(await call(inst, b"2", a))["total"] == 7  # the handler's own state per sequence
    assert inst.context.cache == {"server-made-1": 7, "client-b": 7}
    assert not a.ended and not b.ended


@pytest.mark.anyio
async def test_the_handler_ending_the_sequence_ends_the_podium_context(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    inst = await load(handler_model(tmp_path, STATEFUL, SEQUENCE_CONFIG), executor)
    c = ctx("s", first=True)
    await call(inst, b"3", c)
    assert not c.ended
    reply = await call(inst, b"0", ctx("s"))
    assert reply.headers["ts_request_sequence_end"] == "s"  # sent to the client, as TorchServe
    other = ctx("s")
    await call(inst, b"0", other)
    assert other.ended
    assert c.headers == {}  # the handler's headers travel in the Reply, not twice


@pytest.mark.anyio
async def test_a_batch_of_sequences_gets_one_id_per_request(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    config = SEQUENCE_CONFIG + "batchSize: 4\nmaxBatchDelay: 5\n"
    inst = await load(handler_model(tmp_path, STATEFUL, config), executor)
    contexts = [ctx("x", first=True), ctx("y", first=True), ctx("z")]
    replies = await call(inst, [b"1", b"0", b"4"], contexts, [FakeRequest()] * 3)
    assert [body(r)["seq"] for r in replies] == ["x", "y", "z"]
    assert [body(r)["start"] for r in replies] == ["true", "true", None]
    assert [c.ended for c in contexts] == [False, True, False]


@pytest.mark.anyio
async def test_the_request_headers_carry_the_sequence_id(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    source = """
    def handle(data, context):
        if data is None:
            return None
        return [dict(context.get_all_request_header(0))]
    """
    inst = await load(handler_model(tmp_path, source, SEQUENCE_CONFIG), executor)
    out = await call(inst, b"1", ctx("h1"), FakeRequest({"x-client": "c"}))
    assert out["ts_request_sequence_id"] == "h1" and out["x-client"] == "c"
    assert "ts_request_sequence_start" not in out


@pytest.mark.anyio
async def test_a_streaming_handler_ends_its_sequence(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    source = """
    from ts.protocol.otf_message_handler import send_intermediate_predict_response

    def handle(data, context):
        if data is None:
            return None
        seq = context.get_sequence_id(0)
        send_intermediate_predict_response([seq], context.request_ids, "", 200, context)
        context.set_response_header(0, context.header_key_sequence_end, seq)
        return ["done"]
    """
    inst = await load(handler_model(tmp_path, source, SEQUENCE_CONFIG), executor)
    assert inst.capabilities.streaming
    c = ctx("st", first=True)
    token = current_context.set(c)
    stream = inst.predict_stream(b"", FakeRequest())
    current_context.reset(token)  # read when the stream was made, not when it runs
    items = [item async for item in stream]
    assert [i.body if isinstance(i, Reply) else i for i in items] == ["st", "done"]
    assert c.ended


@pytest.mark.anyio
async def test_without_a_sequence_nothing_changes(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    inst = await load(handler_model(tmp_path, STATEFUL, "batchSize: 1\n"), executor)
    reply = await inst.predict(b"4", FakeRequest({"ts_request_sequence_id": "from-client"}))
    assert body(reply)["seq"] == "from-client"  # the header as sent, as before


# -- model-config.yaml ---------------------------------------------------------------------


def config(data: dict[str, Any]) -> Any:
    return model_config(data, name="m", version=None, where="model-config.yaml")


def test_sequence_keys_map_onto_podium_keys() -> None:
    cfg = config(
        {
            "sequenceBatching": True,
            "sequenceMaxIdleMSec": 10,
            "sequenceTimeoutMSec": 2000,
            "maxSequenceJobQueueSize": 10,
            "maxNumSequence": 4,
        }
    )
    assert cfg.sequence_batching is True
    assert (cfg.sequence_max_idle_ms, cfg.sequence_timeout_ms) == (10.0, 2000.0)
    assert (cfg.max_sequence_queue_size, cfg.max_num_sequences) == (10, 4)
    assert config({}).sequence_batching is False


def test_bad_sequence_values_name_the_key() -> None:
    with pytest.raises(DefinitionError) as info:
        config({"sequenceBatching": "yes", "sequenceMaxIdleMSec": "x", "maxNumSequence": -1})
    text = " ".join(info.value.problems)
    assert "'sequenceBatching' must be true or false" in text
    assert "'sequenceMaxIdleMSec' must be a number" in text
    assert "'maxNumSequence' must be an integer >= 0" in text
    with pytest.raises(DefinitionError, match="'max_sequence_queue_size' must be an integer >= 1"):
        config({"maxSequenceJobQueueSize": 0})


def test_sequence_keys_repeated_in_the_podium_section_are_errors() -> None:
    with pytest.raises(DefinitionError, match="repeats 'sequenceBatching'"):
        config({"sequenceBatching": True, "podium": {"sequence_batching": True}})


def test_job_ticket_keys_are_still_refused() -> None:
    for key in ("useJobTicket", "asyncCommunication"):
        with pytest.raises(DefinitionError) as info:
            config({key: True})
        (problem,) = info.value.problems
        assert f"'{key}' is not supported yet" in problem and "continuous batching" in problem


def test_sequence_settings_without_sequence_batching_are_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level("WARNING", logger="podium.model"):
        config({"sequenceMaxIdleMSec": 100})
    assert "sequenceMaxIdleMSec has no effect without 'sequenceBatching: true'" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="podium.model"):
        config({"sequenceMaxIdleMSec": 100, "podium": {"sequence_batching": True}})
    assert caplog.text == ""


ENDS = """
class Handler:
    def initialize(self, context):
        pass

    def handle(self, data, context):
        return [context.get_request_header(i, context.header_key_sequence_end) for i in range(len(data))]
"""


@pytest.mark.anyio
async def test_the_clients_end_reaches_the_handler_as_the_end_request_header(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    """Whatever protocol said it (an OIP parameter, a gRPC input entry), the handler reads the
    client's end as TorchServe's backend gives it: the request header ts_request_sequence_end."""
    inst = await load(handler_model(tmp_path, ENDS, SEQUENCE_CONFIG), executor)
    assert await call(inst, b"1", Context("s", first=True, state={})) is None
    assert await call(inst, b"1", Context("s", first=False, state={}, last=True)) == "true"
