"""The route tables of the HTTP listeners: every route is reachable, a wrong method is a 405
with the table's ``Allow``, unknown paths keep their 404 bodies, no two routes shadow each
other, and the compiled router agrees with a plain definition of the patterns.

The reference here is written independently of ``_routing``: one regular expression per route,
as Starlette compiles its ``Route`` paths, tried one after another.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import itertools
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from podium.dataplane import DataPlane
from podium.errors import MethodNotAllowed
from podium.server.http import (
    INFERENCE_ROUTES,
    Api,
    HttpApp,
    Route,
    RouteTable,
    _truss,
    _ts_explain,
)
from podium.server.http._routing import REMEMBERED, REMEMBERED_PATH
from podium.server.management import MANAGEMENT_ROUTES, ManagementApp
from podium.server.management._openapi import description
from podium.server.openai import _routes as _openai_routes
from podium.server.openai._errors import is_openai_path
from podium.types import WireProtocol

METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH")
_PARAM = re.compile(r"\{(\w+)(?::(!?[\w,]+))?\}")


@functools.cache
def reference_regex(path: str) -> re.Pattern[str]:
    """``path`` as Starlette would compile it, with ``noverb`` as "no ':' in the segment" and
    ``path`` as the rest of the path (non-empty: empty segments never match), and ``!a,b`` as
    "neither a nor b"."""
    out, last = "^", 0
    convertors = {"noverb": "[^/:]+", "path": ".+", None: "[^/]+"}
    for found in _PARAM.finditer(path):
        out += re.escape(path[last : found.start()])
        convertor = found[2]
        if convertor and convertor.startswith("!"):
            words = "|".join(re.escape(w) for w in convertor[1:].split(","))
            segment = f"(?!(?:{words})(?:/|$))[^/]+"
        else:
            segment = convertors[convertor]
        out += f"(?P<{found[1]}>{segment})"
        last = found.end()
    return re.compile(out + re.escape(path[last:]) + "$")


def normalized(path: str) -> str | None:
    """The inference listener's rule: one trailing '/' is ignored, an empty segment never
    matches."""
    if "//" in path:
        return None
    return path[:-1] if len(path) > 1 and path.endswith("/") else path


def reference(table: RouteTable, method: str, path: str) -> tuple[str, Any] | None:
    """``("found", (route, params))``, ``("405", allowed)`` or ``None``, by trying every
    route's regular expression; asserts that no path matches two different patterns."""
    norm = normalized(path)
    if norm is None:
        return None
    matches = [
        (r, m.groupdict()) for r in table for m in [reference_regex(r.path).match(norm)] if m
    ]
    assert len({r.path for r, _ in matches}) <= 1, f"{path} matches {[r.name for r, _ in matches]}"
    if not matches:
        return None
    for route, params in matches:
        if method in route.methods or (table.head and method == "HEAD" and "GET" in route.methods):
            return "found", (route, params)
    allowed = [m for route, _ in matches for m in route.methods]
    if table.head and "GET" in allowed:
        allowed.append("HEAD")
    return "405", tuple(allowed)


def expected_args(table: RouteTable, route: Route, params: dict[str, str]) -> tuple[Any, ...]:
    """The handler's arguments after the leading ones: by name from the path, the route's
    ``args``, the parameter's default."""
    names = list(inspect.signature(route.endpoint).parameters.values())[1 + len(table.leading) :]
    return tuple(
        params[p.name] if p.name in params else route.args.get(p.name, p.default) for p in names
    )


def example(route: Route, value: str = "m") -> str:
    """A path that reaches ``route``: every parameter filled with ``value``."""
    return _PARAM.sub(value, route.path)


def fill(pattern: str, values: tuple[str, ...]) -> str:
    """``pattern`` with its parameters replaced by ``values``, in order."""
    given = iter(values)
    return _PARAM.sub(lambda _: next(given), pattern)


