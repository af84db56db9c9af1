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

Dispatch costs no framework and no scan of the routes: :class:`Router` holds the table as a
trie of its segments, walked by one loop over a path's segments.
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
#: The most paths whose match a router remembers at once, and the longest it remembers.
REMEMBERED = 512
REMEMBERED_PATH = 512

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
    OPENAI = "openai"  # OpenAI's API (/v1/chat/completions, /v1/completions, ...)

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
        return _accepts(_kind(self), self.excluded or self.text, value)

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

    def names(self) -> Router:
        """The table as a :class:`Router` that answers each path's :class:`Route` where the
        other answers its handler: what access lines and spans name a request by."""
        return Router(self, find=_itself)


def _itself(route: Route) -> Any:
    return route


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


# How a parameter segment tests a path's segment (_kind): any non-empty one, one that ends
# with the segment's text, one without ':', one that is none of the excluded words.
_ANY, _ENDING, _NOVERB, _EXCLUDING = range(4)


class _Pattern:
    """One pattern of a compiled table: what each method answers, and its ``Allow``."""

    __slots__ = ("segments", "allow", "targets")

    def __init__(self, segments: tuple[_Segment, ...]) -> None:
        self.segments = segments
        self.allow: tuple[str, ...] = ()
        #: method -> ``(handler, args, slots)``: the handler's arguments in its order, the
        #: path's parameters left None, and where the path's go: per parameter, ``(argument,
        #: index, cut)``: the path's part at ``index``, its last ``cut`` characters cut off
        #: (``cut`` < 0: the rest of the path from there)
        self.targets: dict[str, tuple[Handler, tuple[Any, ...], tuple[tuple[int, int, int], ...]]]
        self.targets = {}

    def add(self, route: Route, handler: Handler, leading: tuple[str, str]) -> None:
        """``route``'s methods reach ``handler`` (the route's endpoint, bound, or what
        :meth:`RouteTable.names` answers)."""
        at = {s.param: i for i, s in enumerate(self.segments) if s.param is not None}
        args: list[Any] = []
        slots: list[tuple[int, int, int]] = []
        for name, from_path, value in _plan(route, leading):
            if from_path:
                segment = self.segments[at[name]]
                slots.append((len(args), at[name], -1 if segment.rest else len(segment.text)))
            args.append(value)
        for method in route.methods:
            self.targets[method] = (handler, tuple(args), tuple(slots))

    def refuse(self, method: str, path: str) -> MethodNotAllowed:
        allow = ", ".join(self.allow)
        return MethodNotAllowed(f"{path} does not accept {method}; use {allow}", self.allow)


class _Trie:
    """The patterns that share their first segments, by their next one: a fixed text (looked
    up in a dictionary) or a parameter (a test that a path's segment passes or not)."""

    __slots__ = ("fixed", "open", "end", "find", "any", "verbs", "tests", "colon_tests")

    def __init__(self) -> None:
        self.fixed: dict[str, _Trie] = {}
        #: parameter segments next, in table order: ``(kind, text or excluded words, trie)``
        self.open: list[tuple[int, Any, _Trie]] = []
        self.end: _Pattern | None = None  # the pattern whose last segment leads here
        # What the walk reads (settle): fixed.get; the one parameter, if it takes any segment
        # and there is no other; the parameters that end with a verb (':predict', by the word
        # after the ':'); the other parameters, and those of them that take a segment with ':'
        self.find = self.fixed.get
        self.any: _Trie | None = None
        self.verbs: dict[str, _Trie] = {}
        self.tests: tuple[tuple[int, Any, _Trie], ...] = ()
        self.colon_tests: tuple[tuple[int, Any, _Trie], ...] = ()

    def insert(self, pattern: _Pattern, segments: tuple[_Segment, ...]) -> None:
        """Add ``pattern`` under the path ``segments`` (the first, '' before the '/', left out)."""
        node = self
        for segment in segments:
            if segment.param is None:
                node = node.fixed.setdefault(segment.text, _Trie())
                continue
            key = (_kind(segment), segment.excluded or segment.text)
            child = next((c for k, t, c in node.open if (k, t) == key), None)
            if child is None:
                child = _Trie()
                node.open.append((*key, child))
            node = child
        node.end = pattern

    def settle(self) -> None:
        """Make every fixed child hold the parameter siblings that accept its text too, here
        and below: then a segment found among the fixed texts has no other way to go, and the
        walk never goes back from a fixed one."""
        for text, child in self.fixed.items():
            for kind, test, other in self.open:
                if _accepts(kind, test, text):
                    child = _union(child, other)
            self.fixed[text] = child
        self.find = self.fixed.get
        self.verbs = {t[1:]: c for k, t, c in self.open if k == _ENDING and _is_verb(t)}
        self.tests = tuple(o for o in self.open if not (o[0] == _ENDING and _is_verb(o[1])))
        self.colon_tests = tuple(o for o in self.tests if o[0] != _NOVERB)
        if len(self.open) == 1 and self.open[0][0] == _ANY:
            self.any = self.open[0][2]
        for child in self.fixed.values():
            child.settle()
        for _, _, child in self.open:
            child.settle()


