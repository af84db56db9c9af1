"""A declarative route table: what an HTTP listener serves, written once.

A :class:`Route` says which methods and which path pattern reach which handler, for which API
(:class:`Api`) and under which name. A :class:`RouteTable` checks its routes when it is built
(no request can match two patterns, two routes never claim one method of a pattern, every
handler parameter has a source) and is then the one source of dispatch
(:meth:`RouteTable.compile`), of ``405`` answers with their ``Allow`` header, and of API
descriptions (:meth:`RouteTable.operations`), so none of them can drift from the others.

Patterns follow Starlette's, one parameter per segment at most (and one of them at most with
a convertor or an ending)::

    /v2/models/{model}/versions/{version}/infer    {name}         any non-empty segment
    /v1/models/{model:noverb}                      {name:noverb}  one that holds no ':'
    /v1/models/{model}:predict                     {name}text     one that ends with text
    /predictions/{model}/{version}/{rest:path}     {name:path}    the rest of the path: one or
                                                                  more segments, '/' included
                                                                  (the last segment only)
    /v2/models/{model:!stats}                      {name:!a,b}    any but these words (so that
                                                                  /v2/models/stats can be a
                                                                  route of its own)

A handler is called as ``handler(a, b, *args)``: ``a`` and ``b`` are what the app passes every
handler (the table's ``leading`` names, e.g. ``ex, send``); ``args`` fill the handler's other
parameters by name, from the path's parameters, else the route's ``args`` (constants, as in
Django's ``path(kwargs=...)``), else the parameter's default.

Dispatch costs no framework and no scan of the routes: :class:`Router` compiles the table into
one function that tests a path's segments the way a hand-written router would.
"""

from __future__ import annotations

import enum
import inspect
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import MethodNotAllowed
from ...types import WireProtocol

__all__ = ["Api", "Route", "RouteTable", "Router"]

Handler = Callable[..., Any]
#: What :attr:`Router.match` finds: the handler (bound to the app) and its route arguments.
Found = tuple[Handler, tuple[Any, ...]]

_PARAM = re.compile(r"^\{([A-Za-z_][A-Za-z0-9_]*)(?::([A-Za-z_]+|![A-Za-z0-9_.,-]+))?\}(.*)$")
_CONVERTORS = ("str", "noverb", "path")
_METHOD = re.compile(r"^[A-Z]+$")


class Api(enum.Enum):
    """The API (protocol) a route belongs to; descriptions and metrics group routes by it.

    The APIs that carry inference calls have the value of the calls' :class:`WireProtocol`
    (:attr:`wire`), so a route and the calls it serves carry one ``protocol`` label.
    """

    OIP_REST = "oip_rest"  # Open Inference Protocol v2, REST
    TRUSS = "truss"  # Truss-style /v1/models/{m}:predict
    TORCHSERVE_REST = "torchserve_rest"  # TorchServe's inference API
    MANAGEMENT = "management"  # TorchServe's management API (and its token API)

    @property
    def wire(self) -> WireProtocol | None:
        """The protocol of the calls this API's routes make (``None``: they make none)."""
        return _WIRE.get(self.value)


_WIRE = {protocol.value: protocol for protocol in WireProtocol}


class Route:
    """One entry of a route table: ``methods`` on ``path`` reach ``endpoint``.

    ``endpoint`` is a function; a table compiled for an app binds it to the app (a method
    written in the app's class). ``name`` is unique in its table and is the operation's id in
    an API description. ``args`` are constants for handler parameters the path does not give.
    """

    __slots__ = ("methods", "path", "endpoint", "protocol", "name", "args")

    def __init__(
        self,
        methods: str | Iterable[str],
        path: str,
        endpoint: Handler,
        protocol: Api,
        name: str,
        *,
        args: Mapping[str, Any] | None = None,
    ) -> None:
        self.methods: tuple[str, ...] = (methods,) if isinstance(methods, str) else tuple(methods)
        self.path = path
        self.endpoint = endpoint
        self.protocol = protocol
        self.name = name
        self.args: Mapping[str, Any] = dict(args or {})

    def __repr__(self) -> str:
        methods = ", ".join(self.methods)
        return f"Route({methods} {self.path} -> {self.name}, {self.protocol.value})"

    @property
    def params(self) -> tuple[str, ...]:
        """The names of the path's parameters, in order."""
        return tuple(s.param for s in _segments(self.path) if s.param is not None)

    @property
    def convertors(self) -> dict[str, str]:
        """Each path parameter's convertor (``str`` or ``noverb``), by name."""
        return {
            s.param: "noverb" if s.noverb else "str"
            for s in _segments(self.path)
            if s.param is not None
        }

    @property
    def template(self) -> str:
        """The path with its parameters as ``{name}`` (OpenAPI's form): no convertors."""
        return "/".join(s.template for s in _segments(self.path))


