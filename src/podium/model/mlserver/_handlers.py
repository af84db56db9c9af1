"""An MLServer runtime's custom REST handlers (``@custom_handler``): which there are, and one
call of one with what an HTTP request carries, as MLServer's FastAPI app calls it.

MLServer hands the bound method to FastAPI (``add_api_route``), so its parameters are read as
FastAPI reads them; the forms runtimes use are supported here, without FastAPI:

- a parameter annotated with a Starlette ``Request`` (or a subclass) gets the request;
- a parameter named in the path (``rest_path="/greet/{who}"``) gets that segment;
- a body parameter (a default of FastAPI's ``Body(...)``, or annotated with a pydantic model,
  ``list`` / ``dict`` or a generic of them) gets the JSON body (gzip-decoded if the request says
  ``Content-Encoding: gzip``, as MLServer's request does), validated against its annotation; one
  body parameter takes the whole body, several take its members of their names;
- any other parameter is a query parameter, validated against its annotation.

The raw request is an opaque object here (a Starlette ``Request`` made by the front end).
"""

from __future__ import annotations

import gzip
import inspect
import typing
from typing import Any

import msgspec

from ...codecs import JSON_ERRORS, json_problem
from ...errors import InvalidInput
from ...types import HandlerRoute
from ..native import _hints

__all__ = ["call_arguments", "handler_routes", "rendered"]

#: The attribute MLServer's ``custom_handler`` (and Podium's) sets on the method.
HANDLER_ATTRIBUTE = "__custom_handler__"

_BODY_TYPES = (list, dict, set, tuple)


def handler_routes(runtime: Any) -> tuple[HandlerRoute, ...]:
    """The custom handlers of ``runtime``'s class, by method name (MLServer's order)."""
    routes = []
    cls = type(runtime)
    for name in sorted(dir(cls)):
        handler = getattr(getattr(cls, name, None), HANDLER_ATTRIBUTE, None)
        if handler is not None:
            method = str(getattr(handler, "rest_method", "POST")).upper()
            routes.append(HandlerRoute(method, str(handler.rest_path), name))
    return tuple(routes)


def _names(annotation: Any) -> set[str]:
    return {c.__name__ for c in getattr(annotation, "__mro__", ())}


def _is_request(annotation: Any) -> bool:
    return "HTTPConnection" in _names(annotation)


def _is_body(parameter: inspect.Parameter, annotation: Any) -> bool:
    if "Body" in _names(type(parameter.default)):  # fastapi.Body(...)
        return True
    if "BaseModel" in _names(annotation):
        return True
    return (typing.get_origin(annotation) or annotation) in _BODY_TYPES


def _validated(name: str, annotation: Any, value: Any, where: str) -> Any:
    if annotation is inspect.Parameter.empty or annotation is Any:
        return value
    from pydantic import TypeAdapter, ValidationError

    try:
        return TypeAdapter(annotation).validate_python(value, strict=False)
    except ValidationError as exc:
        problems = "; ".join(f"{e['msg']}" for e in exc.errors())
        raise InvalidInput(f"{where} '{name}' is not valid: {problems}") from exc


def _default(parameter: inspect.Parameter) -> Any:
    """The parameter's default (a FastAPI marker's own), or ``empty`` when it is required."""
    default = parameter.default
    marker = getattr(default, "default", inspect.Parameter.empty)
    if "FieldInfo" in _names(type(default)):
        default = marker
    if default is Ellipsis or "PydanticUndefinedType" in _names(type(default)):
        return inspect.Parameter.empty
    return default


async def call_arguments(method: Any, request: Any, path_params: dict[str, str]) -> dict[str, Any]:
    """The keyword arguments of one call of the bound handler ``method``."""
    signature = inspect.signature(method)
    hints = _hints(method)  # where an annotation does not resolve: as written
    bodies = []
    arguments: dict[str, Any] = {}
    for name, parameter in signature.parameters.items():
        annotation = hints.get(name, parameter.annotation)
        if _is_request(annotation):
            arguments[name] = request
        elif name in path_params:
            arguments[name] = _validated(name, annotation, path_params[name], "path parameter")
        elif _is_body(parameter, annotation):
            bodies.append((name, parameter, annotation))
        else:
            value = request.query_params.get(name)
            if value is not None:
                arguments[name] = _validated(name, annotation, value, "query parameter")
            elif _default(parameter) is inspect.Parameter.empty:
                raise InvalidInput(f"query parameter '{name}' is required")
    if bodies:
        body = await _json_body(request)
        for name, parameter, annotation in bodies:
            if len(bodies) == 1:
                value = body
            elif isinstance(body, dict) and name in body:
                value = body[name]
            else:
                value = None
            if value is None:
                default = _default(parameter)
                if default is inspect.Parameter.empty:
                    raise InvalidInput(f"the body must hold '{name}'")
                arguments[name] = default
            else:
                arguments[name] = _validated(name, annotation, value, "body field")
    return arguments


async def _json_body(request: Any) -> Any:
    data = await request.body()
    if "gzip" in request.headers.getlist("content-encoding"):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as exc:
            raise InvalidInput(f"the body says it is gzip but is not: {exc}") from exc
    if not data:
        return None
    try:
        return msgspec.json.decode(data)
    except JSON_ERRORS as exc:
        raise InvalidInput(f"the body is not JSON: {json_problem(exc, data)}") from exc


def rendered(result: Any) -> Any:
    """A handler's return value as the front end sends it: a pydantic model as its JSON data
    (unset and ``None`` fields left out, as MLServer's routes answer); anything else as it is
    (a Starlette ``Response`` is sent as it is, other values as JSON)."""
    dump = getattr(result, "model_dump", None)
    if callable(dump) and not isinstance(result, type):
        return dump(mode="json", exclude_unset=True, exclude_none=True)
    return result