def _is_verb(ending: str) -> bool:
    """Whether ``ending`` is ':' and a word without ':' (Truss's, Google's custom methods)."""
    return len(ending) > 1 and ending[0] == ":" and ":" not in ending[1:]


def _union(a: _Trie, b: _Trie) -> _Trie:
    """A new trie with the patterns of both (neither changed: subtries are shared)."""
    made = _Trie()
    if a.end is not None and b.end is not None and a.end is not b.end:  # (the table refuses them)
        templates = " and ".join("/".join(s.template for s in p.segments) for p in (a.end, b.end))
        raise ValueError(f"patterns {templates} match the same paths")
    made.end = a.end or b.end
    made.fixed = dict(a.fixed)
    for text, child in b.fixed.items():
        mine = made.fixed.get(text)
        made.fixed[text] = child if mine is None else _union(mine, child)
    made.open = list(a.open)
    for kind, test, child in b.open:
        for i, (k, t, mine) in enumerate(made.open):
            if (k, t) == (kind, test):
                made.open[i] = (k, t, _union(mine, child))
                break
        else:
            made.open.append((kind, test, child))
    return made


def _kind(segment: _Segment) -> int:
    if segment.excluded:
        return _EXCLUDING
    if segment.noverb:
        return _NOVERB
    return _ENDING if segment.text else _ANY


def _accepts(kind: int, test: Any, segment: str) -> bool:
    """Whether a parameter segment of ``kind`` (with ``test``) takes ``segment``."""
    return segment != "" and (
        kind == _ANY
        or (kind == _ENDING and len(segment) > len(test) and segment.endswith(test))
        or (kind == _NOVERB and ":" not in segment)
        or (kind == _EXCLUDING and segment not in test)
    )


def _walk(node: _Trie, parts: list[str], at: int, stop: int) -> _Pattern | None:
    """The pattern under ``node`` that ``parts[at:stop]`` lead to, if any."""
    while at < stop:
        segment = parts[at]
        child = node.find(segment)  # (settled: if found, the only way on)
        if child is None:
            if not segment:  # a parameter is never empty
                return None
            child = node.any
            if child is not None:
                node = child
                at += 1
                continue
            tests = node.tests
            if node.verbs:  # (a name before the verb, and the verb after its last ':')
                name, colon, verb = segment.rpartition(":")
                if colon:
                    tests = node.colon_tests
                    if name:
                        child = node.verbs.get(verb)
            for kind, test, other in tests:
                if kind == _ANY or _accepts(kind, test, segment):
                    if child is not None:  # a second way: the first one to its end, then this
                        found = _walk(child, parts, at + 1, stop)
                        if found is not None:
                            return found
                    child = other
            if child is None:
                return None
        node = child
        at += 1
    return node.end