def fillings(table: RouteTable | list[Route]) -> list[str]:
    """Values worth putting in a parameter: plain names, names with ':' and with a verb, and
    every fixed text of the table (where a parameter meets a fixed segment, shadowing hides)."""
    texts = {seg for r in table for seg in r.path.split("/") if seg and "{" not in seg}
    verbs = {m[0] for r in table for m in [re.search(r"\}(.+)$", r.path)] if m}
    return sorted(
        {"m", "a:b", "1.0", *texts, *(f"m{v}" for v in verbs), *(f"a:b{v}" for v in verbs)}
    )


def sample_paths(table: RouteTable) -> Iterator[str]:
    """Every route's pattern filled with every filling (capped), then shortened, lengthened,
    with a trailing '/', with an empty segment, and the root."""
    values = fillings(table)
    yield from ("/", "//", "/nope", "/nope/deeper", "*")
    for route in table:
        params = _PARAM.findall(route.path)
        for combo in itertools.islice(itertools.product(values, repeat=len(params)), 400):
            path = fill(route.path, combo)
            yield path
            yield path + "/"
            yield path + "//"
            yield path + "/extra"
            yield path.rsplit("/", 1)[0] or "/"
            yield path.replace("/", "//", 1)


TABLES = {
    "inference": (INFERENCE_ROUTES, lambda: HttpApp(None)),  # type: ignore[arg-type]
    "management": (MANAGEMENT_ROUTES, lambda: ManagementApp(None)),  # type: ignore[arg-type]
}


# -- the tables themselves ---------------------------------------------------------------------


@pytest.mark.parametrize("which", TABLES)
def test_the_compiled_router_agrees_with_the_reference_on_every_sample(which: str) -> None:
    table, make = TABLES[which]
    app = make()
    router = table.compile(app)
    checked = 0
    paths = list(set(sample_paths(table)))
    for path in paths + paths:  # twice: found by the walk, then as remembered (Router.match)
        for method in METHODS:
            want = reference(table, method, path)
            try:
                got: Any = router.match(method, path)
            except MethodNotAllowed as exc:
                assert want is not None and want[0] == "405", (method, path, want)
                assert exc.allowed == want[1], (method, path)
                assert method in exc.message
                checked += 1
                continue
            if want is None:
                assert got is None, (method, path, got)
            else:
                assert want[0] == "found", (method, path, want)
                route, params = want[1]
                handler, args = got
                assert handler == route.endpoint.__get__(app), (method, path, route.name)
                assert tuple(args) == expected_args(table, route, params), (method, path)
            checked += 1
    assert checked > 1000


@pytest.mark.parametrize("which", TABLES)
def test_every_route_is_reachable_by_its_methods_and_path(which: str) -> None:
    table, make = TABLES[which]
    app = make()
    router = table.compile(app)
    for route in table:
        for method in route.methods:
            found = router.match(method, example(route))
            assert found is not None, route
            handler, args = found
            assert handler == route.endpoint.__get__(app), route.name


def shadowing(routes: list[Route]) -> list[tuple[str, str, str]]:
    """``(name, name, path)`` for each two routes that one request reaches: a path of one
    (each parameter filled with every fixed text of the routes and more) that the other's
    pattern matches too, or one pattern with a method claimed twice."""
    values = fillings(routes)
    found = []
    for a, b in itertools.permutations(routes, 2):
        if a.path == b.path:
            if set(a.methods) & set(b.methods):
                found.append((a.name, b.name, a.path))
            continue
        for combo in itertools.islice(itertools.product(values, repeat=a.path.count("{")), 2000):
            path = fill(a.path, combo)
            if reference_regex(a.path).match(path) and reference_regex(b.path).match(path):
                found.append((a.name, b.name, path))
                break
    return found


@pytest.mark.parametrize("which", TABLES)
def test_no_two_routes_shadow_each_other(which: str) -> None:
    table, _ = TABLES[which]
    assert shadowing(list(table)) == []


