"""``--auth`` on OpenAI's API: the inference key, sent as the ``openai`` client sends its API key
(``Authorization: Bearer``), opens it; a missing or wrong key is a 401 in OpenAI's shape, which
the client raises as ``AuthenticationError`` without retrying."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from conftest import TEST_MODELS, Server, run_server
from e2e_helpers import PATIENCE


@pytest.fixture(scope="module")
def key_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("openai-auth") / "key_file.json"


@pytest.fixture(scope="module")
def server(key_file: Path) -> Iterator[Server]:
    args = ("--auth", "--key-file", str(key_file))
    with run_server(TEST_MODELS / "openai" / "chars", args=args) as running:
        yield running


def test_the_inference_key_as_the_openai_api_key(server: Server, key_file: Path) -> None:
    key = json.loads(key_file.read_text())["inference"]["key"]
    sent: list[httpx.Request] = []
    with httpx.Client(timeout=PATIENCE, event_hooks={"request": [sent.append]}) as h:
        wrong = openai.OpenAI(base_url=server.url + "/v1", api_key="wrong", http_client=h)
        with pytest.raises(openai.AuthenticationError) as caught:
            wrong.models.list()
        assert caught.value.status_code == 401
        assert caught.value.body["code"] == "invalid_api_key"  # type: ignore[index]
        assert len(sent) == 1  # no retry
        right = openai.OpenAI(base_url=server.url + "/v1", api_key=key, http_client=h)
        assert [m.id for m in right.models.list()] == ["chars"]
        r = right.completions.create(model="chars", prompt="x", max_tokens=3)
        assert r.choices[0].text == "Hel"
    r = httpx.post(server.url + "/v1/chat/completions", json={})
    assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}
