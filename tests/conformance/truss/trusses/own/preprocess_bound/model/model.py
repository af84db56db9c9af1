import time


class Model:
    def preprocess(self, inputs):
        time.sleep(1)
        return inputs

    def predict(self, inputs):
        time.sleep(1)
        return inputs

    def postprocess(self, outputs):
        time.sleep(1)
        return outputs