def test_the_shadowing_check_finds_shadowing() -> None:
    """The check above would fail: a route that the tables' own check would refuse."""
    one = Route("GET", "/v2/models/{model}/{what}", HttpApp._model_metadata, Api.OIP_REST, "x")
    pairs = {(a, b) for a, b, _ in shadowing([*INFERENCE_ROUTES, one])}
    assert {("modelReady", "x"), ("modelInfer", "x"), ("x", "modelGenerateStream")} <= pairs
    twice = Route(
        ("PUT", "DELETE"), "/predictions/{model}", HttpApp._torchserve, Api.TORCHSERVE_REST, "y"
    )
    assert ("predictions", "y", "/predictions/{model}") in shadowing([*INFERENCE_ROUTES, twice])


def test_the_inference_table_covers_the_four_apis() -> None:
    assert {r.protocol for r in INFERENCE_ROUTES} == {
        Api.OIP_REST,
        Api.TRUSS,
        Api.TORCHSERVE_REST,
        Api.OPENAI,
    }
    assert {r.protocol for r in MANAGEMENT_ROUTES} == {Api.MANAGEMENT}
    # one label for a route and its calls: the inference APIs are the HTTP wire protocols
    assert {r.protocol.wire for r in INFERENCE_ROUTES} == {
        WireProtocol.OIP_REST,
        WireProtocol.TRUSS,
        WireProtocol.TORCHSERVE_REST,
        WireProtocol.OPENAI,
    }
    assert Api.MANAGEMENT.wire is None
    names = [r.name for r in (*INFERENCE_ROUTES, *MANAGEMENT_ROUTES)]
    assert len(names) == len(set(names))


# -- over ASGI: 405 with Allow, 404 bodies, HEAD ---------------------------------------------------


async def call(app: Any, method: str, path: str) -> tuple[int, dict[str, str], bytes]:
    """One request through the ASGI app: status, headers, body."""
    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [(b"host", b"localhost")],
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


def wrong_methods(table: RouteTable, route: Route) -> list[str]:
    allowed = table.allowed(route.path)
    return [m for m in METHODS if m not in allowed]


@pytest.mark.parametrize("which", TABLES)
def test_a_wrong_method_is_405_with_the_tables_allow(which: str) -> None:
    table, make = TABLES[which]
    app = make()

    async def run() -> None:
        for route in table:
            allow = ", ".join(table.allowed(route.path))
            for method in wrong_methods(table, route):
                status, headers, body = await call(app, method, example(route))
                assert (status, headers["allow"]) == (405, allow), (method, route.name)
                answer = json.loads(body)
                # TorchServe's paths answer in TorchServe's shape (issue 12, item 19)
                ts_paths = ("/predictions", "/explanations")
                if which == "inference" and is_openai_path(route.path):
                    assert set(answer) == {"error"} and method in answer["error"]["message"]
                    assert answer["error"]["type"] == "invalid_request_error"
                elif which == "inference" and not route.path.startswith(ts_paths):
                    assert set(answer) == {"error"} and method in answer["error"]
                else:
                    assert answer["type"] == "MethodNotAllowedException"
                    assert answer["code"] == 405 and method in answer["message"]

    asyncio.run(run())