@dataclass(frozen=True, slots=True)
class _Segment:
    """One ``/``-separated piece of a pattern: fixed ``text``, or a parameter ending in it;
    ``rest``: the parameter takes the rest of the path (``{name:path}``, the last segment)."""

    text: str
    param: str | None = None
    noverb: bool = False
    rest: bool = False
    excluded: tuple[str, ...] = ()  # words the parameter is never ({name:!a,b})

    @property
    def template(self) -> str:
        return self.text if self.param is None else "{" + self.param + "}" + self.text

    def accepts(self, value: str) -> bool:
        """Whether a path segment ``value`` matches this one."""
        if self.param is None:
            return value == self.text
        if self.rest:
            return bool(value)
        if len(value) <= len(self.text) or not value.endswith(self.text):
            return False
        if value in self.excluded:
            return False
        return not (self.noverb and ":" in value)

    def overlaps(self, other: _Segment) -> bool:
        """Whether some path segment matches both."""
        if self.param is None or other.param is None:
            fixed, pattern = (self, other) if self.param is None else (other, self)
            return pattern.accepts(fixed.text)
        if self.rest or other.rest:
            return True  # the rest takes any segment, and every parameter accepts one
        # Two parameters: a value ends with both texts only if one text ends with the other;
        # the shortest candidate then also holds no ':' beyond the longer text's.
        longer, shorter = sorted((self.text, other.text), key=len, reverse=True)
        if not longer.endswith(shorter):
            return False
        value = "x" + longer
        while value in self.excluded or value in other.excluded:  # finitely many
            value = "x" + value
        return self.accepts(value) and other.accepts(value)


def _segments(path: str) -> tuple[_Segment, ...]:
    if not path.startswith("/"):
        raise ValueError(f"route path {path!r} must start with '/'")
    if path != "/" and path.endswith("/"):
        raise ValueError(f"route path {path!r} must not end with '/' (one is ignored anyway)")
    out = []
    for text in path.split("/"):
        if "{" not in text and "}" not in text:
            out.append(_Segment(text))
            continue
        found = _PARAM.match(text)
        if found is None or "{" in found[3] or "}" in found[3]:
            raise ValueError(
                f"route path {path!r}: segment {text!r} must be fixed text or "
                "'{name}', '{name:convertor}', optionally followed by fixed text"
            )
        name, convertor, suffix = found[1], found[2] or "str", found[3]
        if convertor.startswith("!"):
            if suffix:
                raise ValueError(f"route path {path!r}: a {{name:!words}} segment has no ending")
            out.append(_Segment("", name, excluded=tuple(convertor[1:].split(","))))
            continue
        if convertor not in _CONVERTORS:
            raise ValueError(
                f"route path {path!r}: unknown convertor {convertor!r} "
                f"(known: {', '.join(_CONVERTORS)})"
            )
        if convertor in ("noverb", "path") and suffix:
            raise ValueError(f"route path {path!r}: a {{name:{convertor}}} segment has no ending")
        out.append(_Segment(suffix, name, convertor == "noverb", convertor == "path"))
    if any(s.rest for s in out[:-1]):
        raise ValueError(f"route path {path!r}: only the last segment may be {{name:path}}")
    if sum(1 for s in out if s.param is not None and (s.text or s.noverb or s.excluded)) > 1:
        raise ValueError(
            f"route path {path!r}: one parameter at most may have an ending or a convertor"
        )
    return tuple(out)


def _overlap(a: tuple[_Segment, ...], b: tuple[_Segment, ...]) -> bool:
    if not a[-1].rest and not b[-1].rest:
        return len(a) == len(b) and all(x.overlaps(y) for x, y in zip(a, b, strict=True))
    if not a[-1].rest:
        a, b = b, a  # a ends with the rest of the path: it matches len(a) segments or more
    if len(b) < len(a) and not b[-1].rest:
        return False
    # Up to the shorter one's rest, segment by segment; beyond it, the rest takes anything.
    shared = min(len(a), len(b)) - 1
    return all(x.overlaps(y) for x, y in zip(a[:shared], b[:shared], strict=True))


