"""TorchServe handlers behind podium.types.ModelInstance: podium.model.torchserve."""

from __future__ import annotations

import asyncio
import importlib.machinery
import importlib.util
import json
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from ts_kit import FakeRequest, archive, load

from podium.errors import BadModelOutput, Cancelled, DefinitionError, ModelError
from podium.model.discovery import discover
from podium.runtime.loading import build_version, prepare
from podium.types import InferenceResponse, InputKind, Reply, WireInput, WireProtocol


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    pool = ThreadPoolExecutor(4)
    yield pool
    pool.shutdown(wait=True)


def handler_model(tmp_path: Path, source: str, config: str | None = None, name: str = "m") -> Path:
    """A no-archive TorchServe model directory from handler source text."""
    from podium.model.torchserve import archive_model

    src = tmp_path / "src"
    src.mkdir(parents=True, exist_ok=True)
    handler = src / "handler.py"
    handler.write_text(textwrap.dedent(source), encoding="utf-8")
    config_file = None
    if config is not None:
        config_file = src / "model-config.yaml"
        config_file.write_text(textwrap.dedent(config), encoding="utf-8")
    return archive_model(
        model_name=name,
        handler=handler,
        export_path=tmp_path / "store",
        config_file=config_file,
        archive_format="no-archive",
        force=True,
    )


# -- module style, class style, default handle -----------------------------------------------