def test_allow_lists_are_todays() -> None:
    """What the existing end-to-end tests pin, read from the table."""
    allowed = {r.path: INFERENCE_ROUTES.allowed(r.path) for r in INFERENCE_ROUTES}
    assert allowed["/v2"] == ("GET", "HEAD")
    assert allowed["/ping"] == ("GET", "POST", "HEAD")
    # TorchServe runs the handler on GET too (issue 12, item 19)
    assert allowed["/predictions/{model}/{version}"] == ("POST", "PUT", "GET", "HEAD")
    assert allowed["/predictions/{model}/{version}/{url_path:path}"] == (
        "POST",
        "PUT",
        "GET",
        "HEAD",
    )
    assert allowed["/v1/models/{model}:predict"] == ("POST",)
    assert allowed["/v2/models/{model}/versions/{version}/generate_stream"] == ("POST",)
    management = {r.path: MANAGEMENT_ROUTES.allowed(r.path) for r in MANAGEMENT_ROUTES}
    assert management["/"] == ("OPTIONS",)
    assert management["/models"] == ("GET", "POST")
    assert management["/models/{model_name}/{model_version}"] == ("GET", "PUT", "DELETE")
    assert management["/token"] == ("POST", "GET")  # no HEAD: the management API has none


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/nope"),
        ("GET", "/v2/nope"),
        ("POST", "/v2/models/m/explain"),
        ("POST", "/v2/models//infer"),
        ("POST", "/v2/models/m/infer//"),
        ("GET", "/v2/models/m/versions"),
        ("POST", "/v1/models/m:explain"),
        ("POST", "/v1/models/:predict"),
        ("GET", "/v1/models/a:b"),
        ("POST", "/predictions"),
        ("POST", "/predictions/m/1//extra"),
        ("DELETE", "/nope/m/1/extra"),
    ],
)
def test_unknown_inference_paths_keep_their_404_body(method: str, path: str) -> None:
    # a real (empty) data plane: an unknown path is offered to models' own routes first
    status, headers, body = asyncio.run(call(HttpApp(DataPlane()), method, path))
    assert (status, headers["content-type"]) == (404, "application/json")
    message = f"no route for {method} {path}"
    if path.startswith("/predictions"):  # TorchServe's shape there
        assert json.loads(body) == {
            "code": 404,
            "type": "ResourceNotFoundException",
            "message": message,
        }
    else:
        assert json.loads(body) == {"error": message}


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/nothing"), ("GET", "/models/m/1/other"), ("GET", "/models/m/1/set-default/x")],
)
def test_unknown_management_paths_keep_their_404_body(method: str, path: str) -> None:
    status, _, body = asyncio.run(call(ManagementApp(None), method, path))  # type: ignore[arg-type]
    assert status == 404
    assert json.loads(body) == {
        "code": 404,
        "type": "ResourceNotFoundException",
        "message": f"no management route for {method} {path}",
    }


def test_head_follows_get_on_the_inference_listener_only() -> None:
    router = INFERENCE_ROUTES.compile(app := HttpApp(None))  # type: ignore[arg-type]
    assert router.match("HEAD", "/v2/health/live") == router.match("GET", "/v2/health/live")
    # OpenAI's model object, or Truss's readiness (server/openai/_routes.py decides)
    assert router.match("HEAD", "/v1/models/m") == (_openai_routes.model.__get__(app), ("m",))
    with pytest.raises(MethodNotAllowed):
        MANAGEMENT_ROUTES.compile(ManagementApp(None)).match("HEAD", "/models")  # type: ignore[arg-type]


def test_paths_that_routing_splits_with_care() -> None:
    app = HttpApp(None)  # type: ignore[arg-type]
    match = INFERENCE_ROUTES.compile(app).match
    predict = _truss.predict.__get__(app)
    assert match("POST", "/v1/models/a:b:predict") == (predict, ("a:b",))
    assert match("POST", "/v1/models/a:predict_binary") == (predict, ("a",))
    assert match("POST", "/v1/models/a:predict:predict_binary") == (predict, ("a:predict",))
    assert match("GET", "/v1/models/a:b/schema") == (_truss.schema.__get__(app), ("a:b",))
    assert match("POST", "/v2/models/a:b/versions/1/infer") == (app._oip, ("a:b", "1", "infer"))
    assert match("GET", "/v2/models/versions/ready") == (app._model_ready, ("versions", None))
    assert match("GET", "/v2/models/m/versions/ready") == (app._model_metadata, ("m", "ready"))
    # (the last argument: not an explanation, the parameter's default)
    assert match("PUT", "/predictions/m/") == (app._torchserve, ("m", None, "", False))
    assert match("POST", "/predictions/m//") is None
    # TorchServe's url_path: the segments after the version, '/' included (issue 12, item 19)
    assert match("POST", "/predictions/m/1/a") == (app._torchserve, ("m", "1", "a", False))
    assert match("GET", "/predictions/m/1/a/b:c/d/") == (
        app._torchserve,
        ("m", "1", "a/b:c/d", False),
    )
    # /explanations: the same segments (issue 22)
    explain = _ts_explain.explanations.__get__(app)
    assert match("POST", "/explanations/m") == (explain, ("m", None, ""))
    assert match("PUT", "/explanations/m/1/a/b") == (explain, ("m", "1", "a/b"))
    assert match("POST", "/predictions/m/1/a//b") is None
    management = ManagementApp(None)  # type: ignore[arg-type]
    status, _, body = asyncio.run(call(management, "OPTIONS", "//"))  # empty segments dropped
    assert status == 200 and json.loads(body)["openapi"].startswith("3.")


