"""The native model contract: podium.model.native (inspect_class, NativeModel).

No ``from __future__ import annotations`` here on purpose: the model classes below are defined
inside test functions, and their annotations must be real objects, as in a user's model file
that does not use the future import (string annotations are covered in test_discovery.py).
"""

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pydantic
import pytest
from starlette.requests import Request

from podium.config import ModelConfig
from podium.errors import (
    DefinitionError,
    InvalidInput,
    ModelError,
    NotFound,
    PodiumError,
    ValidationFailed,
    http_status,
)
from podium.model.native import Flavor, NativeModel, inspect_class
from podium.types import InferenceRequest, InputKind


class UserRequest(Request):
    """A user's own subclass of starlette's Request."""


# fastapi is not installed; fastapi.Request is starlette's Request re-exported, and a class that
# lives in another package but derives from starlette's Request must be accepted the same way.
FastAPIRequest = type("Request", (Request,), {"__module__": "fastapi"})


class Point(pydantic.BaseModel):
    x: int
    y: int


class Order(pydantic.BaseModel):
    customer: str
    items: list[Point]


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(8, thread_name_prefix="test-model") as pool:
        yield pool


def make(
    cls: type,
    executor: ThreadPoolExecutor,
    *,
    name: str = "m",
    raw: dict[str, Any] | None = None,
    model_dir: Path = Path("/srv/models/m"),
    secrets: Any = None,
) -> NativeModel:
    config = ModelConfig(name=name, raw=raw if raw is not None else {})
    return NativeModel(
        inspect_class(cls),
        config,
        model_dir=model_dir,
        secrets=secrets if secrets is not None else {},
        executor=executor,
    )


def problems_of(cls: type) -> list[str]:
    with pytest.raises(DefinitionError) as info:
        inspect_class(cls)
    assert info.value.message == "; ".join(info.value.problems)
    return info.value.problems


def only_problem(cls: type) -> str:
    problems = problems_of(cls)
    assert len(problems) == 1, problems
    return problems[0]


# -- definition errors: each names the method and the rule --------------------------------------


def test_more_than_two_parameters() -> None:
    class Model:
        def predict(self, inputs, request: Request, extra):
            return inputs

    problem = only_problem(Model)
    assert "Model.predict" in problem
    assert "takes 3 parameters" in problem
    assert "at most two" in problem


def test_second_parameter_not_annotated_as_request() -> None:
    class Model:
        def predict(self, inputs, request):
            return inputs

    problem = only_problem(Model)
    assert "Model.predict" in problem
    assert "'request'" in problem
    assert "must be the request" in problem
    assert "starlette.requests.Request" in problem


def test_second_parameter_annotated_with_something_else() -> None:
    class Model:
        def predict(self, inputs, other: dict):
            return inputs

    problem = only_problem(Model)
    assert "Model.predict" in problem
    assert "'other'" in problem
    assert "must be the request" in problem


def test_request_before_inputs() -> None:
    class Model:
        def predict(self, request: Request, inputs):
            return inputs

    problem = only_problem(Model)
    assert "Model.predict" in problem
    assert "must come second" in problem


def test_preprocess_with_predict_taking_only_the_request() -> None:
    class Model:
        def preprocess(self, inputs):
            return inputs

        def predict(self, request: Request):
            return 1

    problem = only_problem(Model)
    assert "Model.preprocess" in problem
    assert "predict that takes only the request" in problem
    assert "discarded" in problem


def test_postprocess_taking_only_the_request() -> None:
    class Model:
        def predict(self, inputs):
            return inputs

        def postprocess(self, request: Request):
            return 1

    problem = only_problem(Model)
    assert "Model.postprocess" in problem
    assert "takes only the request" in problem
    assert "outputs of predict" in problem


def test_generator_predict_with_postprocess() -> None:
    class Model:
        def predict(self, inputs):
            yield inputs

        def postprocess(self, outputs):
            return outputs

    problem = only_problem(Model)
    assert "Model.predict is a generator (streaming)" in problem
    assert "cannot be combined with postprocess" in problem


