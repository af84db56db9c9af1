"""KServe's own Python SDK, run in the deploy tools' venv (``.venv-kserve``, made by ``dev.py``),
never in the test process: kserve's generated protos declare the same ``inference.*`` messages as
tritonclient's (one protobuf descriptor pool refuses to hold both), and kserve cannot install
beside the lowest grpcio Podium supports. Each command prints one JSON object on stdout.

    python kserve_sdk.py manifests FILE...
        every YAML document of every FILE loaded into the SDK's model class for its kind
        (InferenceService, ServingRuntime, ClusterServingRuntime), strictly: a field the SDK does
        not know, a value of the wrong type or a required field left out is an error (the SDK's
        own ApiClient drops unknown fields without a word). Prints each document's kind, name and
        the SDK's serialization of it, or the errors.

    python kserve_sdk.py clients HTTP_URL GRPC_ADDRESS MODEL
        InferenceRESTClient (protocol v2) and InferenceGRPCClient against a server that serves
        MODEL (the echo example): server live and ready, model ready, an unknown model not ready,
        and inferences (JSON and binary tensors, BYTES included) whose outputs must equal their
        inputs. Prints what each call returned, or the exception it raised.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from typing import Any

import numpy as np
import yaml

#: The SDK's model class for each kind, with the apiVersion the CRD serves it at.
KINDS = {
    "InferenceService": ("serving.kserve.io/v1beta1", "V1beta1InferenceService"),
    "ServingRuntime": ("serving.kserve.io/v1alpha1", "V1alpha1ServingRuntime"),
    "ClusterServingRuntime": ("serving.kserve.io/v1alpha1", "V1alpha1ClusterServingRuntime"),
}

_PRIMITIVES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "datetime": (str,),  # RFC 3339 in YAML
    "ResourceQuantity": (str, int, float),  # "1Gi", 2
}
# The generated code spells containers both ways: kserve's ``list[X]`` / ``dict(str, X)``, the
# Kubernetes client's ``List[X]`` / ``Dict[str, X]``.
_LIST = re.compile(r"^[Ll]ist\[(.*)\]$")
_DICT = re.compile(r"^(?:dict\(|Dict\[)[^,]*, (.*)[)\]]$")


def _model_class(name: str) -> Any:
    """KServe's classes first, then the Kubernetes client's (V1Container, V1Probe, ...), which
    kserve.models refers to by name but does not export."""
    import kserve.models
    import kubernetes.client.models

    for module in (kserve.models, kubernetes.client.models):
        klass = getattr(module, name, None)
        if klass is not None:
            return klass
    raise LookupError(f"the SDK has no model class {name!r}")


def _load(data: Any, type_name: str, path: str, errors: list[str]) -> Any:
    """``data`` as an instance of the SDK type ``type_name``; what is wrong goes to ``errors``."""
    if found := _LIST.match(type_name):
        if not isinstance(data, list):
            errors.append(f"{path}: expected a list, got {data!r}")
            return None
        return [_load(v, found.group(1), f"{path}[{i}]", errors) for i, v in enumerate(data)]
    if found := _DICT.match(type_name):
        if not isinstance(data, dict):
            errors.append(f"{path}: expected a mapping, got {data!r}")
            return None
        return {k: _load(v, found.group(1), f"{path}.{k}", errors) for k, v in data.items()}
    if type_name == "object":  # IntOrString, status: any JSON value
        return data
    if type_name in _PRIMITIVES:
        wanted = _PRIMITIVES[type_name]
        if not isinstance(data, wanted) or (type_name != "bool" and isinstance(data, bool)):
            errors.append(f"{path}: expected {type_name}, got {data!r}")
        return data
    klass = _model_class(type_name)
    if not isinstance(data, dict):
        errors.append(f"{path}: expected a {type_name} mapping, got {data!r}")
        return None
    known = {key: attr for attr, key in klass.attribute_map.items()}
    for key in data:
        if key not in known:
            errors.append(f"{path}.{key}: not a field of {type_name} (fields: {sorted(known)})")
    kwargs = {
        known[key]: _load(value, klass.openapi_types[known[key]], f"{path}.{key}", errors)
        for key, value in data.items()
        if key in known
    }
    try:
        # the constructors check required fields, types and enums (kserve's generated code; the
        # Kubernetes client's pydantic models)
        return klass(**kwargs)
    except (TypeError, ValueError) as exc:
        errors.append(f"{path}: {type_name}: {' '.join(str(exc).split())[:300]}")
        return None


def manifests(files: list[str]) -> dict[str, Any]:
    from kserve import ApiClient

    client = ApiClient()
    documents = []
    for file in files:
        with open(file) as f:
            for index, doc in enumerate(yaml.safe_load_all(f)):
                where = f"{file}#{index}"
                errors: list[str] = []
                kind = doc.get("kind") if isinstance(doc, dict) else None
                if kind not in KINDS:
                    errors.append(f"{where}: kind {kind!r} is not one of {sorted(KINDS)}")
                    documents.append({"where": where, "errors": errors})
                    continue
                api_version, class_name = KINDS[kind]
                if doc.get("apiVersion") != api_version:
                    errors.append(
                        f"{where}: apiVersion {doc.get('apiVersion')!r}, not {api_version!r}"
                    )
                obj = _load(doc, class_name, where, errors)
                documents.append(
                    {
                        "where": where,
                        "kind": kind,
                        "name": (doc.get("metadata") or {}).get("name"),
                        "class": type(obj).__name__ if obj is not None else None,
                        "errors": errors,
                        "serialized": client.sanitize_for_serialization(obj) if obj else None,
                    }
                )
    return {"documents": documents}


def _inputs(binary: bool) -> list[Any]:
    from kserve import InferInput

    fp32 = InferInput("x", [2, 3], "FP32")
    fp32.set_data_from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3), binary_data=binary)
    int64 = InferInput("n", [3], "INT64")
    int64.set_data_from_numpy(np.array([1, -2, 3], dtype=np.int64), binary_data=binary)
    text = InferInput("text", [2], "BYTES")
    text.set_data_from_numpy(np.array([b"hello", b"kserve"], dtype=np.object_), binary_data=binary)
    return [fp32, int64, text]


def _outputs(response: Any) -> dict[str, Any]:
    out = {}
    for output in response.outputs:
        array = output.as_numpy()
        values = [v.decode() if isinstance(v, bytes) else v for v in array.ravel().tolist()]
        out[output.name] = {
            "datatype": output.datatype,
            "shape": list(array.shape),
            "data": values,
        }
    return out


async def _call(results: dict[str, Any], name: str, call: Any) -> None:
    try:
        results[name] = await call
    except Exception as exc:  # reported, not raised: the test names the call that failed
        code = getattr(exc, "code", None)  # a grpc.RpcError's status
        results[name] = {
            "exception": type(exc).__name__,
            "status": code().name if callable(code) else None,
            "message": (exc.details() if callable(getattr(exc, "details", None)) else str(exc))[
                :500
            ],
        }


async def clients(http_url: str, grpc_address: str, model: str) -> dict[str, Any]:
    from kserve import (
        InferenceGRPCClient,
        InferenceRESTClient,
        InferRequest,
        RESTConfig,
    )
    from kserve.protocol.infer_type import RequestedOutput

    rest: dict[str, Any] = {}
    client = InferenceRESTClient(RESTConfig(protocol="v2", retries=0, timeout=30))
    try:
        await _call(rest, "server_live", client.is_server_live(http_url))
        await _call(rest, "server_ready", client.is_server_ready(http_url))
        await _call(rest, "model_ready", client.is_model_ready(http_url, model))
        await _call(rest, "unknown_model_ready", client.is_model_ready(http_url, "no-such-model"))
        for binary in (False, True):
            request = InferRequest(model_name=model, infer_inputs=_inputs(binary))
            if binary:  # and the answer in binary too (the binary tensor extension both ways)
                request.request_outputs = [
                    RequestedOutput(n, {"binary_data": True}) for n in ("x", "n", "text")
                ]
            mode = "binary" if binary else "json"
            await _call(rest, f"infer_{mode}", _rest_infer(client, http_url, request))
        request = InferRequest(model_name="no-such-model", infer_inputs=_inputs(False))
        await _call(rest, "infer_unknown_model", _rest_infer(client, http_url, request))
    finally:
        await client.close()

    grpc: dict[str, Any] = {}
    # as docs/kserve.md calls a predictor behind Knative's ingress: another host as :authority
    # (Podium serves whatever authority a call names); channel_args replace the client's own
    # unlimited message sizes, so they are given back here
    channel = InferenceGRPCClient(
        grpc_address,
        retries=0,
        timeout=30,
        channel_args=[
            ("grpc.default_authority", "podium-examples-grpc.default.example.com"),
            ("grpc.max_send_message_length", -1),
            ("grpc.max_receive_message_length", -1),
        ],
    )
    try:
        await _call(grpc, "server_live", channel.is_server_live())
        await _call(grpc, "server_ready", channel.is_server_ready())
        await _call(grpc, "model_ready", channel.is_model_ready(model))
        await _call(grpc, "unknown_model_ready", channel.is_model_ready("no-such-model"))
        for binary in (False, True):
            request = InferRequest(model_name=model, infer_inputs=_inputs(binary))
            mode = "binary" if binary else "json"
            await _call(grpc, f"infer_{mode}", _grpc_infer(channel, request))
        request = InferRequest(model_name="no-such-model", infer_inputs=_inputs(False))
        await _call(grpc, "infer_unknown_model", _grpc_infer(channel, request))
    finally:
        await channel.close()
    return {"rest": rest, "grpc": grpc}


async def _rest_infer(client: Any, url: str, request: Any) -> dict[str, Any]:
    headers: dict[str, str] = {}
    response = await client.infer(
        url, request, model_name=request.model_name, response_headers=headers
    )
    # Inference-Header-Content-Length: the answer used the binary tensor extension
    return {"outputs": _outputs(response), "binary": "inference-header-content-length" in headers}


async def _grpc_infer(channel: Any, request: Any) -> dict[str, Any]:
    return _outputs(await channel.infer(request))


def main(argv: list[str]) -> None:
    command, rest = argv[0], argv[1:]
    if command == "manifests":
        out = manifests(rest)
    elif command == "clients":
        out = asyncio.run(clients(*rest))
    else:
        raise SystemExit(f"unknown command {command!r}: manifests FILE... | clients URL ADDR MODEL")
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
