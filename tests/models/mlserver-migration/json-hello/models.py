"""A runtime as MLServer's migration-minded users write them: MLServer's custom-json example's
predict (one JSON text in, shape counting its characters), custom REST handlers, and imports
from MLServer's less travelled modules. It imports only from ``mlserver`` and starlette."""

import json

from mlserver import MLModel
from mlserver.codecs import StringCodec
from mlserver.codecs.utils import InputOrOutput
from mlserver.errors import InferenceError
from mlserver.handlers import custom_handler
from mlserver.types import InferenceRequest, InferenceResponse, RequestInput
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import PlainTextResponse


class Greeting(BaseModel):
    name: str
    punctuation: str = "!"


def described(tensor: InputOrOutput) -> dict:
    return {"name": tensor.name, "shape": tensor.shape, "datatype": tensor.datatype}


class JsonHello(MLModel):
    async def load(self) -> bool:
        self.greeting = self.settings.parameters.extra["greeting"]
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        request_input: RequestInput = payload.inputs[0]
        text = StringCodec.decode_input(request_input)[0]
        answer = {"request": json.loads(text), "seen": described(request_input)}
        output = StringCodec.encode_output("echo_response", [json.dumps(answer)])
        return InferenceResponse(model_name=self.name, outputs=[output])

    @custom_handler(rest_path="/hello-sum")
    async def total(self, payload: list) -> int:
        return sum(payload)

    @custom_handler(rest_path="/hello/{who}", rest_method="GET")
    async def greet(self, who: str, times: int = 1) -> dict:
        return {"greeting": " ".join([f"{self.greeting} {who}"] * times)}

    @custom_handler(rest_path="/hello-model")
    async def greet_model(self, greeting: Greeting) -> Greeting:
        return Greeting(name=f"{self.greeting} {greeting.name}", punctuation=greeting.punctuation)

    @custom_handler(rest_path="/hello-request", rest_method="PUT")
    async def raw(self, request: Request) -> PlainTextResponse:
        body = await request.body()
        return PlainTextResponse(f"{request.method} {body.decode()}", status_code=201)

    @custom_handler(rest_path="/hello-fail")
    async def fail(self) -> None:
        raise InferenceError("no greeting today")