def test_a_router_remembers_the_paths_it_found_in_a_bounded_memory() -> None:
    app = HttpApp(None)  # type: ignore[arg-type]
    router = INFERENCE_ROUTES.compile(app)
    found = router.match("POST", "/v2/models/m/infer")
    assert found == (app._oip, ("m", None, "infer"))
    assert router.match("POST", "/v2/models/m/infer") is found  # remembered
    for _ in range(2):  # a 405 and a 404 are never remembered: the same answer each time
        with pytest.raises(MethodNotAllowed):
            router.match("GET", "/v2/models/m/infer")
        assert router.match("POST", "/nowhere") is None
    for n in range(REMEMBERED + 10):  # clients' paths never grow the memory past REMEMBERED
        assert router.match("POST", f"/v2/models/m{n}/infer") == (
            app._oip,
            (f"m{n}", None, "infer"),
        )
        assert len(router._found) <= REMEMBERED
    long = "/v2/models/" + "m" * REMEMBERED_PATH + "/infer"
    assert router.match("POST", long) == (app._oip, ("m" * REMEMBERED_PATH, None, "infer"))
    assert ("POST", long) not in router._found  # a long path is found, not remembered


# -- the management description is the table's ------------------------------------------------


def test_the_management_description_has_exactly_the_tables_operations() -> None:
    document = description(MANAGEMENT_ROUTES)
    described = {
        (path, method.upper()) for path, ops in document["paths"].items() for method in ops
    }
    served = {(r.path, m) for r in MANAGEMENT_ROUTES for m in r.methods}
    assert described == served
    ids = [op["operationId"] for ops in document["paths"].values() for op in ops.values()]
    assert len(ids) == len(set(ids))
    for path, ops in document["paths"].items():
        named = {p["name"] for op in ops.values() for p in op["parameters"] if p["in"] == "path"}
        assert named == set(_PARAM.findall(path) and [n for n, _ in _PARAM.findall(path)])


def test_options_root_answers_the_description() -> None:
    status, _, body = asyncio.run(call(ManagementApp(None), "OPTIONS", "/"))  # type: ignore[arg-type]
    assert status == 200
    assert json.loads(body) == json.loads(json.dumps(description(MANAGEMENT_ROUTES)))


# -- what a table refuses ------------------------------------------------------------------------


class Handlers:
    async def one(self, ex: Any, send: Any, model: str) -> None: ...

    async def two(self, ex: Any, send: Any, model: str, version: str | None) -> None: ...

    async def none(self, ex: Any, send: Any) -> None: ...


def table(*routes: Route, head: bool = True) -> RouteTable:
    return RouteTable(routes, leading=("ex", "send"), head=head)


API = Api.OIP_REST


