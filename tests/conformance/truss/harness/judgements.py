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
    "A stream's status and headers are sent before its first item exists "
    "(test_streaming_truss/headers-early).",
    "`streaming_read_timeout` cuts the connection mid-body (no terminating chunk) "
    "(test_streaming_read_timeout/read-timeout).",
    "A model's JSON answer is `json.dumps` with its defaults (`, ` and `: ` between items, "
    "non-ASCII escaped as `\\u00fc`); the error answers and probes are FastAPI's compact JSON "
    "(the report's list of answers equal only once decoded).",
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
    "every exception into `UserCodeError` (definition_rules/postprocess; Podium answers the "
    "same, though docs/truss.md says Truss answers 412 and Podium a 500 naming the rule).",
    '`POST /hot-reload` re-imports `model/` and answers 200 `{"msg": "Hot reload complete"}` '
    "on the inference port, to anyone (test_basic_truss/hot-reload).",
    "A `load()` that raises is retried once, a second later (`NUM_LOAD_RETRIES_TRUSS`, default "
    "1): a load that fails only the first time serves (flaky_load/retried).",
    "A generator function as `predict` with `postprocess` loads; each request is then the "
    "model-error 500 (stream_fn_postprocess/refused-when).",
    "A websocket to a model that is not ready is refused at the handshake, with HTTP 503 and "
    "the not-ready error (health_checks/during-and-after-load).",
    "`HEAD` is 405 on every route, the probes included (test_basic_truss/head-options).",
    "`GET /metrics` answers 307 (to `/metrics/`, Prometheus's ASGI app) on the inference port "
    "(test_basic_truss/metrics).",
]

_PING = (
    "Truss is right for a server of one truss: its `/ping` (SageMaker's probe) answers `{}` with "
    "200, or its not-ready error with 503 and the error headers. Podium answers TorchServe's "
    '`/ping` (`{"status": "Healthy"}`; 500 `Partial Healthy` while loading), since one '
    "route serves both APIs: a deliberate difference in docs/truss.md. The status classes agree "
    "(2xx ready, 5xx not), which is what SageMaker reads; a client that reads the body or expects "
    "503 sees the difference. Suggestion: answer as Truss when every model served is a truss."
)
_INPUT_TEXT = (
    "Truss is right, by one character: for a pydantic-typed input Truss parses with the model's "
    "`parse_raw`, so a body that is not JSON is 'Input Parsing Error:' with the location in "
    "backticks (`` `__root__` ``); Podium now answers the same message (it had answered its "
    "generic 'Invalid JSON payload: ...') but quotes the location with straight quotes "
    "(`'__root__'`). Same status and headers; Podium should use backticks, as Truss's "
    "`format_pydantic_validation_error` does for every location."
)
_LOOSE_OUTPUT = (
    "Podium answers where Truss fails: Truss's JSON encoder (`DeepNumpyEncoder`) raises on "
    "`numpy.bool_` and `bytes` (500, code 500, 'Unhandled exception: TypeError: ...'); Podium "
    "encodes them (`true`; bytes as base64 text; datetimes, decimals and uuids as text, a set as "
    "a list). A deliberate improvement (docs/truss.md): no working truss relied on the 500. One "
    "more: Truss writes NaN and Infinity, which are no JSON (a strict reader fails), and Podium "
    "`null` (deliberate too). The base64 spelling of bytes is Podium's own choice."
)

