from starlette.responses import Response


class Model:
    def predict(self, inputs):
        if inputs.get("kind") == "generator":
            return (str(i) for i in range(3))
        if inputs.get("kind") == "response":
            return Response(b"raw")
        return {"value": inputs}

    def postprocess(self, outputs):
        return {"post": outputs}
