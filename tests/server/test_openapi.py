"""The OpenAPI 3.1 documents of the HTTP listeners: built from the route tables (so they list
exactly what is served), OIP bodies from the msgspec types that parse them, valid OpenAPI 3.1,
and served where MLServer and TorchServe serve theirs; the ``/v2/docs`` page needs nothing from
outside the package.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import httpx
import msgspec
import pytest
from conftest import Server

from podium.config import Registration as RegistrationSettings
from podium.errors import InvalidInput, NotFound
from podium.server._openapi import OPENAPI, Operation, describe, response
from podium.server.http import INFERENCE_ROUTES, Api, HttpApp, Route, RouteTable
from podium.server.http._openapi import description as inference_description
from podium.server.management import (
    MANAGEMENT_ROUTES,
    ManagementApp,
    Registration,
    Scaling,
    UrlPolicy,
)
from podium.server.management._openapi import description as management_description
from podium.server.management._params import MAX_WORKERS, page
from podium.types import DATATYPES, InferenceRequest, InferenceResponse

DOCUMENTS = {
    "inference": (INFERENCE_ROUTES, inference_description),
    "management": (MANAGEMENT_ROUTES, management_description),
}


def operations(document: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {
        (path, method.upper(), op["operationId"])
        for path, ops in document["paths"].items()
        for method, op in ops.items()
    }


@pytest.mark.parametrize("which", DOCUMENTS)
def test_the_document_has_exactly_the_tables_operations(which: str) -> None:
    table, build = DOCUMENTS[which]
    document = build(table)
    assert document["openapi"] == OPENAPI == "3.1.0"
    assert operations(document) == {(t, m, i) for t, m, i, _ in table.operations()}
    for template, method, _, route in table.operations():
        op = document["paths"][template][method.lower()]
        named = [p["name"] for p in op["parameters"] if p["in"] == "path"]
        assert named == list(route.params)
        assert op["tags"] == [route.protocol.value]


@pytest.mark.parametrize("which", DOCUMENTS)
def test_the_document_is_valid_openapi_3_1(which: str) -> None:
    definitions = pytest.importorskip("schemathesis.specs.openapi.definitions")
    table, build = DOCUMENTS[which]
    errors = [str(e) for e in definitions.OPENAPI_31_VALIDATOR.iter_errors(build(table))]
    assert errors == []


def test_every_route_of_both_listeners_is_described() -> None:
    inference = inference_description(INFERENCE_ROUTES)["paths"]
    for path in ("/v2/docs/openapi.json", "/v2/docs", "/", "/api-description", "/ping"):
        assert path in inference
    assert set(inference["/"]) == {"options", "get"}  # TorchServe's description, Truss's liveness
    for path in ("/v1/models/{model}:predict_binary", "/invocations", "/v1/chat/completions"):
        assert path in inference
    assert inference["/api-description"]["get"]["deprecated"] is True
    management = management_description(MANAGEMENT_ROUTES)["paths"]
    assert set(management["/"]) == {"options"} and set(management["/api-description"]) == {"get"}
    assert {"/models", "/models/{model_name}", "/token"} <= set(management)


def test_the_oip_bodies_are_the_msgspec_types_schemas() -> None:
    document = inference_description(INFERENCE_ROUTES)
    components = document["components"]["schemas"]
    _, expected = msgspec.json.schema_components(
        (InferenceRequest, InferenceResponse), ref_template="#/components/schemas/{name}"
    )
    for name, schema in expected.items():
        found = dict(components[name])
        if name in ("RequestInput", "ResponseOutput"):
            # the one addition: the datatypes the codecs accept (any other is a 400)
            assert found["properties"]["datatype"] == {"type": "string", "enum": sorted(DATATYPES)}
            found["properties"] = {**found["properties"], "datatype": {"type": "string"}}
        assert found == schema, name
    # the shared memory extension's bodies, by the types that parse and encode them
    for name in ("RegionStatus", "RegionRegister"):
        assert components[name]["title"] == name
    register = document["paths"]["/v2/systemsharedmemory/region/{name}/register"]["post"]
    assert register["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/RegionRegister"
    )
    infer = document["paths"]["/v2/models/{model}/infer"]["post"]
    body = infer["requestBody"]["content"]
    assert body["application/json"]["schema"] == {"$ref": "#/components/schemas/InferenceRequest"}
    ok = infer["responses"]["200"]
    assert ok["content"]["application/json"]["schema"]["$ref"].endswith("/InferenceResponse")


def test_streams_and_the_binary_extension_are_described() -> None:
    paths = inference_description(INFERENCE_ROUTES)["paths"]
    for path in ("/v2/models/{model}/infer_stream", "/v2/models/{model}/generate_stream"):
        content = paths[path]["post"]["responses"]["200"]["content"]
        assert set(content) == {"text/event-stream"}
        event = content["text/event-stream"]["schema"]
        assert event["required"] == ["data"]
        assert event["properties"]["data"]["contentMediaType"] == "application/json"
    infer = paths["/v2/models/{model}/versions/{version}/infer"]["post"]
    header = [p for p in infer["parameters"] if p["in"] == "header"]
    assert [h["name"] for h in header] == ["Inference-Header-Content-Length"]
    assert "application/octet-stream" in infer["requestBody"]["content"]
    ok = infer["responses"]["200"]
    assert "application/octet-stream" in ok["content"]
    assert "Inference-Header-Content-Length" in ok["headers"]


def test_every_status_a_route_can_answer_is_listed() -> None:
    paths = inference_description(INFERENCE_ROUTES)["paths"]
    for ops in paths.values():
        for op in ops.values():
            assert {"401", "414", "431"} <= set(op["responses"]), op["operationId"]
    model_calls = [
        op
        for path, ops in paths.items()
        for op in ops.values()
        if path.endswith(("infer", "infer_stream", "generate", "generate_stream", ":predict"))
        or path.startswith("/predictions")
    ]
    model_calls += [paths[p]["post"] for p in ("/invocations", "/v1/chat/completions")]
    # OIP 8, TorchServe 9 (3 paths x POST, PUT, GET), Truss 3 (predict, invocations, chat)
    assert len(model_calls) == 20
    for op in model_calls:
        assert {"400", "404", "410", "413", "500", "503", "504"} <= set(op["responses"])
    management = management_description(MANAGEMENT_ROUTES)["paths"]
    for ops in management.values():
        for op in ops.values():  # the key, the browser guard's and the connection's refusals
            expected = {"401", "403", "414", "415", "421", "431"}
            assert expected <= set(op["responses"]), op["operationId"]


def test_path_parameters_follow_the_routes_convertors() -> None:
    paths = inference_description(INFERENCE_ROUTES)["paths"]
    ready = paths["/v1/models/{model}"]["get"]["parameters"][0]
    assert ready["schema"]["pattern"] == "^[^/:]+$"  # {model:noverb}
    predict = paths["/v1/models/{model}:predict"]["post"]["parameters"][0]
    assert predict["schema"]["pattern"] == "^[^/]+$"
    assert re.match(predict["schema"]["pattern"], "a:b") and not re.match(
        ready["schema"]["pattern"], "a:b"
    )


def test_describe_refuses_drift() -> None:
    table = RouteTable(
        [Route("GET", "/a/{x}", _noop_one, Api.OIP_REST, "a")], leading=("ex", "send")
    )
    ok = Operation("A.", {"200": response("OK.")})
    with pytest.raises(ValueError, match="'a' .* is not described"):
        describe(table, info={}, operations={}, path_params={"x": "X."}, components={})
    with pytest.raises(ValueError, match=r"\['b'\] are not in the route table"):
        describe(
            table, info={}, operations={"a": ok, "b": ok}, path_params={"x": "X."}, components={}
        )
    with pytest.raises(ValueError, match="path parameter"):
        describe(table, info={}, operations={"a": ok}, path_params={}, components={})
    document = describe(
        table, info={}, operations={"a": ok}, path_params={"x": "X."}, components={}
    )
    assert document["paths"]["/a/{x}"]["get"]["parameters"][0]["description"] == "X."


async def _noop_one(ex: Any, send: Any, x: str) -> None: ...


# -- served where MLServer and TorchServe serve theirs -----------------------------------------


async def call(app: Any, method: str, path: str) -> tuple[int, dict[str, str], bytes]:
    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [],
    }
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    start = sent[0]
    headers = {k.decode(): v.decode() for k, v in start["headers"]}
    return start["status"], headers, b"".join(m.get("body", b"") for m in sent[1:])


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/v2/docs/openapi.json"), ("OPTIONS", "/"), ("GET", "/api-description")],
)
def test_the_inference_listener_serves_its_document(method: str, path: str) -> None:
    status, headers, body = asyncio.run(call(HttpApp(None), method, path))  # type: ignore[arg-type]
    assert (status, headers["content-type"]) == (200, "application/json")
    assert json.loads(body) == json.loads(json.dumps(inference_description(INFERENCE_ROUTES)))


@pytest.mark.parametrize(("method", "path"), [("OPTIONS", "/"), ("GET", "/api-description")])
def test_the_management_listener_serves_its_document(method: str, path: str) -> None:
    status, _, body = asyncio.run(call(ManagementApp(None), method, path))  # type: ignore[arg-type]
    assert status == 200
    assert json.loads(body) == json.loads(json.dumps(management_description(MANAGEMENT_ROUTES)))


def test_other_methods_on_the_root_are_405() -> None:
    # OPTIONS: TorchServe's description; GET (and HEAD): Truss's liveness.
    for method in ("POST", "PUT", "DELETE"):
        status, headers, body = asyncio.run(call(HttpApp(None), method, "/"))  # type: ignore[arg-type]
        assert (status, headers["allow"]) == (405, "GET, OPTIONS, HEAD"), method
        assert json.loads(body) == {"error": f"/ does not accept {method}; use GET, OPTIONS, HEAD"}
    status, _, body = asyncio.run(call(HttpApp(None), "GET", "/"))  # type: ignore[arg-type]
    assert (status, body) == (200, b"true")


def test_the_docs_page_needs_nothing_from_outside() -> None:
    status, headers, body = asyncio.run(call(HttpApp(None), "GET", "/v2/docs"))  # type: ignore[arg-type]
    assert (status, headers["content-type"]) == (200, "text/html; charset=utf-8")
    page = body.decode()
    assert "<script>" in page and "openapi.json" in page
    assert not re.search(r"https?://|<script[^>]*\ssrc=|<link|@import|url\(", page)
    assert "innerHTML" not in page  # what the page shows is text, never markup


def test_the_two_listeners_describe_their_own_apis(examples_server: Server) -> None:
    """TorchServe's ``OPTIONS /``: each port answers the description of its own API."""
    inference = httpx.request("OPTIONS", examples_server.url + "/").json()
    assert inference == httpx.get(examples_server.url + "/v2/docs/openapi.json").json()
    assert "/v2/models/{model}/infer" in inference["paths"] and "/models" not in inference["paths"]
    management = httpx.request("OPTIONS", examples_server.management_url + "/").json()
    assert "/models" in management["paths"] and "/ping" not in management["paths"]
    assert httpx.get(examples_server.management_url + "/api-description").json() == management
    page = httpx.get(examples_server.url + "/v2/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")


