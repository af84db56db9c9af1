"""Who is right where the servers differ, and why: written by a person after reading a run's
answers (``docs/truss-conformance.json``), keyed by (truss, case). The report prints each next to
its difference; a difference without one is shown as not judged yet.

``TRUSS_FACTS``: what the runs showed of Truss 0.18.36 itself that a reimplementation must know
(each seen in ``docs/truss-conformance.json``; the case that shows it in brackets)."""

from __future__ import annotations

TRUSS_FACTS: list[str] = [
    "A truss with `model_module_dir` other than `model` cannot load in Truss's own image: the "
    "Dockerfile copies that folder to `/app/model` while the config copied beside it still names "
    "the old folder, so `model_wrapper` finds no class file ('No module class file found') and "
    "the server exits (custom_module_dir/predict).",
    "`data_dir` is always `data` at run time, whatever the config names: the image copies the "
    "folder to `/app/data` and `model_wrapper` uses `Path('data')` (custom_layout/predict: "
    "`data_dir_name` is `data`).",
    "An `async def load()` is called and its coroutine dropped, never awaited: the model serves "
    "with whatever `load` had not done (request_everywhere/request: `loaded` is false).",
    "When a client leaves a stream, Truss keeps running the generator to its end and holds the "
    "predict slot meanwhile (slow_stream/client-leaves: the next request waits ~4.8 s).",
    "A generator that raises before its first item gives 200, chunked, with an empty body that "
    "ends cleanly; one that raises later ends the body cleanly after the items it made "
    "(responses/stream-error-first, test_streaming_truss_with_error/stream-error): a client "
    "cannot tell a failed stream from a short one.",
    "`streaming_read_timeout` cuts the connection mid-body (no terminating chunk) "
    "(test_streaming_read_timeout/read-timeout).",
    "JSON answers use `json.dumps(cls=DeepNumpyEncoder)`: numpy arrays and int/float scalars "
    "convert, `numpy.bool_` and `bytes` are a 500 'Unhandled exception: TypeError: ...' with error "
    "code 500 (numpy_values/json, bytes-json).",
    "`bytes` returned to a MessagePack request are sent as they are (not packed) with "
    "`content-type: application/octet-stream` (responses/plain-values).",
    'A model\'s exception is 500 `{"error": "Internal Server Error (in model/chainlet)."}` '
    "with `X-BASETEN-ERROR-SOURCE: 04`, `X-BASETEN-ERROR-CODE: 600`; a model's `HTTPException` "
    "keeps its status and detail (even a dict), with code 600; a `Response` of status >= 300 "
    "from the model gets code 700 (responses/errors, responses/responses).",
    "Input errors are 400 with code 700: 'Invalid JSON payload: <json's message>' for JSON; an "
    "empty `error` for bytes that are not MessagePack; pydantic errors as 'Input Parsing "
    "Error(s):' with one indented line per error (test_basic_truss, pydantic_io/invalid).",
    "The body is parsed as JSON whatever the content type, unless it is exactly "
    "`application/octet-stream` (test_basic_truss/text-plain).",
    "`GET /v1/models/model:predict` is 200 `{}`: the readiness route `/v1/models/{model_name}` "
    "matches it with the name `model:predict` (test_basic_truss/wrong-method).",
    "An OpenAI-style route of a method the model lacks is 404 '`<method>` must only be called if "
    "model has it.' with code 700; `:predict` on a websocket-only model is a 500 "
    "'Unhandled exception: AssertionError: ...' with code 500 (test_basic_truss/no-chat, "
    "websocket_echo/http-routes).",
    "`/v1/websocket` on a model without `websocket` accepts, then closes with 1003 'WebSocket is "
    "not implemented on this deployment.' (test_basic_truss/no-websocket).",
    "`is_healthy` false makes `GET /v1/models/model` 503 but leaves `/loaded`, `/ping` and "
    "predictions alone (features/is-healthy).",
    "A plain `predict` that returns a generator, or a `Response`, while the model has "
    "`postprocess`, is a 500 'Internal Server Error (in model/chainlet).' with code 600, not the "
    "412 of `ModelDefinitionError`: the error is raised inside `intercept_exceptions`, which turns "
    "every exception into `UserCodeError` (definition_rules/postprocess).",
    '`POST /hot-reload` re-imports `model/` and answers 200 `{"msg": "Hot reload complete"}` '
    "on the inference port, to anyone (test_basic_truss/hot-reload).",
    "`GET /metrics` answers 307 (to `/metrics/`, Prometheus's ASGI app) on the inference port "
    "(test_basic_truss/metrics).",
]

JUDGEMENTS: dict[tuple[str, str], str] = {}
