"""config.properties read as Java's Properties.load reads it, and TorchServe's models= JSON."""

from __future__ import annotations

import pytest

from podium._properties import PropertiesError, models_of, parse_properties

# TorchServe's examples/custom_metrics/config.properties shape, and the docs' models= form
SAMPLE = r"""
# comment
! another comment
inference_address=http://0.0.0.0:8080
management_address = http://0.0.0.0:8081
metrics_address:http://0.0.0.0:8082
number_of_netty_threads 32
metrics_mode=prometheus
path=C:\\models\\store
greeting=caf\u00e9\tbar
empty=
long = first \
       second
models={\
  "noop": {\
    "1.0": {\
        "defaultVersion": true,\
        "marName": "noop.mar",\
        "minWorkers": 1,\
        "maxWorkers": 1,\
        "batchSize": 4,\
        "maxBatchDelay": 100,\
        "responseTimeout": 120\
    }\
  }\
}
inference_address=http://127.0.0.1:9080
"""


def test_java_properties_rules() -> None:
    found = parse_properties(SAMPLE)
    assert found["inference_address"] == "http://127.0.0.1:9080"  # the last one wins
    assert found["management_address"] == "http://0.0.0.0:8081"
    assert found["metrics_address"] == "http://0.0.0.0:8082"
    assert found["number_of_netty_threads"] == "32"
    assert found["path"] == "C:\\models\\store"
    assert found["greeting"] == "café\tbar"
    assert found["empty"] == ""
    assert found["long"] == "first second"
    assert "comment" not in " ".join(found)


def test_models_json_over_continued_lines() -> None:
    models = models_of(parse_properties(SAMPLE)["models"])
    assert models == {
        "noop": {
            "1.0": {
                "defaultVersion": True,
                "marName": "noop.mar",
                "minWorkers": 1,
                "maxWorkers": 1,
                "batchSize": 4,
                "maxBatchDelay": 100,
                "responseTimeout": 120,
            }
        }
    }


@pytest.mark.parametrize(
    ("value", "words"),
    [("{oops", "'models' is not JSON"), ("[1]", "JSON object"), ('{"m": 1}', "'models.m'")],
)
def test_bad_models_are_named(value: str, words: str) -> None:
    with pytest.raises(PropertiesError) as info:
        models_of(value)
    assert words in str(info.value)


def test_a_bad_unicode_escape_names_the_line() -> None:
    with pytest.raises(PropertiesError) as info:
        parse_properties("a=1\nb=\\u12G4\n")
    assert "config.properties:2" in str(info.value)