@pytest.mark.parametrize(
    ("routes", "words"),
    [
        (
            [
                Route("GET", "/a/{model}", Handlers.one, API, "x"),
                Route("GET", "/a/b", Handlers.none, API, "y"),
            ],
            "match the same paths",
        ),
        (
            [
                Route("GET", "/a/{model}", Handlers.one, API, "x"),
                Route("POST", "/a/{model}:run", Handlers.one, API, "y"),
            ],
            "match the same paths",
        ),
        (
            [
                Route("GET", "/a/{model}:go", Handlers.one, API, "x"),
                Route("POST", "/a/{model}o", Handlers.one, API, "y"),
            ],
            "match the same paths",
        ),
        (
            [
                Route("GET", "/{model}/b", Handlers.one, API, "x"),
                Route("GET", "/a/b", Handlers.none, API, "y"),
            ],
            "match the same paths",
        ),
        (
            [
                Route("GET", "/a/{model}", Handlers.one, API, "x"),
                Route("GET", "/a/{model}", Handlers.one, API, "y"),
            ],
            "both claim GET",
        ),
        (
            [
                Route("GET", "/a", Handlers.none, API, "x"),
                Route("POST", "/b", Handlers.none, API, "x"),
            ],
            "used twice",
        ),
        ([Route("GET", "/a/{model}", Handlers.two, API, "x")], "'version' is neither in the path"),
        ([Route("GET", "/a/{model}/{other}", Handlers.one, API, "x")], "takes no 'other'"),
        ([Route("GET", "/a", Handlers.none, API, "x", args={"extra": 1})], "takes no 'extra'"),
        ([Route("HEAD", "/a", Handlers.none, API, "x")], "HEAD follows GET"),
        ([Route("get", "/a", Handlers.none, API, "x")], "not upper case"),
        ([Route("GET", "/a/{model:int}", Handlers.one, API, "x")], "unknown convertor"),
        ([Route("GET", "/a/x{model}", Handlers.one, API, "x")], "must be fixed text"),
        ([Route("GET", "/a/", Handlers.none, API, "x")], "must not end with '/'"),
        ([Route("GET", "a", Handlers.none, API, "x")], "must start with '/'"),
        ([Route("GET", "/a", Route, API, "x")], "must take (ex, send, ...) first"),
        (
            [
                Route("GET", "/a/{model:path}", Handlers.one, API, "x"),
                Route("GET", "/a/b/c", Handlers.none, API, "y"),
            ],
            "match the same paths",
        ),
        (
            [
                Route("GET", "/a/{model:path}", Handlers.one, API, "x"),
                Route("POST", "/{model}/b/{version:path}", Handlers.two, API, "y"),
            ],
            "match the same paths",
        ),
        (
            [
                Route("GET", "/a/{model:path}", Handlers.one, API, "x"),
                Route("POST", "/a/{model}:run", Handlers.one, API, "y"),
            ],
            "match the same paths",
        ),
        ([Route("GET", "/a/{model:path}/b", Handlers.one, API, "x")], "only the last segment"),
        ([Route("GET", "/a/{model:path}.json", Handlers.one, API, "x")], "has no ending"),
    ],
)
def test_a_table_refuses_what_would_be_ambiguous_or_uncallable(
    routes: list[Route], words: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(words)):
        table(*routes)


def test_a_parameter_may_exclude_words_that_are_routes_of_their_own() -> None:
    """``{name:!a,b}`` matches any segment but those words, so that a fixed route beside it
    (``/v2/models/stats`` beside ``/v2/models/{model}``) does not overlap it."""
    routes = table(
        Route("GET", "/a/{model:!stats,all}", Handlers.one, API, "one"),
        Route("GET", "/a/stats", Handlers.none, API, "stats"),
        Route("POST", "/a/all", Handlers.none, API, "all"),
    )
    owner = Handlers()
    match = routes.compile(owner).match
    assert match("GET", "/a/x") == (owner.one, ("x",))
    assert match("GET", "/a/statsx") == (owner.one, ("statsx",))
    assert match("GET", "/a/stats") == (owner.none, ())
    with pytest.raises(MethodNotAllowed):
        match("GET", "/a/all")  # the word's own route answers, with its Allow
    assert reference_regex("/a/{model:!stats,all}").match("/a/stats") is None
    with pytest.raises(ValueError, match="match the same paths"):
        table(
            Route("GET", "/a/{model:!stats}", Handlers.one, API, "one"),
            Route("GET", "/a/other", Handlers.none, API, "other"),
        )
    with pytest.raises(ValueError, match="has no ending"):
        table(Route("GET", "/a/{model:!stats}:go", Handlers.one, API, "one"))