# -- defects the fuzzing found ---------------------------------------------------------------


@pytest.mark.parametrize(
    "values",
    [
        {"min_worker": str(MAX_WORKERS + 1)},
        {"max_worker": "29191309"},
        {"min_worker": "1", "max_worker": str(10**12)},
    ],
)
def test_a_scale_request_for_absurdly_many_workers_is_a_400(values: dict[str, str]) -> None:
    """``PUT /models/echo?min_worker=29191309`` kept the server building instances and
    answering nothing else; now it is refused at once."""
    with pytest.raises(InvalidInput, match=f"at most {MAX_WORKERS}"):
        Scaling.parse(values)
    assert Scaling.parse({"min_worker": str(MAX_WORKERS)}).max_workers == MAX_WORKERS


@pytest.mark.parametrize("text", ["²", "٣", "1" * 5000])
def test_digits_int_refuses_are_a_400_not_a_500(text: str) -> None:
    """``GET /models?limit=²`` was a 500 (``str.isdigit`` takes "²", ``int`` does not; found
    by fuzzing); so were 5,000 digits (past ``int``'s limit on text)."""
    with pytest.raises(InvalidInput, match="limit must be an integer"):
        page({"limit": text})
    with pytest.raises(InvalidInput, match="min_worker must be an integer"):
        Scaling.parse({"min_worker": text})


