"""Response headers a model set, made safe per protocol (server/_headers.py)."""

from __future__ import annotations

from podium.server._headers import grpc_metadata, http_headers


def test_http_keeps_tokens_and_drops_what_could_forge_headers() -> None:
    assert http_headers(
        {"X-Trace": "a b", "content-length": "1", "bad name": "x", "x-crlf": "a\r\nb"},
        {"x-nul": "a\0", "x-latin": "caf\u00e9", "x-emoji": "\U0001f600"},
    ) == [(b"x-trace", b"a b"), (b"x-latin", b"caf\xe9")]


def test_grpc_lowers_names_and_encodes_bin_values() -> None:
    assert grpc_metadata(
        {"X-Trace": "abc", "grpc-status": "5", "x-blob-bin": "\u00ff", "x-latin": "caf\u00e9"},
        None,
        {"bad name": "x"},
    ) == (("x-trace", "abc"), ("x-blob-bin", b"\xc3\xbf"))


def test_repeated_names_stay_repeated() -> None:
    pairs = [("set-cookie", "a=1"), ("set-cookie", "b=2")]
    assert grpc_metadata(pairs) == (("set-cookie", "a=1"), ("set-cookie", "b=2"))
    assert http_headers(pairs) == [(b"set-cookie", b"a=1"), (b"set-cookie", b"b=2")]