class RouteTable:
    """A checked, ordered list of routes for one listener.

    ``head``: HEAD is served wherever GET is (by the GET handler; the server sends no body) and
    listed last in ``Allow``. ``leading``: the names of the parameters the app passes every
    handler first (after ``self``). Anything inconsistent is a ``ValueError`` here, at import
    time of the module that declares the table, never at request time.
    """

    def __init__(
        self, routes: Iterable[Route], *, leading: tuple[str, str], head: bool = False
    ) -> None:
        self.routes = tuple(routes)
        self.leading = leading
        self.head = head
        self._patterns = {route.path: _segments(route.path) for route in self.routes}
        self._check()

    def __iter__(self) -> Iterator[Route]:
        return iter(self.routes)

    def __len__(self) -> int:
        return len(self.routes)

    def _check(self) -> None:
        names: set[str] = set()
        claimed: dict[tuple[str, str], Route] = {}
        for route in self.routes:
            if route.name in names:
                raise ValueError(f"route name {route.name!r} is used twice")
            names.add(route.name)
            if not route.methods:
                raise ValueError(f"route {route.name!r} has no method")
            for method in route.methods:
                if not _METHOD.match(method):
                    raise ValueError(f"route {route.name!r}: method {method!r} is not upper case")
                if self.head and method == "HEAD":
                    raise ValueError(f"route {route.name!r}: HEAD follows GET in this table")
                other = claimed.setdefault((route.path, method), route)
                if other is not route:
                    raise ValueError(
                        f"routes {other.name!r} and {route.name!r} both claim {method} {route.path}"
                    )
            params = route.params
            if len(set(params)) != len(params):
                raise ValueError(f"route {route.name!r} names a parameter twice: {route.path}")
            _plan(route, self.leading)
        # Two different patterns that one path can match would make the answer (and the
        # 405's Allow) depend on the order of the table: refuse them.
        routes = list(self.routes)
        for i, a in enumerate(routes):
            for b in routes[i + 1 :]:
                if a.path != b.path and _overlap(self._patterns[a.path], self._patterns[b.path]):
                    raise ValueError(
                        f"routes {a.name!r} ({a.path}) and {b.name!r} ({b.path}) "
                        "match the same paths"
                    )

    def allowed(self, path: str) -> tuple[str, ...]:
        """The methods a pattern ``path`` (as written in the table) answers, as ``Allow``
        lists them."""
        methods = [m for route in self.routes if route.path == path for m in route.methods]
        if self.head and "GET" in methods:
            methods.append("HEAD")
        return tuple(methods)

    def operations(self) -> Iterator[tuple[str, str, str, Route]]:
        """``(template, method, operation id, route)`` for each method of each route, in
        table order (HEAD left out): an API description's operations. The id is the route's
        name for its first method, the name and the method (``tokenGet``) for the others."""
        for route in self.routes:
            for i, method in enumerate(route.methods):
                op_id = route.name if i == 0 else route.name + method.capitalize()
                yield route.template, method, op_id, route

    def compile(self, owner: object = None) -> Router:
        """The table as a :class:`Router`, its endpoints bound to ``owner`` (the app)."""
        return Router(self, owner)


def _plan(route: Route, leading: tuple[str, str]) -> tuple[tuple[str, bool, Any], ...]:
    """How a route's handler is called, after the leading arguments: per parameter in the
    handler's order, ``(name, True, None)`` for a path parameter, ``(name, False, value)``
    for a constant (the route's ``args``, else the parameter's default)."""
    signature = inspect.signature(route.endpoint)
    parameters = list(signature.parameters.values())
    if parameters[:1] and parameters[0].name == "self":
        parameters = parameters[1:]
    if tuple(p.name for p in parameters[:2]) != leading:
        raise ValueError(
            f"route {route.name!r}: handler {route.endpoint.__qualname__} must take "
            f"({', '.join(leading)}, ...) first"
        )
    params = route.params
    plan: list[tuple[str, bool, Any]] = []
    for parameter in parameters[2:]:
        name = parameter.name
        if parameter.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD:
            raise ValueError(
                f"route {route.name!r}: handler parameter {name!r} must be a plain one "
                "(the arguments are passed by position)"
            )
        if name in params:
            plan.append((name, True, None))
        elif name in route.args:
            plan.append((name, False, route.args[name]))
        elif parameter.default is not inspect.Parameter.empty:
            plan.append((name, False, parameter.default))
        else:
            raise ValueError(
                f"route {route.name!r}: handler parameter {name!r} is neither in the path "
                f"{route.path} nor in the route's args"
            )
    taken = {name for name, _, _ in plan}
    unused = [p for p in params if p not in taken] + [a for a in route.args if a not in taken]
    if unused:
        raise ValueError(
            f"route {route.name!r}: handler {route.endpoint.__qualname__} takes no "
            f"{', '.join(repr(u) for u in unused)}"
        )
    return tuple(plan)