JUDGEMENTS: dict[tuple[str, str], str] = {
    ("features", "secrets"): (
        "Same secret values and the same exception class (`SecretNotFound`); only its message "
        "differs. Truss's is fixed text (a leading newline, 'defined in the secret manager', a "
        "link to Truss's docs); Podium's names `TRUSS_SECRET_<name>` and `--secrets-dir`, which "
        "is more useful here, but code that shows or matches the message sees the change. Minor, "
        "and deliberate (docs/truss.md)."
    ),
    ("features", "is-healthy"): (
        "Truss's readiness error says 'Model with name model is not ready.': `model` is Truss's "
        "fixed name (`MODEL_BASENAME`), not the config's `model_name`. Podium puts the config's "
        "name there (deliberate, docs/truss.md). Truss is right about its own text; a client "
        "that matches it sees the difference. (`/ping` now answers as Truss's for a server of "
        "one truss.)"
    ),
    ("numpy_values", "json"): _LOOSE_OUTPUT,
    ("numpy_values", "bytes-json"): _LOOSE_OUTPUT,
    ("responses", "plain-values"): _LOOSE_OUTPUT,
    ("pydantic_io", "invalid"): _INPUT_TEXT,
    ("annotated_types_truss", "invalid"): _INPUT_TEXT,
    ("responses", "stream-error-first"): (
        "Podium is better, deliberately (docs/truss.md): Truss sends 200 and its headers before "
        "the first item exists, so a stream that fails at once is an empty 200 that ends cleanly "
        "and the client cannot tell it from an empty result; Podium waits for the first item and "
        "answers Truss's model-error 500 (with Truss's body and error headers) when there is none."
    ),
    ("test_streaming_truss", "headers-early"): (
        "The other side of responses/stream-error-first: Truss sends 200 and its headers at once "
        "and the first item 2 s later; Podium sends nothing until the first item exists (so that "
        "a stream that fails at once can still get an error status). Same bytes, later headers. A "
        "client's read timeout counts the wait for the first body byte on Truss too, so few "
        "clients can tell; one that waits only for headers (to show progress, or a proxy's "
        "header timeout shorter than the model's first item) does. A deliberate trade, named in "
        "docs/truss.md."
    ),
    ("responses", "stream-items"): (
        "A generator that yields an `int`: Truss sends the items before it, then cuts the "
        "connection (Starlette cannot encode the int; no terminating chunk, the error in the "
        "log), so the client sees a broken stream. Podium writes the int as a JSON line "
        "(`1\\n`) and goes on (`a`, `1\\n`, `c`), as on its other chunked streams: deliberate, "
        "named in docs/truss.md. Podium's answer is the more useful one for a model that does "
        "this on purpose, but it is spelled unlike the str items around it (which get no "
        "newline), and a truss that yields a non-text item by mistake fails loudly only on "
        "Truss. The other generators (empty strings skipped, bytes, non-ASCII, nothing) and a "
        "plain iterator (not a generator: a 500 on both) agree."
    ),
    ("websocket_echo", "http-routes"): (
        "Neither is good; they differ in the error code header and the text. `:predict` on a "
        "model with only `websocket`: Truss fails an assertion (500, code 500, 'Unhandled "
        "exception: AssertionError: `predict` must only be called if model has it.'); Podium "
        "answers the model-error 500 (code 600, 'Internal Server Error (in model/chainlet).'), "
        "which blames model code that never ran. Suggestion: 404 with code 700 and Truss's "
        "words, as for an OpenAI-style route the model lacks. Not named in docs/truss.md."
    ),
    ("custom_layout", "predict"): (
        "Podium passes the truss's own data folder (`assets/`) as `data_dir`; Truss's image "
        "copies it to `/app/data` and always passes `data`. Code that opens files under "
        "`data_dir` works on both; only code that looks at the folder's name sees the difference. "
        "Podium's answer is reasonable, but not named in docs/truss.md's deliberate differences."
    ),
    ("custom_module_dir", "predict"): (
        "Podium is right: Truss 0.18.36's own image cannot load a truss whose `model_module_dir` "
        "is not `model` (the folder is copied to `/app/model`, the config still names `src`: 'No "
        "module class file found', and the server exits). A Truss bug; Podium serves the truss "
        "as its config describes it (deliberate, docs/truss.md)."
    ),
    ("request_everywhere", "request"): (
        "Podium is right: Truss calls an `async def load()` without awaiting it (the coroutine is "
        "dropped and the model serves unloaded); Podium awaits it, as its contract says (load may "
        "be sync or async); named in docs/truss.md."
    ),
    ("slow_stream", "client-leaves"): (
        "Podium is better, as DESIGN.md asks (a client that leaves closes the generator and frees "
        "the slot at once): the next request is answered at once, where Truss runs the abandoned "
        "generator to its end and the next request waits ~4.8 s. Named in docs/truss.md."
    ),
    ("test_basic_truss", "probes"): _PING,
    ("test_truss", "predict"): _PING,
    ("test_basic_truss", "bad-msgpack"): (
        "Same status and headers; Truss's message is msgpack's own (empty for `FormatError`), "
        "Podium's prefixes 'Invalid msgpack payload: FormatError: '. Podium's is clearer; a "
        "client that shows the message sees the difference. Minor."
    ),
    ("test_basic_truss", "bad-bodies"): (
        "Mixed. MessagePack cut short or with extra bytes: both 400 with code 700, Truss's "
        "message bare, Podium's prefixed ('Invalid msgpack payload: ValueError: ...'): minor. "
        "A bad datetime extension, and JSON that is not UTF-8: Truss 500 ('Unhandled exception: "
        "...', code 500), Podium 400 (code 700): Podium is right (the request is at fault), as "
        "docs/truss.md says. A lone surrogate escape: Truss 200 (it echoes \\ud800), Podium "
        "400: deliberate (docs/truss.md). But docs/truss.md says Truss answers 500 to a "
        "MessagePack body that does not decode: it answers 400 to those (msgpack's errors are "
        "`ValueError`s), 500 only when an extension's payload has the wrong type; the page "
        "should say so."
    ),
    ("test_basic_truss", "wrong-method"): (
        "Podium is right, Truss is accidental: `GET /v1/models/model:predict` is 200 `{}` on "
        "Truss because its readiness route `/v1/models/{model_name}` matches the name "
        "`model:predict`; Podium answers 405. The 405s' bodies differ: FastAPI's "
        '`{"detail": "Method Not Allowed"}` against Podium\'s `{"error": ...}`, naming the '
        "allowed methods. No client depends on either; fine as it is."
    ),
    ("test_basic_truss", "head-options"): (
        "Podium is right: HTTP requires HEAD wherever GET is served (RFC 9110, 9.3.2), and "
        "Podium answers it on the probes; Truss's FastAPI routes declare GET only, so `HEAD /` "
        "is 405, which a load balancer probing with HEAD reads as down. OPTIONS: 405 on both, in "
        "each server's own error shape (see unknown-path)."
    ),
    ("test_basic_truss", "unknown-path"): (
        'Same status; FastAPI\'s `{"detail": "Not Found"}` against Podium\'s one error shape '
        '(`{"error": "no route for GET ..."}`), shared with its other protocols. No client '
        "depends on it; fine as it is."
    ),
    ("test_basic_truss", "metrics"): (
        "Deliberate (docs/truss.md): Podium's metrics are on their own listener (127.0.0.1:8082), "
        "not on the inference port, where Truss mounts Prometheus's app (307 to `/metrics/`). "
        "A scraper pointed at the inference port must be moved."
    ),
    ("test_basic_truss", "hot-reload"): (
        "Deliberate (docs/truss.md): no route on the inference port may change what is served; "
        "Truss re-imports `model/` for anyone who asks. Podium is right to refuse it."
    ),
    ("test_streaming_read_timeout", "read-timeout"): (
        "Podium is better: no item came within `streaming_read_timeout`, and nothing had been "
        "sent, so Podium can still answer a 504 with Truss's error headers and a message naming "
        "the setting; Truss had already sent 200 and cuts the connection mid-body. Deliberate, "
        "named in docs/truss.md."
    ),
    ("flaky_load", "retried"): (
        "Truss is right: its server retries a failed `load()` once, a second later "
        "(`NUM_LOAD_RETRIES_TRUSS`, default 1), so a truss whose first load fails (a download "
        "that times out, a device not yet free) serves. Podium tries once and, serving this truss "
        "alone, exits. Podium should retry as Truss does (and read `NUM_LOAD_RETRIES_TRUSS`)."
    ),
    ("health_checks", "during-and-after-load"): (
        "Statuses agree. The not-ready error names the config's model instead of Truss's fixed "
        "'model', and Podium appends its reason ('... is not ready. it is still loading.': "
        "note the lower-case 'it' after the full stop): deliberate, docs/truss.md. A websocket "
        "while loading: Truss refuses the handshake with HTTP 503 and its not-ready error (its "
        "exception handler answers the upgrade); Podium accepts it and closes at once with 1013 "
        "(try again later) and the error as the reason. Truss's is the better answer (a client "
        "is not told it connected when it did not, and sees the same 503 as on every other "
        "route; uvicorn lets a server deny an upgrade with an HTTP answer). Not named in "
        "docs/truss.md."
    ),
    ("server_conformance_test_truss", "slow-load"): (
        "Statuses agree (`/ping` now answers as Truss's). While loading, the not-ready error names "
        "the config's model instead of Truss's fixed 'model', and on predictions Podium appends "
        "its reason ('... is not ready. it is still loading.': note the lower-case 'it' after "
        "the full stop): deliberate, docs/truss.md."
    ),
}


