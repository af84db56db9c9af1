"""OpenAPI 3.1 descriptions of the HTTP listeners, built from the route tables they dispatch on.

A listener's document is :func:`describe` of its :class:`~podium.server.http.RouteTable` and of
what a table does not know, written once per operation (:class:`Operation`, keyed by the
route's name): a summary, the query and header parameters, the request body and every status
the route can answer. Paths, methods, operation ids and path parameters come from the table
itself, and :func:`describe` refuses an operation the table lacks as much as a route nobody
described, so the document cannot drift from what is served. A route's other methods
(``predictionsPut``) share its description unless they have their own (``tokenGet``).

Message bodies that a msgspec type parses are described by that type (:func:`schemas`:
``msgspec.json.schema_components``, whose JSON Schema 2020-12 is OpenAPI 3.1's dialect).

The inference listener's operations are in ``server/http/_openapi.py``, the management
listener's in ``server/management/_openapi.py``; both serve their document as TorchServe does
(``OPTIONS /``, ``GET /api-description``), and the inference listener also at MLServer's place
(``GET /v2/docs/openapi.json``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:  # the listeners' packages import this module
    from .http import RouteTable

__all__ = [
    "BINARY",
    "DOCUMENT_SCHEMA",
    "OPENAPI",
    "TORCHSERVE_ERROR",
    "Operation",
    "body",
    "describe",
    "error_responses",
    "param",
    "ref",
    "response",
    "schemas",
]

#: A body of bytes (the binary tensor extension's, MessagePack's).
BINARY = {"type": "string", "format": "binary"}

#: The OpenAPI version of every document Podium serves.
OPENAPI = "3.1.0"

_COMPONENTS = "#/components/schemas/{name}"

#: The shape of an OpenAPI document, as the description routes answer it.
DOCUMENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "openapi": {"type": "string"},
        "info": {"type": "object"},
        "paths": {"type": "object"},
    },
    "required": ["openapi", "info", "paths"],
}

#: TorchServe's error body: the management API's, and the inference API's under /predictions.
TORCHSERVE_ERROR: dict[str, Any] = {
    "type": "object",
    "properties": {
        "code": {"type": "integer"},
        "type": {"type": "string", "description": "TorchServe's exception name."},
        "message": {"type": "string"},
    },
    "required": ["code", "type", "message"],
}


@dataclasses.dataclass(frozen=True, slots=True)
class Operation:
    """What a document says about one operation beyond its route.

    ``responses``: status (``"200"``, ``"default"``) to an OpenAPI response object (or a
    ``$ref`` to one); every status the route can answer is listed. ``parameters``: query and
    header parameters (path parameters come from the route). ``body``: the request body object.
    """

    summary: str
    responses: Mapping[str, Any]
    parameters: Sequence[Mapping[str, Any]] = ()
    body: Mapping[str, Any] | None = None
    description: str | None = None
    deprecated: bool = False

    def render(
        self, op_id: str, tag: str, path_params: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        out: dict[str, Any] = {"operationId": op_id, "summary": self.summary, "tags": [tag]}
        if self.description:
            out["description"] = self.description
        if self.deprecated:
            out["deprecated"] = True
        out["parameters"] = [*path_params, *self.parameters]
        if self.body is not None:
            out["requestBody"] = dict(self.body)
        out["responses"] = dict(self.responses)
        return out


def ref(name: str, kind: str = "schemas") -> dict[str, str]:
    """A ``$ref`` to ``components/<kind>/<name>``."""
    return {"$ref": f"#/components/{kind}/{name}"}


def param(
    name: str, where: str, schema: Mapping[str, Any], text: str, required: bool = False
) -> dict[str, Any]:
    """A parameter object (a path parameter is always required)."""
    return {
        "name": name,
        "in": where,
        "required": required or where == "path",
        "description": text,
        "schema": dict(schema),
    }


def response(
    text: str,
    schema: Mapping[str, Any] | None = None,
    media: str = "application/json",
    headers: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A response object: ``text``, and a body of ``media`` (``schema``: none given, any)."""
    out: dict[str, Any] = {"description": text}
    if headers:
        out["headers"] = dict(headers)
    out["content"] = {media: {"schema": dict(schema)} if schema is not None else {}}
    return out


def body(text: str, content: Mapping[str, Any], required: bool = False) -> dict[str, Any]:
    """A request body object: ``text``, and per media type of ``content`` its schema."""
    media = {kind: {"schema": dict(schema)} for kind, schema in content.items()}
    return {"description": text, "required": required, "content": media}


def error_responses(why: Mapping[str, str]) -> dict[str, Any]:
    """``components.responses``: ``Error<status>`` per status of ``why`` (its text), a body of
    the listener's ``Error`` schema, or text/plain where the connection's guard answers."""
    out = {f"Error{status}": response(text, ref("Error")) for status, text in why.items()}
    for status in ("414", "431"):  # the connection's guard answers these, before any app
        out[f"Error{status}"] = response(why[status], {"type": "string"}, "text/plain")
    return out


def schemas(types: Iterable[type]) -> dict[str, Any]:
    """``components.schemas`` for msgspec ``types`` (and every type they refer to): the JSON
    Schema that their decoders enforce, with ``$ref``s into the document's components."""
    _, components = msgspec.json.schema_components(tuple(types), ref_template=_COMPONENTS)
    return components


#: A path parameter's schema, by its convertor (``_routing``): a non-empty segment (a ``/``
#: sent as ``%2F`` is decoded before routing, so it never belongs to a value), and one without
#: ``':'``.
_CONVERTOR_SCHEMAS = {
    "str": {"type": "string", "pattern": "^[^/]+$"},
    "noverb": {"type": "string", "pattern": "^[^/:]+$"},
}


def describe(
    routes: RouteTable,
    *,
    info: Mapping[str, Any],
    operations: Mapping[str, Operation],
    path_params: Mapping[str, str],
    components: Mapping[str, Any],
    tags: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The OpenAPI document of every operation of ``routes``.

    ``operations``: per operation id (:meth:`RouteTable.operations`), what the table does not
    know (a route's later method without one takes the route's, its summary naming the
    method); ``path_params``: per path parameter name, its description. ``ValueError`` names
    an operation without a description, a description without an operation, or a path
    parameter nobody described: tests build each listener's document from its real table.
    """
    paths: dict[str, dict[str, Any]] = {}
    described: set[str] = set()
    for template, method, op_id, route in routes.operations():
        operation = operations.get(op_id)
        if operation is None and op_id != route.name and route.name in operations:
            shared = operations[route.name]
            summary = f"{shared.summary.removesuffix('.')} ({method})."
            operation = dataclasses.replace(shared, summary=summary)
        if operation is None:
            raise ValueError(f"operation {op_id!r} ({method} {template}) is not described")
        missing = [name for name in route.params if name not in path_params]
        if missing:
            raise ValueError(f"operation {op_id!r}: path parameter(s) {missing} not described")
        described.add(op_id)
        params = [
            param(name, "path", _CONVERTOR_SCHEMAS[convertor], path_params[name])
            for name, convertor in route.convertors.items()
        ]
        rendered = operation.render(op_id, route.protocol.value, params)
        paths.setdefault(template, {})[method.lower()] = rendered
    stray = sorted(set(operations) - described)
    if stray:
        raise ValueError(f"described operation(s) {stray} are not in the route table")
    document: dict[str, Any] = {"openapi": OPENAPI, "info": dict(info)}
    if tags:
        document["tags"] = [dict(tag) for tag in tags]
    document["paths"] = paths
    document["components"] = dict(components)
    return document