def test_async_generator_predict_with_postprocess() -> None:
    class Model:
        async def predict(self, inputs):
            yield inputs

        async def postprocess(self, outputs):
            return outputs

    problem = only_problem(Model)
    assert "Model.predict is a async generator (streaming)" in problem
    assert "cannot be combined with postprocess" in problem


def test_no_predict() -> None:
    class Model:
        def preprocess(self, inputs):
            return inputs

    problem = only_problem(Model)
    assert "Model has no predict method" in problem
    assert "required" in problem


def test_predict_that_is_not_callable() -> None:
    class Model:
        predict = 3

    assert "Model.predict must be a method" in only_problem(Model)


@pytest.mark.parametrize("method", ["preprocess", "postprocess"])
def test_generator_preprocess_or_postprocess(method: str) -> None:
    def gen(self, value):
        yield value

    async def agen(self, value):
        yield value

    for fn, flavor in ((gen, "generator"), (agen, "async generator")):
        cls = type("Model", (), {"predict": lambda self, inputs: inputs, method: fn})
        problem = only_problem(cls)
        assert f"Model.{method} is a {flavor}" in problem
        assert "only predict may be a generator" in problem


def test_var_positional_and_var_keyword() -> None:
    class Model:
        def preprocess(self, *args):
            return args

        def predict(self, inputs, **kwargs):
            return inputs

    problems = problems_of(Model)
    assert len(problems) == 2
    assert "Model.preprocess" in problems[0] and "'args'" in problems[0]
    assert "plain positional parameter" in problems[0]
    assert "Model.predict" in problems[1] and "'kwargs'" in problems[1]


def test_keyword_only_parameter() -> None:
    class Model:
        def predict(self, inputs, *, request: Request):
            return inputs

    problem = only_problem(Model)
    assert "Model.predict" in problem and "'request'" in problem
    assert "plain positional parameter" in problem


def test_zero_parameters() -> None:
    class Model:
        def predict(self):
            return 1

    problem = only_problem(Model)
    assert "Model.predict takes no parameters" in problem


def test_zero_parameters_staticmethod() -> None:
    class Model:
        @staticmethod
        def predict():
            return 1

    assert "Model.predict takes no parameters" in only_problem(Model)


def test_generator_load() -> None:
    class Model:
        def load(self):
            yield

        def predict(self, inputs):
            return inputs

    assert "Model.load must not be a generator" in only_problem(Model)


def test_several_problems_reported_at_once() -> None:
    class Model:
        def __init__(self, weights):
            pass

        def preprocess(self, inputs, request: Request, extra):
            return inputs

        async def predict(self, inputs):
            yield inputs

        def postprocess(self, request: Request):
            return 1

    problems = problems_of(Model)
    text = "\n".join(problems)
    assert "Model.preprocess takes 3 parameters" in text
    assert "Model.postprocess takes only the request" in text
    assert "Model.predict is a async generator (streaming)" in text
    assert "'weights'" in text
    assert len(problems) == 4


def test_not_a_class() -> None:
    with pytest.raises(DefinitionError, match="is not a class"):
        inspect_class(lambda inputs: inputs)


# -- valid shapes --------------------------------------------------------------------------------


def test_inputs_only() -> None:
    class Model:
        def predict(self, inputs):
            return inputs

    spec = inspect_class(Model)
    assert spec.predict.takes_inputs and not spec.predict.takes_request
    assert spec.needs_inputs and not spec.needs_request
    assert spec.preprocess is None and spec.postprocess is None


@pytest.mark.parametrize("annotation", [Request, UserRequest, FastAPIRequest])
def test_request_only(annotation: type) -> None:
    def predict(self, request: annotation):  # type: ignore[valid-type]
        return 1

    spec = inspect_class(type("Model", (), {"predict": predict}))
    assert spec.predict.takes_request and not spec.predict.takes_inputs
    assert not spec.needs_inputs and spec.needs_request


@pytest.mark.parametrize("annotation", [Request, UserRequest, FastAPIRequest])
def test_inputs_and_request(annotation: type) -> None:
    def predict(self, inputs, request: annotation):  # type: ignore[valid-type]
        return 1

    spec = inspect_class(type("Model", (), {"predict": predict}))
    assert spec.predict.takes_inputs and spec.predict.takes_request
    assert spec.needs_inputs and spec.needs_request


