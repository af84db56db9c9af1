class Model:
    def predict(self, inputs):
        yield "a"
        yield "b"

    def postprocess(self, outputs):
        return outputs