class _Node:
    """One pattern of a compiled table: its routes, its targets and its ``Allow``."""

    __slots__ = ("pattern", "routes", "targets", "allow")

    def __init__(self, pattern: tuple[_Segment, ...]) -> None:
        self.pattern = pattern
        self.routes: list[Route] = []
        #: method -> ``(handler, constant args)``: all of what :attr:`Router.match` answers
        #: for a pattern without parameters, and the handler of one with parameters.
        self.targets: dict[str, tuple[Handler, tuple[Any, ...]]] = {}
        self.allow: tuple[str, ...] = ()

    def refuse(self, method: str, path: str) -> MethodNotAllowed:
        allow = ", ".join(self.allow)
        return MethodNotAllowed(f"{path} does not accept {method}; use {allow}", self.allow)


class Router:
    """A compiled :class:`RouteTable`.

    ``match(method, path)`` answers the handler of ``method`` on ``path`` and its arguments;
    ``None`` if no pattern matches the path; raises ``MethodNotAllowed`` (with the pattern's
    ``Allow``) if one does but not with this method. One trailing ``/`` is ignored; an empty
    segment matches nothing.

    ``match`` runs for every request, so it is compiled, as Falcon's router is: the table
    becomes the source of one function (``source``) that splits the path once, tests its
    segment count, then its fixed segments one place at a time (a trie unrolled into ``if``
    statements), and answers the handler with its arguments built in one tuple. Nothing
    scans the routes, hashes the path or calls a helper per request: the generated code is
    what one would write by hand (``source`` shows it), and the tests hold it to a plain
    definition of the patterns (a regular expression per route) over many paths.
    """

    __slots__ = ("table", "match", "source")

    match: Callable[[str, str], Found | None]

    def __init__(self, table: RouteTable, owner: object = None) -> None:
        self.table = table
        nodes: dict[str, _Node] = {}
        for route in table.routes:
            node = nodes.get(route.path)
            if node is None:
                node = nodes[route.path] = _Node(table._patterns[route.path])
            node.routes.append(route)
            handler = route.endpoint
            if owner is not None:
                handler = handler.__get__(owner, type(owner))
            constants = tuple(value for _, from_path, value in _plan(route, table.leading))
            for method in route.methods:
                node.targets[method] = (handler, constants)  # the args, if no path parameter
        by_size: dict[int, list[_Node]] = {}
        at_least: dict[int, list[_Node]] = {}  # patterns that end with the rest of the path
        for path, node in nodes.items():
            node.allow = table.allowed(path)
            if table.head and "GET" in node.targets:
                node.targets["HEAD"] = node.targets["GET"]
            sizes = at_least if node.pattern[-1].rest else by_size
            sizes.setdefault(len(node.pattern), []).append(node)
        self.source, namespace = _Generator(by_size, table.leading, at_least).generate()
        exec(compile(self.source, "<podium route table>", "exec"), namespace)
        self.match = namespace["match"]