def test_first_parameter_not_named_self() -> None:
    class Model:
        def predict(this, inputs, request: Request):
            return inputs

    spec = inspect_class(Model)
    assert spec.predict.takes_inputs and spec.predict.takes_request


def test_staticmethod_and_classmethod_predict() -> None:
    class Static:
        @staticmethod
        def predict(inputs, request: Request):
            return inputs

    class Klass:
        @classmethod
        def predict(cls, inputs):
            return inputs

    static = inspect_class(Static).predict
    assert static.takes_inputs and static.takes_request
    klass = inspect_class(Klass).predict
    assert klass.takes_inputs and not klass.takes_request


def test_flavors() -> None:
    class Sync:
        def predict(self, inputs):
            return inputs

    class Async:
        async def predict(self, inputs):
            return inputs

    class Gen:
        def predict(self, inputs):
            yield inputs

    class AGen:
        async def predict(self, inputs):
            yield inputs

    assert inspect_class(Sync).predict.flavor is Flavor.SYNC
    assert inspect_class(Async).predict.flavor is Flavor.ASYNC
    assert inspect_class(Gen).predict.flavor is Flavor.GENERATOR
    assert inspect_class(AGen).predict.flavor is Flavor.ASYNC_GENERATOR
    assert not inspect_class(Async).predict.streaming
    assert inspect_class(Gen).predict.streaming and inspect_class(AGen).predict.streaming


def test_full_pipeline_shapes() -> None:
    class Model:
        def load(self):
            pass

        async def preprocess(self, request: Request):
            return 1

        def predict(self, inputs, request: Request):
            return inputs

        def postprocess(self, outputs, request: Request):
            return outputs

    spec = inspect_class(Model)
    assert spec.has_load
    assert spec.preprocess is not None and spec.postprocess is not None
    assert spec.preprocess.flavor is Flavor.ASYNC
    # preprocess, the first method, takes only the request: the body is never needed
    assert not spec.needs_inputs


def test_needs_inputs_false_when_no_method_takes_inputs() -> None:
    class RequestOnly:
        def predict(self, request: Request):
            return 1

        def postprocess(self, outputs):
            return outputs

    class Reads:
        def preprocess(self, inputs):
            return inputs

        def predict(self, inputs, request: Request):
            return 1

    assert not inspect_class(RequestOnly).needs_inputs
    assert inspect_class(Reads).needs_inputs


# -- input kinds ---------------------------------------------------------------------------------


def test_input_kind_oip_request() -> None:
    class Model:
        def predict(self, inputs: InferenceRequest):
            return inputs

    spec = inspect_class(Model)
    assert spec.input_kind is InputKind.OIP_REQUEST
    assert spec.input_schema is None


def test_input_kind_schema() -> None:
    class Model:
        def predict(self, inputs: Point, request: Request):
            return inputs

    spec = inspect_class(Model)
    assert spec.input_kind is InputKind.SCHEMA
    assert spec.input_schema is Point


def test_input_kind_read_from_preprocess_when_there_is_one() -> None:
    class Model:
        def preprocess(self, inputs: Point):
            return inputs

        def predict(self, inputs: InferenceRequest):
            return inputs

    spec = inspect_class(Model)
    assert spec.input_kind is InputKind.SCHEMA
    assert spec.input_schema is Point


@pytest.mark.parametrize("annotation", [None, dict, list[int], Any, "dict"])
def test_input_kind_default(annotation: Any) -> None:
    def predict(self, inputs):
        return inputs

    if annotation is not None:
        predict.__annotations__ = {"inputs": annotation}
    spec = inspect_class(type("Model", (), {"predict": predict}))
    assert spec.input_kind is InputKind.DEFAULT
    assert spec.input_schema is None


def test_string_annotations_are_resolved() -> None:
    def predict(self, inputs, request):
        return inputs

    predict.__annotations__ = {"inputs": "Point", "request": "UserRequest"}
    spec = inspect_class(type("Model", (), {"predict": predict}))
    assert spec.input_kind is InputKind.SCHEMA and spec.input_schema is Point
    assert spec.predict.takes_request