def test_patterns_that_only_look_alike_are_accepted() -> None:
    """A verb and a name without one, two different verbs, a parameter beside a fixed text it
    cannot be: none of these overlap, and each path finds its own route."""
    routes = table(
        Route("GET", "/a/{model:noverb}", Handlers.one, API, "bare"),
        Route("POST", "/a/{model}:run", Handlers.one, API, "run"),
        Route("POST", "/a/{model}:stop", Handlers.one, API, "stop"),
        Route("GET", "/", Handlers.none, API, "root"),
        Route("GET", "/{model}", Handlers.one, API, "top"),
        Route("GET", "/{model}/b/{version}", Handlers.two, API, "deep"),
        Route("GET", "/a/b/c/d", Handlers.none, API, "fixed"),
    )
    owner = Handlers()
    match = routes.compile(owner).match
    assert match("GET", "/a/x") == (owner.one, ("x",))
    assert match("POST", "/a/x:y:run") == (owner.one, ("x:y",))
    assert match("POST", "/a/x:stop") == (owner.one, ("x",))
    assert match("GET", "/a/x:walk") is None
    assert match("GET", "/") == (owner.none, ())
    assert match("GET", "/z") == (owner.one, ("z",))
    assert match("GET", "/z/b/2") == (owner.two, ("z", "2"))
    assert match("GET", "/a/b/c/d") == (owner.none, ())
    with pytest.raises(MethodNotAllowed) as refused:
        match("GET", "/a/x:run")
    assert refused.value.allowed == ("POST",)
    for path in ("//", "/a/c/d/e", "/a//x", "/z//", "/a/b/c/d/e"):
        assert match("GET", path) is None, path


def test_the_rest_of_a_path_is_one_parameter() -> None:
    """``{name:path}`` takes one or more segments, '/' included, and only where no pattern of a
    fixed length answers (they never overlap)."""
    routes = table(
        Route("GET", "/a/{model:path}", Handlers.one, API, "rest"),
        Route("GET", "/b/{model}/{version:path}", Handlers.two, API, "deep"),
        Route("GET", "/b/{model}", Handlers.one, API, "short"),
        Route("POST", "/c/{model}", Handlers.one, API, "fixed"),
    )
    owner = Handlers()
    match = routes.compile(owner).match
    assert match("GET", "/a/x") == (owner.one, ("x",))
    assert match("GET", "/a/x/y:z/w/") == (owner.one, ("x/y:z/w",))
    assert match("HEAD", "/a/x/y") == (owner.one, ("x/y",))
    assert match("GET", "/b/m") == (owner.one, ("m",))
    assert match("GET", "/b/m/1") == (owner.two, ("m", "1"))
    assert match("GET", "/b/m/1/2/3") == (owner.two, ("m", "1/2/3"))
    with pytest.raises(MethodNotAllowed) as refused:
        match("POST", "/a/x/y")
    assert refused.value.allowed == ("GET", "HEAD")
    for path in ("/a", "/a/", "/a//x", "/a/x//y", "/c/m/n", "/b"):
        assert match("GET", path) is None, path


class Truss:
    async def predict(self, ex: Any, send: Any, model: str, version: str | None = None) -> None: ...

    async def model(self, ex: Any, send: Any, model: str) -> None: ...

    async def plain(self, ex: Any, send: Any) -> None: ...

    async def binary(self, ex: Any, send: Any, model: str, binary: bool) -> None: ...