class _Generator:
    """Writes the source of :attr:`Router.match` (see there)."""

    def __init__(
        self,
        by_size: dict[int, list[_Node]],
        leading: tuple[str, str],
        at_least: dict[int, list[_Node]] | None = None,
    ) -> None:
        self.by_size = by_size
        self.at_least = at_least or {}
        self.leading = leading
        self.lines: list[str] = []
        self.namespace: dict[str, Any] = {}

    def emit(self, depth: int, line: str) -> None:
        self.lines.append("    " * depth + line)

    def name(self, prefix: str, value: Any) -> str:
        """A name for ``value`` in the generated module's namespace."""
        name = f"{prefix}{len(self.namespace)}"
        self.namespace[name] = value
        return name

    def generate(self) -> tuple[str, dict[str, Any]]:
        emit = self.emit
        emit(0, "def match(method, path):")
        emit(1, 'if "//" in path:  # an empty segment matches nothing')
        emit(2, "return None")
        emit(1, 'parts = path.split("/")')
        emit(1, "if not parts[-1] and len(path) > 1:  # one trailing '/' (the root's is the path)")
        emit(2, "path = path[:-1]")
        emit(2, "parts.pop()")
        emit(1, "n = len(parts)")
        keyword = "if"
        for n in sorted(self.by_size):
            emit(1, f"{keyword} n == {n}:")
            self.trie(self.by_size[n], 1, 2)
            keyword = "elif"
        # Patterns ending with {name:path}: tried once no fixed-size pattern answered (they
        # never overlap one, so the order does not change the answer).
        for n in sorted(self.at_least):
            emit(1, f"if n >= {n}:")
            self.trie(self.at_least[n], 1, 2)
        emit(1, "return None")
        return "\n".join(self.lines) + "\n", self.namespace

    def trie(self, nodes: list[_Node], at: int, depth: int) -> None:
        """Code that finds which of ``nodes`` (same segment count; the same segments before
        ``at``) a path matches, testing segment ``at`` and then the next ones. A failed test
        falls through to the next candidates: patterns never overlap, so order is free."""
        if at == len(nodes[0].pattern):
            # Same fixed segments everywhere: a fixed ending first, its test is the cheaper.
            for node in sorted(nodes, key=lambda n: not any(s.text for s in n.pattern if s.param)):
                self.node(node, depth)
            return
        by_text: dict[str, list[_Node]] = {}
        open_here: list[_Node] = []
        for node in nodes:
            segment = node.pattern[at]
            if segment.param is None:
                by_text.setdefault(segment.text, []).append(node)
            else:
                open_here.append(node)
        subject = f"parts[{at}]"
        if len(by_text) > 1:
            subject = f"s{at}"
            self.emit(depth, f"{subject} = parts[{at}]")
        keyword = "if"
        for text, group in by_text.items():
            self.emit(depth, f"{keyword} {subject} == {text!r}:")
            self.trie(group, at + 1, depth + 1)
            keyword = "elif"  # one text at most is the segment's
        if open_here:
            if at == 1 and len(nodes[0].pattern) == 2:  # the root path's one segment is ''
                self.emit(depth, "if parts[1]:")
                depth += 1
            self.trie(open_here, at + 1, depth)

    def node(self, node: _Node, depth: int) -> None:
        """The test of a pattern's one checked parameter (if any) and the code that answers
        its handler and arguments, or raises 405."""
        values = {
            i: f'"/".join(parts[{i}:])' if s.rest else f"parts[{i}]"
            for i, s in enumerate(node.pattern)
            if s.param is not None
        }
        for i, segment in enumerate(node.pattern):
            if segment.param is None or segment.rest:
                continue
            if not (segment.text or segment.noverb or segment.excluded):
                continue
            self.emit(depth, f"v{i} = parts[{i}]")
            if segment.excluded:
                self.emit(depth, f"if v{i} not in {segment.excluded!r}:")
                values[i] = f"v{i}"
            elif segment.text:
                size = len(segment.text)
                self.emit(depth, f"if len(v{i}) > {size} and v{i}.endswith({segment.text!r}):")
                values[i] = f"v{i}[:-{size}]"
            else:
                self.emit(depth, f'if ":" not in v{i}:')
                values[i] = f"v{i}"
            depth += 1
        refused = self.name("N", node)
        if len(values) == 0:  # no parameters: (handler, args) is found as it is
            targets = self.name("T", node.targets)
            self.emit(depth, f"found = {targets}.get(method)")
            self.emit(depth, "if found is not None:")
            self.emit(depth + 1, "return found")
            self.emit(depth, f"raise {refused}.refuse(method, path)")
            return
        at = {s.param: i for i, s in enumerate(node.pattern) if s.param is not None}
        for route in node.routes:
            args = [
                values[at[name]] if from_path else self.literal(value)
                for name, from_path, value in _plan(route, self.leading)
            ]
            handlers = {m: node.targets[m][0] for m in route.methods}
            if "HEAD" in node.targets and "GET" in route.methods:
                handlers["HEAD"] = node.targets["HEAD"][0]
            table = self.name("H", handlers)
            self.emit(depth, f"handler = {table}.get(method)")
            self.emit(depth, "if handler is not None:")
            self.emit(depth + 1, f"return handler, {_tuple(args)}")
        self.emit(depth, f"raise {refused}.refuse(method, path)")

    def literal(self, value: Any) -> str:
        """``value`` in the source: itself if it reads back equal, else a name for it."""
        if value is None or type(value) in (bool, int, str):
            return repr(value)
        return self.name("C", value)


def _tuple(items: list[str]) -> str:
    """A tuple display of ``items`` (source texts)."""
    return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
