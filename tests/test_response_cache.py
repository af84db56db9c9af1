"""The response cache on its own (``runtime/_cache.py``) and in the data plane with fake models:
LRU by bytes and entries, TTL by an injected clock, an answer too large, what the key is made
of (each part changes it; the id and the encoding parameters do not), the ``response_cache``
setting, ``Cache-Control``, and where the data plane looks up, stores and forgets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from msgspec.structs import replace
from test_dataplane import FakeInstance, FakeScheduler, fake, oip_request, plane

from podium._mlserver_start import read_settings_json
from podium.config import ModelConfig, ResponseCacheSettings
from podium.errors import DefinitionError, PodiumError
from podium.model.mlserver import MLSERVER_CACHE_SIZE
from podium.model.mlserver._settings import read_settings
from podium.runtime import ResponseCache, answer_size, request_key
from podium.runtime._cache import ENTRY_OVERHEAD
from podium.server._access import cache_control
from podium.types import (
    CACHE_NO_READ,
    CACHE_NO_STORE,
    Call,
    InferenceRequest,
    InferenceResponse,
    RequestInfo,
    RequestInput,
    RequestOutput,
    ResponseOutput,
    WireProtocol,
    current_request,
)

pytestmark = pytest.mark.anyio


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def cache(**bounds: Any) -> ResponseCache:
    return ResponseCache(ResponseCacheSettings(**bounds))


def key(n: int) -> bytes:
    return n.to_bytes(16, "little")


# -- the store ----------------------------------------------------------------------------------


def test_lru_by_bytes_evicts_the_least_recently_used() -> None:
    c = cache(max_bytes=300)
    for n in range(3):
        assert c.put(key(n), f"r{n}", None, 100)
    assert c.get(key(0)) == ("r0", None)  # 0 is now the most recently used
    assert c.put(key(3), "r3", None, 100)  # 1 goes, not 0
    assert c.get(key(1)) is None
    assert [c.get(key(n)) is not None for n in (0, 2, 3)] == [True, True, True]
    assert (c.stats.entries, c.stats.bytes, c.stats.evictions) == (3, 300, 1)
    assert c.put(key(4), "big", None, 250)  # room for it: three go
    assert (c.stats.entries, c.stats.bytes, c.stats.evictions) == (1, 250, 4)


def test_an_answer_larger_than_the_cache_is_not_kept() -> None:
    c = cache(max_bytes=100)
    c.put(key(1), "small", None, 60)
    assert not c.put(key(2), "huge", None, 101)
    assert c.get(key(2)) is None and c.get(key(1)) == ("small", None)  # nothing evicted for it
    assert c.stats.evictions == 0


def test_the_same_key_again_replaces_its_entry() -> None:
    c = cache(max_bytes=1000)
    c.put(key(1), "a", None, 100)
    c.put(key(1), "b", {"h": "1"}, 300)
    assert c.get(key(1)) == ("b", {"h": "1"})
    assert (c.stats.entries, c.stats.bytes) == (1, 300)


def test_max_entries_bounds_the_count() -> None:
    c = cache(max_bytes=10**6, max_entries=2)
    for n in range(3):
        c.put(key(n), n, None, 10)
    assert c.get(key(0)) is None and c.stats.entries == 2 and c.stats.evictions == 1


def test_ttl_expires_entries_by_the_clock() -> None:
    clock = Clock()
    c = ResponseCache(ResponseCacheSettings(ttl_s=10.0), clock=clock)
    c.put(key(1), "a", None, 10)
    clock.now += 9.9
    assert c.get(key(1)) == ("a", None)
    clock.now += 0.1
    assert c.get(key(1)) is None
    assert (c.stats.expired, c.stats.entries, c.stats.bytes) == (1, 0, 0)


def test_no_ttl_keeps_entries_whatever_the_clock() -> None:
    clock = Clock()
    c = ResponseCache(ResponseCacheSettings(), clock=clock)
    c.put(key(1), "a", None, 10)
    clock.now += 1e9
    assert c.get(key(1)) == ("a", None)


def test_clear_forgets_and_refuses_what_an_older_lookup_computed() -> None:
    c = cache()
    seen = c.generation
    c.put(key(1), "a", None, 10)
    c.clear()
    assert c.get(key(1)) is None and (c.stats.entries, c.stats.bytes) == (0, 0)
    assert not c.put(key(2), "stale", None, 10, seen)  # computed before the clear
    assert c.put(key(2), "fresh", None, 10, c.generation)


def test_answer_size_counts_data_and_overhead() -> None:
    floats = InferenceResponse(
        outputs=[ResponseOutput(name="y", shape=[1000], datatype="FP32", data=[0.5] * 1000)]
    )
    size = answer_size(floats)
    assert size >= ENTRY_OVERHEAD + 1000 * (8 + 24)  # a pointer and a float object each
    array = np.zeros(10_000, dtype=np.float64)
    arrays = InferenceResponse(
        outputs=[ResponseOutput(name="y", shape=[10_000], datatype="FP64", data=array)]
    )
    assert answer_size(arrays) >= ENTRY_OVERHEAD + array.nbytes
    texts = [b"x" * 1000, b"y" * 2000]
    words = InferenceResponse(
        outputs=[ResponseOutput(name="w", shape=[2], datatype="BYTES", data=texts)]
    )
    assert answer_size(words) >= ENTRY_OVERHEAD + 3000


# -- the key ------------------------------------------------------------------------------------


def base(**extra: Any) -> InferenceRequest:
    inputs = [
        RequestInput(name="x", shape=[1, 2], datatype="FP32", data=[1.0, 2.0]),
        RequestInput(name="t", shape=[1], datatype="BYTES", data=["a"], parameters={"c": "str"}),
    ]
    return InferenceRequest(inputs=inputs, **extra)


def k(request: InferenceRequest, name: str = "m", version: str | None = "1") -> bytes:
    found = request_key(name, version, request)
    assert found is not None and len(found) == 16
    return found


def with_input(request: InferenceRequest, index: int, **changes: Any) -> InferenceRequest:
    inputs = list(request.inputs)
    inputs[index] = replace(inputs[index], **changes)
    return replace(request, inputs=inputs)


def test_every_part_of_the_key_changes_it() -> None:
    plain = base()
    variants = {
        "model": k(plain, name="other"),
        "version": k(plain, version="2"),
        "unversioned": k(plain, version=None),
        "data": k(with_input(plain, 0, data=[1.0, 3.0])),
        "shape": k(with_input(plain, 0, shape=[2, 1])),
        "datatype": k(with_input(plain, 0, datatype="FP64")),
        "input name": k(with_input(plain, 0, name="y")),
        "input parameters": k(with_input(plain, 1, parameters={"c": "bytes"})),
        "no input parameters": k(with_input(plain, 1, parameters=None)),
        "input order": k(replace(plain, inputs=plain.inputs[::-1])),
        "fewer inputs": k(replace(plain, inputs=plain.inputs[:1])),
        "outputs named": k(replace(plain, outputs=[RequestOutput(name="y")])),
        "other output": k(replace(plain, outputs=[RequestOutput(name="z")])),
        "no outputs": k(replace(plain, outputs=[])),
        "classification": k(
            replace(plain, outputs=[RequestOutput(name="y", parameters={"classification": 2})])
        ),
        "parameter": k(replace(plain, parameters={"temperature": 0.5})),
        "parameter value": k(replace(plain, parameters={"temperature": 0.7})),
        "int, not float": k(with_input(plain, 0, data=[1, 2])),
        "text, not bytes": k(with_input(plain, 1, data=[b"a"])),
        "nested": k(with_input(plain, 0, data=[[1.0, 2.0]])),
        "an array": k(with_input(plain, 0, data=np.array([1.0, 2.0], dtype=np.float32))),
    }
    keys = [k(plain), *variants.values()]
    assert len(set(keys)) == len(keys), "two different requests share a key"


def test_the_id_and_what_only_shapes_the_wire_leave_the_key_alone() -> None:
    plain = k(base())
    assert k(base(id="one")) == k(base(id="two")) == plain
    ignored = {"timeout": 1000, "priority": 2, "binary_data_output": True}
    assert k(base(parameters=ignored)) == plain
    binary = [RequestOutput(name="y", parameters={"binary_data": True})]
    assert k(base(outputs=binary)) == k(base(outputs=[RequestOutput(name="y")]))
    # parameters in any order are the same parameters
    assert k(base(parameters={"a": 1, "b": 2})) == k(base(parameters={"b": 2, "a": 1}))


def test_arrays_are_keyed_by_dtype_shape_and_bytes() -> None:
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    one = InferenceRequest(inputs=[RequestInput(name="x", shape=[2, 3], datatype="FP32", data=a)])
    assert k(one) == k(replace(one, inputs=[replace(one.inputs[0], data=a.copy())]))
    as_int = a.view(np.int32)  # the same bytes as another dtype
    assert k(one) != k(replace(one, inputs=[replace(one.inputs[0], data=as_int)]))
    flat = a.reshape(6)
    assert k(one) != k(replace(one, inputs=[replace(one.inputs[0], data=flat)]))
    # a non-contiguous view is keyed by its values, as a copy of it
    view = np.arange(12, dtype=np.float32).reshape(2, 6)[:, ::2]
    assert k(replace(one, inputs=[replace(one.inputs[0], data=view)])) == k(
        replace(one, inputs=[replace(one.inputs[0], data=view.copy())])
    )


def test_a_value_that_cannot_be_hashed_is_not_cached() -> None:
    odd = InferenceRequest(
        inputs=[RequestInput(name="x", shape=[1], datatype="FP32", data=[object()])]
    )
    assert request_key("m", None, odd) is None


# -- the setting --------------------------------------------------------------------------------


def config(value: Any) -> ModelConfig:
    return ModelConfig.from_mapping({"response_cache": value}, default_name="m", where="c.yaml")


def test_the_setting_and_its_defaults() -> None:
    assert ModelConfig(name="m").response_cache is None
    assert config(True).response_cache == ResponseCacheSettings()
    assert ResponseCacheSettings() == ResponseCacheSettings(64 * 1024 * 1024, 0, 0.0)
    assert config(False).response_cache is None
    assert config(None).response_cache is None
    assert config({}).response_cache == ResponseCacheSettings()
    got = config({"max_bytes": 2048, "max_entries": 5, "ttl_s": 1.5}).response_cache
    assert got == ResponseCacheSettings(2048, 5, 1.5)


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("yes", "'response_cache' must be true, false or a mapping"),
        ({"max_bytes": 0}, "'response_cache.max_bytes' must be an integer >= 1"),
        ({"max_bytes": 1.5}, "'response_cache.max_bytes' must be an integer"),
        ({"max_entries": -1}, "'response_cache.max_entries' must be an integer >= 0"),
        ({"ttl_s": -1}, "'response_cache.ttl_s' must be a number of seconds"),
        ({"ttl_s": "soon"}, "'response_cache.ttl_s' must be a number of seconds"),
        ({"size": 3}, "'response_cache' has unknown key(s) size"),
    ],
)
def test_a_wrong_setting_names_the_key(value: Any, words: str) -> None:
    with pytest.raises(DefinitionError) as caught:
        config(value)
    assert words in caught.value.message and "c.yaml" in caught.value.message


def test_models_that_may_not_be_cached_get_no_cache() -> None:
    on = ResponseCacheSettings()
    assert fake(response_cache=on).cache is not None
    assert fake().cache is None  # not asked for
    assert fake(response_cache=on, sequence_batching=True).cache is None
    assert fake(response_cache=on, continuous_batching=True).cache is None
    assert fake(response_cache=on, instance=FakeInstance(streaming=True)).cache is None
    assert fake(response_cache=on, instance=FakeInstance(needs_inputs=False)).cache is None


# -- Cache-Control ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "asked"),
    [
        ("no-cache", CACHE_NO_READ),
        ("No-Cache", CACHE_NO_READ),
        ("max-age=0", CACHE_NO_READ),
        ("no-store", CACHE_NO_STORE),
        ("no-cache, no-store", CACHE_NO_READ | CACHE_NO_STORE),
        ("max-age=60", 0),
        ("private, only-if-cached", 0),
        ("", 0),
        ("no-cache" + ", x" * 200, 0),  # past MAX_CACHE_CONTROL: nothing read
    ],
)
def test_cache_control_as_rfc_9111_has_it(header: str, asked: int) -> None:
    assert cache_control(header) == asked
    assert cache_control(header.encode()) == asked


# -- in the data plane --------------------------------------------------------------------------


def counted() -> tuple[Any, FakeScheduler]:
    scheduler = FakeScheduler(result={"y": np.array([1.0, 2.0], dtype=np.float32)})
    mv = fake(response_cache=ResponseCacheSettings(), scheduler=scheduler)
    return mv, scheduler


def call(request: InferenceRequest, protocol: WireProtocol = WireProtocol.OIP_REST) -> Call:
    return Call("m", None, protocol, request)


async def infer(dp: Any, request: InferenceRequest, *, asked: int = 0, **kw: Any) -> Any:
    info = RequestInfo("r")
    info.cache = asked
    token = current_request.set(info)
    try:
        return await dp.infer(call(request, **kw))
    finally:
        current_request.reset(token)


async def test_a_hit_answers_without_the_scheduler_with_the_requests_id() -> None:
    mv, scheduler = counted()
    dp = plane(mv)
    first = await infer(dp, oip_request(id="a"))
    second = await infer(dp, oip_request(id="b"))
    assert len(scheduler.calls) == 1
    assert (first.value.id, second.value.id) == ("a", "b")
    assert second.value.outputs == first.value.outputs
    third = await infer(dp, oip_request())
    assert third.value.id is None and len(scheduler.calls) == 1
    stats = mv.cache.stats
    assert (stats.hits, stats.misses, stats.entries) == (2, 1, 1)
    assert stats.hit_ns > 0 and stats.miss_ns > 0
    # a hit is a success of the version, and no execution
    assert mv.stats.protocols[WireProtocol.OIP_REST.index].ok.count == 3
    assert dp.statistics("m")[0].inference_stats.cache_hit.count == 2
    assert dp.statistics("m")[0].inference_stats.cache_miss.count == 1


async def test_cache_control_in_the_data_plane() -> None:
    mv, scheduler = counted()
    dp = plane(mv)
    await infer(dp, oip_request(), asked=CACHE_NO_STORE)  # computed, not kept
    await infer(dp, oip_request(), asked=CACHE_NO_READ | CACHE_NO_STORE)  # neither
    assert len(scheduler.calls) == 2 and mv.cache.stats.entries == 0
    await infer(dp, oip_request())  # kept now
    await infer(dp, oip_request(), asked=CACHE_NO_READ)  # computed again, and kept
    assert len(scheduler.calls) == 4
    await infer(dp, oip_request(), asked=CACHE_NO_STORE)  # may read: a hit
    assert len(scheduler.calls) == 4
    # "neither" is not looked up at all: neither a hit nor a miss
    assert (mv.cache.stats.hits, mv.cache.stats.misses) == (1, 3)


async def test_errors_other_protocols_and_shared_memory_are_not_cached() -> None:
    mv, scheduler = counted()
    dp = plane(mv)
    scheduler.result = object()  # not an OIP tensor: the data plane's error
    for _ in range(2):
        with pytest.raises(Exception, match="cannot carry"):
            await infer(dp, oip_request())
    assert len(scheduler.calls) == 2 and mv.cache.stats.entries == 0
    scheduler.result = {"y": 1.0}
    for _ in range(2):
        await dp.infer(Call("m", None, WireProtocol.TRUSS, {"x": 1}))
    assert len(scheduler.calls) == 4 and mv.cache.stats.misses == 2  # (the two errors)
    region = oip_request()
    region.inputs[0].parameters = {"shared_memory_region": "r", "shared_memory_byte_size": 8}
    region.inputs[0].data = None
    with pytest.raises(PodiumError):  # no such region; not looked up, so no miss
        await infer(dp, region)
    assert mv.cache.stats.misses == 2


async def test_unload_reload_and_repository_load_forget_the_answers() -> None:
    mv, scheduler = counted()
    dp = plane(mv)
    await infer(dp, oip_request())
    await mv.unload()
    assert mv.cache.stats.entries == 0
    await mv.reload()
    await infer(dp, oip_request())
    assert len(scheduler.calls) == 2
    await infer(dp, oip_request())
    assert len(scheduler.calls) == 2
    await dp.repository.load("m", via=None)  # Triton's load of a loaded model: a reload
    await infer(dp, oip_request())
    assert len(scheduler.calls) == 3


async def test_an_answer_computed_across_an_unload_is_not_kept() -> None:
    mv, scheduler = counted()
    dp = plane(mv)

    async def slow(inputs: Any, request: Any) -> Any:
        scheduler.calls.append(("infer", inputs, request))
        mv.forget_answers()  # the version was unloaded and loaded while this one ran
        return scheduler.result

    scheduler.infer = slow  # type: ignore[method-assign]
    await infer(dp, oip_request())
    assert mv.cache.stats.entries == 0


# -- MLServer's cache settings ------------------------------------------------------------------


def model_settings(tmp_path: Path, **data: Any) -> ModelConfig:
    path = tmp_path / "model-settings.json"
    path.write_text(json.dumps({"implementation": "models.Runtime", **data}))
    return read_settings(path).config


def test_mlservers_cache_enabled_is_an_lru_of_its_cache_size(tmp_path: Path) -> None:
    assert model_settings(tmp_path).response_cache is None
    assert model_settings(tmp_path, cache_enabled=False).response_cache is None
    on = model_settings(tmp_path, cache_enabled=True).response_cache
    assert on == ResponseCacheSettings(max_entries=MLSERVER_CACHE_SIZE)
    own = {"podium": {"response_cache": {"max_bytes": 4096}}}
    assert model_settings(tmp_path, cache_enabled=True, **own).response_cache == (
        ResponseCacheSettings(max_bytes=4096)
    )
    with pytest.raises(DefinitionError, match="'cache_enabled' must be true or false"):
        model_settings(tmp_path, cache_enabled="sometimes")


def test_settings_json_cache_keys_are_named_where_podium_differs(tmp_path: Path) -> None:
    def notes(data: dict[str, Any]) -> str:
        path = tmp_path / "settings.json"
        path.write_text(json.dumps(data))
        return "\n".join(read_settings_json(path, environ={}).notes)

    assert notes({"cache_enabled": True, "cache_size": MLSERVER_CACHE_SIZE}) == ""
    off = notes({"cache_enabled": False})
    assert "'cache_enabled' is not honoured: each model's own cache_enabled" in off
    size = notes({"cache_enabled": True, "cache_size": 10})
    assert "'cache_size' is not honoured: each model's cache keeps 100 answers" in size