class Router:
    """A compiled :class:`RouteTable`.

    ``match(method, path)`` answers the handler of ``method`` on ``path`` and its arguments;
    ``None`` if no pattern matches the path; raises ``MethodNotAllowed`` (with the pattern's
    ``Allow``) if one does but not with this method. One trailing ``/`` is ignored; an empty
    segment matches nothing.

    The table is data, walked by a loop: the patterns without parameters in a dictionary by
    their path, the others in a trie of their segments per segment count (the count of a path
    split at '/'), fixed texts found in a dictionary, parameters by their test. Nothing scans
    the routes or runs a regular expression per request. Where a segment could be a fixed text
    or a parameter (``/v2/models/stats/x`` beside ``/v2/models/{model}/ready``), the fixed
    text's subtrie holds both (:meth:`_Trie.settle`), so the walk goes back only where two
    parameters take one segment; parameters that end with a verb (``{model}:predict``) are
    found by the word after the segment's last ':', in one lookup however many verbs there are.
    The patterns that end with the rest of the path (``{name:path}``) have a trie per place
    where the rest starts, tried when no other pattern matches. Patterns never overlap (the
    table refuses them), so the pattern found is the only one.
    """

    __slots__ = ("table", "_fixed", "_sized", "_tails", "_found")

    def __init__(
        self, table: RouteTable, owner: object = None, find: Callable[[Route], Any] | None = None
    ) -> None:
        self.table = table
        patterns: dict[str, _Pattern] = {}
        for route in table.routes:
            pattern = patterns.get(route.path)
            if pattern is None:
                pattern = patterns[route.path] = _Pattern(table._patterns[route.path])
            handler = route.endpoint
            if find is not None:  # answer find(route) instead of the handler
                handler = find(route)
            elif owner is not None:
                handler = handler.__get__(owner, type(owner))
            pattern.add(route, handler, table.leading)
        #: the patterns without parameters, by their path
        self._fixed: dict[str, _Pattern] = {}
        #: the others, in a trie per segment count
        self._sized: dict[int, _Trie] = {}
        #: (where the rest of the path starts, its trie), for the {name:path} patterns
        self._tails: list[tuple[int, _Trie]] = []
        tails: dict[int, _Trie] = {}
        for path, pattern in patterns.items():
            pattern.allow = table.allowed(path)
            if table.head and "GET" in pattern.targets:
                pattern.targets["HEAD"] = pattern.targets["GET"]
            segments = pattern.segments
            if all(segment.param is None for segment in segments):
                self._fixed[path] = pattern
            elif segments[-1].rest:
                tails.setdefault(len(segments) - 1, _Trie()).insert(pattern, segments[1:-1])
            else:
                self._sized.setdefault(len(segments), _Trie()).insert(pattern, segments[1:])
        for trie in (*self._sized.values(), *tails.values()):
            trie.settle()
        self._tails = sorted(tails.items())
        #: what the last paths found lead to, by method and path (match)
        self._found: dict[tuple[str, str], Found] = {}

    def match(self, method: str, path: str) -> Found | None:
        """See the class docstring. A path found is remembered, if it is short: the next
        request to it (clients call the same few routes) costs one dictionary look-up; at most
        :data:`REMEMBERED` paths are, of at most :data:`REMEMBERED_PATH` characters each."""
        found = self._found.get((method, path))
        if found is not None:
            return found
        found = self._match(method, path)
        if found is not None and len(path) <= REMEMBERED_PATH:
            if len(self._found) >= REMEMBERED:
                self._found.clear()  # (forgotten all at once: a bounded memory, kept simply)
            self._found[(method, path)] = found
        return found

    def _match(self, method: str, path: str) -> Found | None:
        if "//" in path:  # an empty segment matches nothing
            return None
        if path[-1:] == "/" and len(path) > 1:  # one trailing '/' (the root's is the path)
            path = path[:-1]
        found = self._fixed.get(path)
        if found is not None:
            target = found.targets.get(method)
            if target is None:
                raise found.refuse(method, path)
            return target[0], target[1]
        parts = path.split("/")
        if parts[0]:  # (not a path)
            return None
        n = len(parts)
        node = self._sized.get(n)
        found = None if node is None else _walk(node, parts, 1, n)
        if found is None:
            for start, trie in self._tails:
                if start >= n or not parts[start]:  # (the rest of the path is never empty)
                    return None
                found = _walk(trie, parts, 1, start)
                if found is not None:
                    break
            else:
                return None
        target = found.targets.get(method)
        if target is None:
            raise found.refuse(method, path)
        handler, args, slots = target
        made = list(args)
        for slot, index, cut in slots:
            if cut == 0:
                made[slot] = parts[index]
            elif cut > 0:
                made[slot] = parts[index][:-cut]
            else:
                made[slot] = "/".join(parts[index:])
        return handler, tuple(made)
