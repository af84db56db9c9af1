"""The README's truss example (examples/truss-sentiment), as its curl lines call it, on the shared
examples server: a truss served beside every other kind of model."""

from __future__ import annotations

import httpx
from conftest import Server

URL = "/v1/models/truss-sentiment"


def test_the_readme_calls(examples_server: Server) -> None:
    with httpx.Client(base_url=examples_server.url, timeout=30) as client:
        r = client.post(URL + ":predict", json={"text": "I love this, it is great"})
        assert r.json() == {"label": "sentiment:positive", "score": 0.3, "words": 6}
        r = client.post(URL + ":predict", json={"text": "good but awful", "stream": True})
        assert r.headers["content-type"] == "application/octet-stream"
        assert r.text == "good=0.6\nbut=0.0\nawful=-0.9\n"
        schema = client.get(URL + "/schema").json()
        assert schema["input_schema"]["required"] == ["text"]
        r = client.post(URL + ":predict", json={"txt": 1})
        assert (r.status_code, r.json()) == (
            400,
            {"error": "Input Parsing Error:\n  `text`: Field required."},
        )
        assert client.get(URL).status_code == 200  # readiness: its is_healthy says yes
        # the same truss on OIP: its pydantic input from the tensors' names
        r = client.post(
            "/v2/models/truss-sentiment/infer",
            json={
                "inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["nice"]}]
            },
        )
        outputs = {o["name"]: o["data"] for o in r.json()["outputs"]}
        assert outputs["label"] == ["sentiment:positive"]


def test_a_pydantic_input_that_is_no_json_is_truss_parsing_error(examples_server: Server) -> None:
    with httpx.Client(base_url=examples_server.url, timeout=30) as client:
        r = client.post(URL + ":predict", content=b"{not json")
        assert r.status_code == 400
        assert r.json()["error"].startswith("Input Parsing Error:\n  '__root__': Expecting ")
        assert r.headers["x-baseten-error-code"] == "700"