def test_one_unresolvable_annotation_does_not_hide_the_others() -> None:
    # e.g. a return type imported only under TYPE_CHECKING in a model file
    def predict(self, inputs, request):
        return inputs

    predict.__annotations__ = {
        "inputs": "Point",
        "request": "Request",
        "return": "numpy.typing.NDArray",
    }
    spec = inspect_class(type("Model", (), {"predict": predict}))
    assert spec.predict.takes_request
    assert spec.input_schema is Point


# -- validate ------------------------------------------------------------------------------------


def test_validate_builds_the_schema(executor: ThreadPoolExecutor) -> None:
    class Model:
        def predict(self, inputs: Order):
            return inputs

    model = make(Model, executor, name="orders")
    value = {"customer": "ada", "items": [{"x": 1, "y": 2}]}
    order = model.validate(value)
    assert isinstance(order, Order)
    assert order.items == [Point(x=1, y=2)]
    assert model.validate(b'{"customer": "bob", "items": []}') == Order(customer="bob", items=[])


def test_validate_failure_names_the_locations(executor: ThreadPoolExecutor) -> None:
    class Model:
        def predict(self, inputs: Order):
            return inputs

    model = make(Model, executor, name="orders")
    with pytest.raises(ValidationFailed) as info:
        model.validate({"customer": "ada", "items": [{"x": 1, "y": "not a number"}, {"x": 2}]})
    exc = info.value
    assert isinstance(exc, InvalidInput)
    assert http_status(exc) == 400
    locs = [d["loc"] for d in exc.details]
    assert ["items", 0, "y"] in locs
    assert ["items", 1, "y"] in locs
    assert all(d["msg"] and d["type"] for d in exc.details)
    assert "model 'orders'" in exc.message
    assert "items.0.y" in exc.message and "items.1.y" in exc.message


def test_validate_malformed_json(executor: ThreadPoolExecutor) -> None:
    class Model:
        def predict(self, inputs: Point):
            return inputs

    with pytest.raises(ValidationFailed) as info:
        make(Model, executor).validate(b"{not json")
    assert info.value.details
    assert "(body)" in info.value.message


# -- __init__ ------------------------------------------------------------------------------------


def test_init_receives_only_the_kwargs_it_names(executor: ThreadPoolExecutor) -> None:
    seen: dict[str, Any] = {}

    class ConfigOnly:
        def __init__(self, config):
            seen["config"] = config

        def predict(self, inputs):
            return inputs

    class DataAndSecrets:
        def __init__(self, data_dir, *, secrets, unused=5):
            seen["data_dir"] = data_dir
            seen["secrets"] = secrets
            seen["unused"] = unused

        def predict(self, inputs):
            return inputs

    secrets = {"token": "s3cret"}
    raw = {"predict_concurrency": 2, "model_metadata": {"k": "v"}}
    make(ConfigOnly, executor, raw=raw, secrets=secrets)
    assert seen == {"config": raw}
    seen.clear()
    make(DataAndSecrets, executor, model_dir=Path("/srv/m"), secrets=secrets)
    assert seen == {"data_dir": Path("/srv/m/data"), "secrets": secrets, "unused": 5}
    assert seen["secrets"] is secrets


def test_init_kwargs_gets_all_three(executor: ThreadPoolExecutor) -> None:
    seen: dict[str, Any] = {}

    class Model:
        def __init__(self, **kwargs):
            seen.update(kwargs)

        def predict(self, inputs):
            return inputs

    make(Model, executor, raw={"a": 1}, model_dir=Path("/x"), secrets={"s": "1"})
    assert seen == {"config": {"a": 1}, "data_dir": Path("/x/data"), "secrets": {"s": "1"}}


def test_init_without_parameters_and_without_init(executor: ThreadPoolExecutor) -> None:
    class Plain:
        def predict(self, inputs):
            return inputs

    class Bare:
        def __init__(self):
            self.ready = True

        def predict(self, inputs):
            return inputs

    assert isinstance(make(Plain, executor).obj, Plain)
    assert make(Bare, executor).obj.ready


def test_init_unknown_required_parameter() -> None:
    class Model:
        def __init__(self, config, weights_path):
            pass

        def predict(self, inputs):
            return inputs

    problem = only_problem(Model)
    assert "Model.__init__" in problem
    assert "'weights_path'" in problem
    assert "config, data_dir, secrets" in problem