# The answers each judgement was written for (the fingerprint the report prints for both
# answers): where a run's answers differ from these, the report asks for the judgement to be
# checked again. `run.py --fingerprints` prints these lines from the last full run.
JUDGED_ANSWERS: dict[tuple[str, str], str] = {
    ("features", "secrets"): "8b8515e63d85",
    ("features", "is-healthy"): "2242b81189ae",
    ("numpy_values", "json"): "1882ca501f1e",
    ("numpy_values", "bytes-json"): "62d7bd4430a2",
    ("pydantic_io", "invalid"): "5ec5a582b545",
    ("responses", "stream-items"): "76e00a34eadf",
    ("responses", "plain-values"): "94d481b93f5f",
    ("responses", "stream-error-first"): "e065754b396c",
    ("websocket_echo", "http-routes"): "1f71f5848ca1",
    ("custom_layout", "predict"): "47bb78403246",
    ("custom_module_dir", "predict"): "f5fa12d85486",
    ("request_everywhere", "request"): "c24bb3bd9b9f",
    ("slow_stream", "client-leaves"): "5ab4be644b84",
    ("flaky_load", "retried"): "43d9aed702d1",
    ("health_checks", "during-and-after-load"): "af6aeace3a61",
    ("test_basic_truss", "probes"): "6f87030a197a",
    ("test_basic_truss", "bad-msgpack"): "05a5fd7e151b",
    ("test_basic_truss", "bad-bodies"): "6b290607a15d",
    ("test_basic_truss", "wrong-method"): "2cff0e04133d",
    ("test_basic_truss", "head-options"): "3774b0b29f3e",
    ("test_basic_truss", "unknown-path"): "e77a65db8024",
    ("test_basic_truss", "metrics"): "deb7c53f1fee",
    ("test_basic_truss", "hot-reload"): "a73507676a96",
    ("test_streaming_truss", "headers-early"): "fc2432db785d",
    ("test_streaming_read_timeout", "read-timeout"): "4151b96ed677",
    ("annotated_types_truss", "invalid"): "1f179ff7e22d",
    ("server_conformance_test_truss", "slow-load"): "abf7fc1ea5d4",
    ("test_truss", "predict"): "1c9401e64d9c",
}