def test_truss_shaped_routes_beside_oip_ones() -> None:
    """The shapes of Truss's routes (verbs after the name, a name without a verb, a name's own
    segments, fixed paths beside parameters, the root) in one table with OIP's, each path to
    its own route, with its arguments and its 405."""
    truss = Api.TRUSS
    routes = RouteTable(
        [
            Route("GET", "/", Truss.plain, truss, "root"),
            Route("GET", "/v1/models/{model:noverb}", Truss.model, truss, "ready"),
            Route("POST", "/v1/models/{model}:predict", Truss.predict, truss, "predict"),
            Route(
                "POST",
                "/v1/models/{model}:predict_binary",
                Truss.binary,
                truss,
                "predictBinary",
                args={"binary": True},
            ),
            Route("GET", "/v1/models/{model}:websocket", Truss.model, truss, "websocket"),
            Route("GET", "/v1/models/{model}/loaded", Truss.model, truss, "loaded"),
            Route("GET", "/v1/models/{model}/schema", Truss.model, truss, "schema"),
            Route(
                "POST",
                "/v1/models/{model}/versions/{version}:predict",
                Truss.predict,
                truss,
                "versionPredict",
            ),
            Route("POST", "/v1/chat/completions", Truss.plain, truss, "chat"),
            Route("POST", "/v1/completions", Truss.plain, truss, "completions"),
            Route("POST", "/invocations", Truss.plain, truss, "invocations"),
            Route("GET", "/v1/websocket", Truss.plain, truss, "ws"),
            Route("GET", "/v2/models/stats", Truss.plain, API, "stats"),
            Route("GET", "/v2/models/{model:!stats}", Truss.model, API, "metadata"),
            Route("GET", "/v2/models/{model}/ready", Truss.model, API, "modelReady"),
        ],
        leading=("ex", "send"),
        head=True,
    )
    owner = Truss()
    match = routes.compile(owner).match
    assert match("GET", "/") == (owner.plain, ())
    assert match("GET", "/v1/models/m") == (owner.model, ("m",))
    assert match("HEAD", "/v1/models/m/") == (owner.model, ("m",))
    assert match("POST", "/v1/models/m:predict") == (owner.predict, ("m", None))
    assert match("POST", "/v1/models/a:b:predict") == (owner.predict, ("a:b", None))
    assert match("POST", "/v1/models/m:predict_binary") == (owner.binary, ("m", True))
    assert match("GET", "/v1/models/m:websocket") == (owner.model, ("m",))
    assert match("GET", "/v1/models/m/loaded") == (owner.model, ("m",))
    assert match("GET", "/v1/models/loaded/schema") == (owner.model, ("loaded",))
    assert match("POST", "/v1/models/m/versions/2:predict") == (owner.predict, ("m", "2"))
    assert match("POST", "/v1/chat/completions") == (owner.plain, ())
    assert match("POST", "/v1/completions") == (owner.plain, ())
    assert match("POST", "/invocations") == (owner.plain, ())
    assert match("GET", "/v1/websocket") == (owner.plain, ())
    assert match("GET", "/v2/models/stats") == (owner.plain, ())
    assert match("GET", "/v2/models/m") == (owner.model, ("m",))
    # 'stats' is a fixed text here and a model's name one segment further: both ways are kept
    assert match("GET", "/v2/models/stats/ready") == (owner.model, ("stats",))
    for path in (
        "/v1/models/m:explain",
        "/v1/models/:predict",
        "/v1/models/m/versions/2",
        "/v1/models",
        "/v1/chat",
        "/v2/models/m/versions",
        "/invocations/x",
        "//",
        "v1/completions",
    ):
        assert match("POST", path) is None, path
    for method, path, allowed in (
        ("GET", "/v1/models/m:predict", ("POST",)),
        ("POST", "/v1/models/m", ("GET", "HEAD")),
        ("GET", "/v1/chat/completions", ("POST",)),
        ("POST", "/", ("GET", "HEAD")),
        ("DELETE", "/v2/models/stats/ready", ("GET", "HEAD")),
    ):
        with pytest.raises(MethodNotAllowed) as refused:
            match(method, path)
        assert refused.value.allowed == allowed, (method, path)


def test_the_walk_goes_back_where_two_parameters_take_one_segment() -> None:
    """``x:go`` is both a plain name and a name with the verb: the walk tries one way to the
    end of the path, then the other."""
    routes = table(
        Route("GET", "/p/{model}/one", Handlers.one, API, "one"),
        Route("GET", "/p/{model}:go/two", Handlers.one, API, "two"),
        Route("GET", "/p/{model}/{version}/three", Handlers.two, API, "three"),
    )
    owner = Handlers()
    match = routes.compile(owner).match
    assert match("GET", "/p/x:go/one") == (owner.one, ("x:go",))
    assert match("GET", "/p/x:go/two") == (owner.one, ("x",))
    assert match("GET", "/p/x:go/y/three") == (owner.two, ("x:go", "y"))
    assert match("GET", "/p/x:go/three") is None
    names = routes.names().match
    assert names("GET", "/p/x:go/two")[0].name == "two"  # type: ignore[index]