def test_init_raising(executor: ThreadPoolExecutor) -> None:
    class Model:
        def __init__(self, config):
            raise RuntimeError("no weights")

        def predict(self, inputs):
            return inputs

    with pytest.raises(DefinitionError) as info:
        make(Model, executor, name="resnet")
    assert "model 'resnet'" in info.value.message
    assert "Model.__init__ raised RuntimeError: no weights" in info.value.message
    assert isinstance(info.value.__cause__, RuntimeError)


# -- load ----------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_sync_load_runs_in_the_thread_pool(executor: ThreadPoolExecutor) -> None:
    threads: list[int] = []

    class Model:
        def load(self):
            threads.append(threading.get_ident())

        def predict(self, inputs):
            return inputs

    await make(Model, executor).load()
    assert len(threads) == 1
    assert threads[0] != threading.get_ident()


@pytest.mark.anyio
async def test_async_load_runs_on_the_loop(executor: ThreadPoolExecutor) -> None:
    threads: list[int] = []

    class Model:
        async def load(self):
            await asyncio.sleep(0)
            threads.append(threading.get_ident())

        def predict(self, inputs):
            return inputs

    await make(Model, executor).load()
    assert threads == [threading.get_ident()]


@pytest.mark.anyio
async def test_load_errors_propagate(executor: ThreadPoolExecutor) -> None:
    class Model:
        def load(self):
            raise OSError("weights missing")

        def predict(self, inputs):
            return inputs

    with pytest.raises(OSError, match="weights missing"):
        await make(Model, executor).load()


@pytest.mark.anyio
async def test_model_without_load(executor: ThreadPoolExecutor) -> None:
    class Model:
        def predict(self, inputs):
            return inputs

    model = make(Model, executor)
    assert not model.spec.has_load
    await model.load()
    assert await model.predict(3, None) == 3


# -- calling the methods -------------------------------------------------------------------------


@pytest.mark.anyio
async def test_same_request_object_through_the_pipeline(executor: ThreadPoolExecutor) -> None:
    seen: list[tuple[str, Any]] = []

    class Model:
        def preprocess(self, inputs, request: Request):
            seen.append(("pre", request))
            return inputs + 1

        async def predict(self, inputs, request: Request):
            seen.append(("predict", request))
            return inputs * 10

        def postprocess(self, outputs, request: Request):
            seen.append(("post", request))
            return outputs - 1

    model = make(Model, executor)
    request = object()
    inputs = await model.preprocess(1, request)
    outputs = await model.predict(inputs, request)
    assert await model.postprocess(outputs, request) == 19
    assert [name for name, _ in seen] == ["pre", "predict", "post"]
    assert all(r is request for _, r in seen)


@pytest.mark.anyio
async def test_request_only_methods_get_the_request(executor: ThreadPoolExecutor) -> None:
    class Model:
        async def preprocess(self, request: Request):
            return ("from request", request)

        def predict(self, inputs):
            return inputs

    model = make(Model, executor)
    request = object()
    assert await model.preprocess("ignored", request) == ("from request", request)


@pytest.mark.anyio
async def test_sync_methods_run_in_the_pool_async_on_the_loop(
    executor: ThreadPoolExecutor,
) -> None:
    where: dict[str, int] = {}

    class Model:
        def preprocess(self, inputs):
            where["pre"] = threading.get_ident()
            return inputs

        async def predict(self, inputs):
            where["predict"] = threading.get_ident()
            return inputs

        def postprocess(self, outputs):
            where["post"] = threading.get_ident()
            return outputs

    model = make(Model, executor)
    await model.postprocess(await model.predict(await model.preprocess(1, None), None), None)
    loop_thread = threading.get_ident()
    assert where["predict"] == loop_thread
    assert where["pre"] != loop_thread and where["post"] != loop_thread


@pytest.mark.anyio
async def test_missing_optional_methods_pass_values_through(executor: ThreadPoolExecutor) -> None:
    class Model:
        def predict(self, inputs):
            return inputs

    model = make(Model, executor)
    assert not model.capabilities.has_preprocess and not model.capabilities.has_postprocess
    value = object()
    assert await model.preprocess(value, None) is value
    assert await model.postprocess(value, None) is value