def test_a_grpc_scale_and_a_registration_are_bounded_too() -> None:
    with pytest.raises(InvalidInput, match=f"at most {MAX_WORKERS}"):
        Scaling.parse({"min_worker": 1, "max_worker": MAX_WORKERS + 1, "synchronous": False})
    with pytest.raises(InvalidInput, match=f"at most {MAX_WORKERS}"):
        Registration.parse({"url": "x", "initial_workers": MAX_WORKERS + 1})
    assert Registration.parse({"url": "x", "initial_workers": 2}).initial_workers == 2


def test_an_unversioned_models_description_matches_its_schema() -> None:
    """``GET /models/echo`` answers ``"modelVersion": null`` for a model without versions;
    the description said a string."""
    described = management_description(MANAGEMENT_ROUTES)["components"]["schemas"]
    version = described["ModelDescription"]["items"]["properties"]["modelVersion"]
    assert "null" in version["type"]


@pytest.mark.parametrize("url", ["x" * 5000, "/" + "a" * 300, "file:///" + "b" * 300, "a\x00b"])
def test_a_url_no_file_can_have_is_not_found(url: str, tmp_path: Any) -> None:
    """``POST /models?url=xxx...`` (a name longer than the system allows) was a 500 with
    ``OSError: File name too long``; it is a 404 like any url that names nothing (where any
    local path may be registered; otherwise the place rule refuses it first, a 400)."""
    for store in (None, tmp_path):
        with pytest.raises(NotFound, match="not found"):
            UrlPolicy(RegistrationSettings(model_store=store, allow_any_local_path=True)).local(url)
        with pytest.raises((NotFound, InvalidInput)):
            UrlPolicy(RegistrationSettings(model_store=store)).local(url)
