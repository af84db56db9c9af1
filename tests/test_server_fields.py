"""The server settings' table (podium._server_fields): its rows, the flags made from them, and
the keys of TorchServe's and MLServer's server-wide files that map onto them."""

from __future__ import annotations

from collections import Counter

import click
import pytest

from podium.cli import main
from podium.config import FIELDS, MODEL_DEFAULTS, SETTINGS, Kind, ServerConfig, foreign


def test_every_default_holds_and_is_what_server_config_has() -> None:
    config = ServerConfig()
    for setting in SETTINGS.values():
        assert setting.check(setting.default) == setting.default, setting.key
        value = getattr(getattr(config, setting.group.value), setting.attr)
        assert value == setting.default, setting.key


def test_each_flag_comes_from_its_row_with_its_default_shown() -> None:
    serve = main.commands["serve"]  # type: ignore[attr-defined]
    params = {p.name: p for p in serve.params}
    for setting in SETTINGS.values():
        if not setting.flag:
            assert setting.key not in params
            continue
        option = params[setting.key]
        assert f"--{setting.name}" in option.opts and option.default is None, setting.key
        shown = setting.shown_default()
        assert option.help.endswith(f" [{shown}]." if shown else "."), setting.key
        if setting.kind is Kind.CHOICE:
            assert tuple(option.type.choices) == setting.choices
    assert "--no-metrics" in params["metrics"].secondary_opts
    assert params["auth"].secondary_opts == ["--no-auth", "--disable-token-auth"]
    assert SETTINGS["max_request_size"].shown_default() == "64 MiB"
    assert SETTINGS["max_url_size"].shown_default() == "8 KiB"
    assert SETTINGS["download_timeout"].shown_default() == "300"


def test_flags_set_the_groups() -> None:
    serve = main.commands["serve"]  # type: ignore[attr-defined]
    context = serve.make_context(
        "serve", ["--no-metrics", "--disable-token-auth", "--allowed-urls", "https://a/.*"]
    )
    values = {k: v for k, v in context.params.items() if k in SETTINGS and v is not None}
    config = ServerConfig(**values)
    assert config.listeners.metrics is False and config.auth.enabled is False
    assert config.registration.allowed_urls == ("https://a/.*",)
    with pytest.raises(click.BadParameter):
        serve.make_context("serve", ["--http-port", "x"])


def test_unknown_keys_are_refused() -> None:
    with pytest.raises(TypeError, match="no such server setting"):
        ServerConfig(port=1)


@pytest.mark.parametrize(
    ("source", "key", "settings"),
    [
        ("torchserve", "inference_address", ("host", "http_port")),
        ("torchserve", "management_address", ("management_host", "management_port")),
        ("torchserve", "grpc_inference_port", ("grpc_port",)),
        ("torchserve", "grpc_management_port", ("grpc_management_port",)),
        ("torchserve", "model_store", ("model_store",)),
        ("torchserve", "allowed_urls", ("allowed_urls",)),
        ("torchserve", "max_request_size", ("max_request_size",)),
        ("torchserve", "max_response_size", ("grpc_max_message_size",)),
        ("torchserve", "disable_token_authorization", ("auth",)),
        ("torchserve", "default_workers_per_model", ()),  # a model's own setting here
        ("mlserver", "host", ("host",)),
        ("mlserver", "http_port", ("http_port",)),
        ("mlserver", "grpc_port", ("grpc_port",)),
        ("mlserver", "metrics_port", ("metrics_port",)),
        ("mlserver", "debug", ("log_level",)),
        ("mlserver", "grpc_max_message_length", ("grpc_max_message_size",)),
        ("mlserver", "parallel_workers", ()),
        ("mlserver", "root_path", ("root_path",)),
        ("mlserver", "gzip_enabled", ("gzip",)),
        ("mlserver", "cors_settings.allow_origins", ("cors_allow_origins",)),
        ("mlserver", "cors_settings", ()),  # an object: read key by key
    ],
)
def test_a_foreign_key_finds_its_settings(source: str, key: str, settings: tuple[str, ...]) -> None:
    assert tuple(s.key for s in foreign(source, key)) == settings  # type: ignore[arg-type]


def test_foreign_spellings_are_one_key_each_but_addresses() -> None:
    for source in ("torchserve", "mlserver"):
        counts = Counter(getattr(s, source) for s in SETTINGS.values() if getattr(s, source))
        twice = {key for key, n in counts.items() if n > 1}
        assert twice <= {"inference_address", "management_address", "metrics_address"}, twice
    with pytest.raises(ValueError, match="no spellings"):
        foreign("triton", "x")  # type: ignore[arg-type]


def test_model_defaults_name_model_fields() -> None:
    for (source, key), fields in MODEL_DEFAULTS.items():
        assert source in ("torchserve", "mlserver") and not foreign(source, key)  # type: ignore[arg-type]
        assert fields and all(field in FIELDS for field in fields), key