@pytest.mark.anyio
@pytest.mark.parametrize("method", ["preprocess", "predict", "postprocess"])
@pytest.mark.parametrize("is_async", [False, True])
async def test_model_exceptions_become_model_errors(
    executor: ThreadPoolExecutor, method: str, is_async: bool
) -> None:
    def boom(self, value):
        raise ValueError(f"bad value in {method}")

    async def aboom(self, value):
        raise ValueError(f"bad value in {method}")

    attrs: dict[str, Any] = {"predict": lambda self, inputs: inputs}
    attrs[method] = aboom if is_async else boom
    model = make(type("Model", (), attrs), executor, name="clf")
    with pytest.raises(ModelError) as info:
        await getattr(model, method)(1, None)
    message = info.value.message
    assert f"model 'clf' {method} raised ValueError: bad value in {method}" == message
    assert isinstance(info.value.__cause__, ValueError)
    assert http_status(info.value) == 500


@pytest.mark.anyio
@pytest.mark.parametrize("is_async", [False, True])
async def test_podium_errors_from_user_code_pass_through(
    executor: ThreadPoolExecutor, is_async: bool
) -> None:
    error = InvalidInput("field 'x' is required")
    other = NotFound("no such item")

    class Sync:
        def preprocess(self, inputs):
            raise other

        def predict(self, inputs):
            raise error

    class Async:
        async def preprocess(self, inputs):
            raise other

        async def predict(self, inputs):
            raise error

    model = make(Async if is_async else Sync, executor)
    with pytest.raises(PodiumError) as info:
        await model.predict(1, None)
    assert info.value is error
    with pytest.raises(PodiumError) as info:
        await model.preprocess(1, None)
    assert info.value is other


@pytest.mark.anyio
async def test_async_generator_stream(executor: ThreadPoolExecutor) -> None:
    class Model:
        async def predict(self, inputs, request: Request):
            for i in range(inputs):
                yield (i, request)

    model = make(Model, executor)
    assert model.capabilities.streaming
    request = object()
    items = [item async for item in model.predict_stream(3, request)]
    assert items == [(0, request), (1, request), (2, request)]


@pytest.mark.anyio
async def test_sync_generator_stream_runs_in_the_pool(executor: ThreadPoolExecutor) -> None:
    threads: set[int] = set()

    class Model:
        def predict(self, inputs):
            for i in range(inputs):
                threads.add(threading.get_ident())
                yield i

    model = make(Model, executor)
    assert model.capabilities.streaming
    assert [item async for item in model.predict_stream(4, None)] == [0, 1, 2, 3]
    assert threads and threading.get_ident() not in threads


@pytest.mark.anyio
@pytest.mark.parametrize("is_async", [False, True])
async def test_stream_errors_become_model_errors(
    executor: ThreadPoolExecutor, is_async: bool
) -> None:
    def gen(self, inputs):
        yield 1
        raise KeyError("tokenizer")

    async def agen(self, inputs):
        yield 1
        raise KeyError("tokenizer")

    model = make(type("Model", (), {"predict": agen if is_async else gen}), executor, name="llm")
    items: list[Any] = []
    with pytest.raises(ModelError) as info:
        async for item in model.predict_stream(None, None):
            items.append(item)
    assert items == [1]
    assert "model 'llm' predict raised KeyError" in info.value.message
    assert "tokenizer" in info.value.message


def test_optional_request_annotation_is_the_request() -> None:
    from typing import Optional

    from starlette.requests import Request

    class Model:
        def predict(self, inputs, request: Request | None):
            return inputs

        def postprocess(self, outputs, request: Optional[Request]):  # noqa: UP045
            return outputs

    spec = inspect_class(Model)
    assert spec.predict.takes_request and spec.postprocess is not None
    assert spec.postprocess.takes_request


def test_a_union_of_request_and_something_else_is_not_the_request() -> None:
    from starlette.requests import Request

    class Model:
        def predict(self, inputs, request: Request | int):
            return inputs

    with pytest.raises(DefinitionError, match="must be the request"):
        inspect_class(Model)
