import httpx
from conftest import Server


def test_examples_server_answers(examples_server: Server) -> None:
    r = httpx.get(examples_server.url + "/v2/health/ready")
    assert r.status_code == 200
    assert r.json() == {"ready": True}