@pytest.mark.anyio
async def test_module_style_is_initialised_with_handle_none(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    inst = await load(archive("module-style", tmp_path), executor)
    assert inst.capabilities.input_kind is InputKind.WIRE
    assert (
        inst.capabilities.needs_request
        and inst.capabilities.needs_inputs
        and not inst.capabilities.streaming
    )
    out = json.loads(await inst.predict({"a": 1}, FakeRequest()))
    assert out == {"type": "dict", "body": {"a": 1}, "keys": ["body"], "initialized": 1}


@pytest.mark.anyio
async def test_binary_body_is_a_bytearray_text_is_a_str(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    inst = await load(archive("module-style", tmp_path), executor)
    binary = json.loads(await inst.predict(b"\x00raw", FakeRequest()))
    assert binary["type"] == "bytearray" and binary["body"] == "\x00raw"
    text = json.loads(await inst.predict(b"hi", FakeRequest({"content-type": "text/plain"})))
    assert text["type"] == "str" and text["body"] == "hi"


@pytest.mark.anyio
async def test_form_fields_are_parameters_and_the_query_is_not(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    inst = await load(archive("module-style", tmp_path), executor)
    # TorchServe 0.12's /predictions passes no query parameters to the handler (issue 12)
    out = json.loads(await inst.predict(b"x", FakeRequest(query=b"top_k=3")))
    assert out["keys"] == ["body"]
    boundary = "XyZ"
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="data"; filename="a.bin"\r\n'
        f"Content-Type: application/octet-stream\r\n\r\nfile-bytes\r\n"
        f'--{boundary}\r\nContent-Disposition: form-data; name="note"\r\n\r\nhello\r\n'
        f"--{boundary}--\r\n"
    ).encode()
    ct = {"content-type": f"multipart/form-data; boundary={boundary}"}
    out = json.loads(await inst.predict(body, FakeRequest(ct)))
    assert out["keys"] == ["data", "note"]
    assert out["type"] == "bytearray" and out["body"] == "file-bytes"


@pytest.mark.anyio
async def test_oip_calls_get_the_v2_request_json_as_body(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    inst = await load(archive("module-style", tmp_path), executor)
    request = {"inputs": [{"name": "x", "shape": [1], "datatype": "INT64", "data": [1]}]}
    oip = WireInput(WireProtocol.OIP_REST, request)
    out = json.loads(await inst.predict(oip, FakeRequest(path="/v2/models/m/infer")))
    assert out["body"] == request and out["keys"] == ["body"]


@pytest.mark.anyio
async def test_oip_v2_response_dicts_become_inference_responses(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    model = handler_model(
        tmp_path,
        """
        def handle(data, context):
            if data is None:
                return None
            context.set_response_header(0, "x-ignored", "on OIP")
            return [{"outputs": [{"name": "y", "shape": [1], "datatype": "FP64", "data": [2.0]}]}]
        """,
    )
    inst = await load(model, executor)
    oip = WireInput(WireProtocol.OIP_REST, {"inputs": []})
    out = await inst.predict(oip, FakeRequest(path="/v2/models/m/infer"))
    assert isinstance(out, InferenceResponse) and out.outputs[0].name == "y"
    # the same value on the TorchServe route stays the handler's dict, with its headers
    ts = await inst.predict({"inputs": []}, FakeRequest())
    assert isinstance(ts, Reply) and ts.body["outputs"][0]["name"] == "y"


@pytest.mark.anyio
async def test_class_style_context_and_headers_in_and_out(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    inst = await load(archive("class-style", tmp_path), executor)
    reply = await inst.predict({"q": 1}, FakeRequest({"X-Custom": "abc", "x-want-status": "202"}))
    assert isinstance(reply, Reply)
    assert reply.status == 202 and reply.content_type is None
    assert reply.headers["X-Handled-By"] == "class-style"
    assert len(reply.headers["X-Request-Id"]) == 36  # a UUID, as TorchServe's
    body = reply.body
    assert body["greeting"] == "hello"  # model_yaml_config: the whole file, handler: included
    assert body["header"] == "abc" and body["all_headers_has_custom"]
    assert body["model_name"] == "class-style" and body["manifest_handler"] == "handler.py"
    assert body["batch_size"] == 1 and body["gpu_id"] is None and body["server_name"] == "Podium"
    assert inst.capabilities.device == "cpu"  # no GPU given: management describes "cpu"
    assert body["same_context"] and body["sequence_id"] is None
    text = await inst.predict(b"ann", FakeRequest({"x-want-text": "1"}))
    assert text.content_type == "text/x-greeting" and text.body == "hello ann"


@pytest.mark.anyio
async def test_a_handler_that_sets_nothing_returns_plain_values(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    inst = await load(archive("raiser", tmp_path), executor)
    assert await inst.predict("ok", FakeRequest()) == "fine"


@pytest.mark.anyio
async def test_default_handle_runs_preprocess_inference_postprocess(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    inst = await load(archive("steps", tmp_path), executor)
    assert await inst.predict({"x": 4}, FakeRequest()) == {"y": 8.0, "metrics": True}


@pytest.mark.anyio
async def test_request_is_optional(tmp_path: Path, executor: ThreadPoolExecutor) -> None:
    inst = await load(archive("module-style", tmp_path), executor)
    out = json.loads(await inst.predict(b"abc", None))
    assert out["body"] == "abc" and out["type"] == "bytearray"


@pytest.mark.anyio
async def test_grpc_input_map_keeps_its_names(tmp_path: Path, executor: ThreadPoolExecutor) -> None:
    inst = await load(archive("module-style", tmp_path), executor)
    path = "/org.pytorch.serve.grpc.inference.InferenceAPIsService/Predictions"
    grpc = WireInput(WireProtocol.TORCHSERVE_GRPC, b"abc")
    out = json.loads(await inst.predict(grpc, FakeRequest(path=path)))
    assert out["keys"] == ["data"] and out["body"] == "abc"


# -- batching ------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_batch_is_one_handle_call_with_one_result_per_request(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    (source,) = discover(archive("batcher", tmp_path))
    assert source.config.batch_size == 4 and source.config.max_batch_delay_ms == 5000
    mv = build_version(source, secrets={}, executor=executor)
    await mv.load()
    try:
        requests = [FakeRequest({"x-item": str(i)}) for i in range(4)]
        results = await asyncio.gather(
            *(mv.scheduler.infer({"tag": "t", "x": i}, r) for i, r in enumerate(requests))
        )
        assert [r["y"] for r in results] == [0, 10, 20, 30]
        assert {r["batch"] for r in results} == {4}
        assert [r["header"] for r in results] == ["0", "1", "2", "3"]
    finally:
        await mv.scheduler.close()


@pytest.mark.anyio
async def test_a_wrong_number_of_results_names_the_handler(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    inst = await load(archive("batcher", tmp_path), executor)
    with pytest.raises(
        BadModelOutput, match="handler 'handler.py' returned 1 results for a batch of 2"
    ):
        await inst.predict(
            [{"tag": "t", "x": 1, "wrong": True}, {"tag": "t", "x": 2}],
            [FakeRequest(), FakeRequest()],
        )


# -- errors --------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_errors_name_the_handler(tmp_path: Path, executor: ThreadPoolExecutor) -> None:
    inst = await load(archive("raiser", tmp_path), executor)
    with pytest.raises(ModelError, match="handler 'handler.py' raised ValueError: the handler"):
        await inst.predict("raise", FakeRequest())
    with pytest.raises(
        BadModelOutput,
        match="handler 'handler.py' must return a list for a batch of 1 requests, got dict",
    ):
        await inst.predict("dict", FakeRequest())


@pytest.mark.anyio
async def test_prediction_exception_answers_with_its_status(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    inst = await load(archive("raiser", tmp_path), executor)
    reply = await inst.predict("refuse", FakeRequest())
    assert isinstance(reply, Reply) and reply.status == 429
    assert reply.body["message"] == "not today"
    with pytest.raises(ModelError, match="not today"):  # OIP has no room for it
        oip = WireInput(WireProtocol.OIP_REST, {"do": "refuse"})
        await inst.predict(oip, FakeRequest(path="/v2/models/m/infer"))


def test_definition_errors(tmp_path: Path) -> None:
    cases = {
        "async def handle(data, context):\n    return data\n": "is async",
        "def handle(data):\n    return data\n": "must take two arguments",
        "class A:\n    pass\nclass B:\n    pass\n": r"exactly one class \(found: A, B\)",
        "class A:\n    def other(self):\n        pass\n": r"has no handle\(data, context\) method",
        "import not_a_module_anywhere\n": "ModuleNotFoundError",
    }
    for i, (source, message) in enumerate(cases.items()):
        (src,) = discover(handler_model(tmp_path / str(i), source))
        with pytest.raises(DefinitionError, match=message):
            prepare(src)


def _naming_handler(tmp_path: Path, handler: str) -> Path:
    model = handler_model(tmp_path, "x = 1\n")
    manifest = model / "MAR-INF" / "MANIFEST.json"
    data = json.loads(manifest.read_text())
    data["model"]["handler"] = handler
    manifest.write_text(json.dumps(data))
    return model


def test_builtin_handler_without_torch_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # as if torch were not installed
    for name in list(sys.modules):
        if name.startswith(("ts.torch_handler.", "podium.compat.ts.torch_handler.")):
            monkeypatch.delitem(sys.modules, name)
    (src,) = discover(_naming_handler(tmp_path, "image_classifier"))
    with pytest.raises(DefinitionError, match=r"need torch .*podium\[torchserve-handlers\]"):
        prepare(src)


def test_a_builtin_handler_podium_does_not_provide_is_a_clear_error(tmp_path: Path) -> None:
    if importlib.machinery.PathFinder.find_spec("ts") is not None:
        pytest.skip("the real torchserve package is installed")
    (src,) = discover(_naming_handler(tmp_path, "dali_image_classifier"))
    with pytest.raises(
        DefinitionError, match="'dali_image_classifier', which needs the torchserve"
    ):
        prepare(src)


@pytest.mark.anyio
async def test_initialize_failure_is_a_model_error(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    model = handler_model(
        tmp_path,
        """
        class H:
            def initialize(self, context):
                raise OSError("weights missing")
            def handle(self, data, context):
                return data
        """,
    )
    with pytest.raises(ModelError, match="initialize raised OSError: weights missing"):
        await load(model, executor)


@pytest.mark.anyio
async def test_handler_imports_its_sibling_files(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    from podium.model.torchserve import archive_model

    src = tmp_path / "src"
    src.mkdir()
    (src / "helper_for_ts_test.py").write_text("VALUE = 41\n")
    (src / "handler.py").write_text(
        "import helper_for_ts_test\n"
        "def handle(data, context):\n"
        "    return None if data is None else [helper_for_ts_test.VALUE + 1]\n"
    )
    model = archive_model(
        model_name="sib",
        handler=src / "handler.py",
        extra_files=[src / "helper_for_ts_test.py"],
        export_path=tmp_path / "store",
        archive_format="default",
    )
    inst = await load(model, executor)
    assert await inst.predict(b"", FakeRequest()) == 42
    sys.modules.pop("helper_for_ts_test", None)


@pytest.mark.anyio
async def test_two_handlers_import_their_own_sibling_of_the_same_name(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    from podium.model.torchserve import archive_model

    loaded = []
    for value in (1, 2):
        src = tmp_path / f"src{value}"
        src.mkdir()
        (src / "same_name_ts_helper.py").write_text(f"VALUE = {value}\n")
        (src / "handler.py").write_text(
            "import same_name_ts_helper\n"
            "def handle(data, context):\n"
            "    return None if data is None else [same_name_ts_helper.VALUE]\n"
        )
        model = archive_model(
            model_name=f"m{value}",
            handler=src / "handler.py",
            extra_files=[src / "same_name_ts_helper.py"],
            export_path=tmp_path / "store",
            archive_format="no-archive",
        )
        loaded.append(await load(model, executor))
    assert [await inst.predict(b"", FakeRequest()) for inst in loaded] == [1, 2]
    sys.modules.pop("same_name_ts_helper", None)


# -- streaming -----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_streaming_handler_streams_each_intermediate_response(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    inst = await load(archive("streamer", tmp_path), executor)
    assert inst.capabilities.streaming
    for newer in (False, True):
        items = [
            item
            async for item in inst.predict_stream(
                {"text": "one two three", "newer": newer}, FakeRequest()
            )
        ]
        assert [i.body for i in items] == ["one ", "two ", "three"]
        assert items[0].headers == {"X-Streamed": "yes"}  # ts_stream_next is not sent


@pytest.mark.anyio
async def test_streaming_error_after_items_ends_the_stream_with_it(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    inst = await load(archive("streamer", tmp_path), executor)
    got: list[Any] = []
    with pytest.raises(ModelError, match="failed after b"):
        async for item in inst.predict_stream({"text": "a b c", "fail_after": "b"}, None):
            got.append(item)
    assert [i.body for i in got] == ["a "]


@pytest.mark.anyio
async def test_a_streaming_handle_runs_on_the_handlers_own_thread(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    """As TorchServe's backend worker, one thread runs every handle() call of the instance
    (at predict_concurrency 1), streamed or not: never the shared pool's."""
    model = handler_model(
        tmp_path,
        """
        import threading
        from ts.protocol.otf_message_handler import send_intermediate_predict_response
        def handle(data, context):
            if data is None:
                return None
            me = threading.get_ident()
            if data[0].get("body") == b"stream":
                send_intermediate_predict_response([me], context.request_ids, "", 200, context)
            return [me]
        """,
    )
    inst = await load(model, executor)
    plain = await inst.predict(b"once", None)
    streamed = [item async for item in inst.predict_stream(b"stream", None)]
    pool = executor.submit(threading.get_ident).result()
    assert streamed == [plain, plain] and plain != pool


@pytest.mark.anyio
async def test_closing_a_stream_stops_the_handler_at_its_next_send(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    model = handler_model(
        tmp_path,
        """
        from ts.protocol.otf_message_handler import send_intermediate_predict_response
        SEEN = []
        def handle(data, context):
            if data is None:
                return None
            try:
                for i in range(1000):
                    send_intermediate_predict_response([i], context.request_ids, "", 200, context)
                    SEEN.append(i)
            except Exception as exc:
                SEEN.append(type(exc).__name__)
                raise
            return [-1]
        """,
        config="podium:\n  stream_buffer: 2\n",
    )
    inst = await load(model, executor)
    stream = inst.predict_stream(b"", None)
    assert await stream.__anext__() == 0
    await stream.aclose()  # returns once the handler has stopped
    module = next(
        m
        for n, m in sys.modules.items()
        if n.startswith("podium_ts_handler_")
        and hasattr(m, "SEEN")
        and str(model) in str(m.__file__)
    )
    assert module.SEEN[-1] == Cancelled.__name__
    assert len(module.SEEN) < 10  # bounded by the buffer, not the 1000 items


@pytest.mark.anyio
async def test_intermediate_responses_are_gathered_when_batched(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    model = handler_model(
        tmp_path,
        """
        from ts.protocol.otf_message_handler import send_intermediate_predict_response
        def handle(data, context):
            if data is None:
                return None
            send_intermediate_predict_response(["a"] * len(data), context.request_ids, "", 200, context)
            return ["b"] * len(data)
        """,
        config="batchSize: 2\nmaxBatchDelay: 1\n",
    )
    inst = await load(model, executor)
    assert not inst.capabilities.streaming
    assert await inst.predict([b"", b""], [None, None]) == ["ab", "ab"]


def test_real_ts_package_is_left_alone(tmp_path: Path) -> None:
    """With the real ``ts`` installed, handlers import it, and Podium's Context satisfies them
    (including the real send_intermediate_predict_response, which writes to cl_socket)."""
    fake = tmp_path / "site" / "ts"
    (fake / "protocol").mkdir(parents=True)
    (fake / "__init__.py").write_text("REAL = True\n")
    (fake / "context.py").write_text("class Context:\n    pass\n")
    (fake / "protocol" / "__init__.py").write_text("")
    (fake / "protocol" / "otf_message_handler.py").write_text(
        textwrap.dedent(
            """
            import struct
            def send_intermediate_predict_response(ret, req_id_map, message, code, context):
                msg = bytearray(struct.pack("!i", code))
                msg += struct.pack("!i", len(message)) + message.encode()
                for idx, req_id in req_id_map.items():
                    context.set_response_header(idx, "ts_stream_next", "true")
                    msg += struct.pack("!i", len(req_id)) + req_id.encode()
                    msg += struct.pack("!i", 0) + struct.pack("!i", 200) + struct.pack("!i", 0)
                    headers = context.get_response_headers(idx)
                    msg += struct.pack("!i", len(headers))
                    for k, v in headers.items():
                        msg += struct.pack("!i", len(k)) + k.encode()
                        msg += struct.pack("!i", len(v)) + v.encode()
                    body = ret[idx].encode()
                    msg += struct.pack("!i", len(body)) + body
                msg += struct.pack("!i", -1)
                context.cl_socket.sendall(msg)
            """
        )
    )
    model = handler_model(
        tmp_path,
        """
        import ts
        from ts.context import Context
        from ts.protocol.otf_message_handler import send_intermediate_predict_response
        def handle(data, context):
            if data is None:
                return None
            assert ts.REAL and not isinstance(context, Context)
            send_intermediate_predict_response(["part "], context.request_ids, "ok", 200, context)
            return ["last"]
        """,
    )
    script = textwrap.dedent(
        f"""
        import asyncio, sys
        from concurrent.futures import ThreadPoolExecutor
        sys.path.insert(0, {str(fake.parent)!r})
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        sys.path.insert(0, {str(Path(__file__).parent.parent)!r})
        from ts_kit import load
        async def main():
            inst = await load(__import__("pathlib").Path({str(model)!r}), ThreadPoolExecutor(2))
            items = [i async for i in inst.predict_stream(b"", None)]
            import podium.compat.ts
            assert sys.modules["ts"] is not podium.compat.ts
            print(items)
        asyncio.run(main())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[b'part ', 'last']"


@pytest.mark.anyio
async def test_handle_runs_on_one_thread_of_its_own_at_predict_concurrency_1(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    # as in TorchServe's one-threaded backend worker (thread-local state, torch's included,
    # stays put), and requests are taken ahead of it: the worker times them from their start
    path = handler_model(
        tmp_path,
        """
        import threading

        def handle(data, context):
            if data is None:
                return None
            return [threading.get_ident() for _ in data]
        """,
    )
    (source,) = discover(path)
    mv = build_version(source, secrets={}, executor=executor)
    await mv.pool.start()  # type: ignore[union-attr]
    try:
        assert mv.scheduler.statistics()["slots"] > 1  # taken ahead of the one thread
        requests = [WireInput(WireProtocol.TORCHSERVE_REST, b"x") for _ in range(20)]
        idents = await asyncio.gather(*(mv.scheduler.infer(r, FakeRequest()) for r in requests))
        assert len(set(idents)) == 1
        assert idents[0] not in {t.ident for t in executor._threads}  # not the shared pool
    finally:
        await mv.scheduler.close()
