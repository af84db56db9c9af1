class Model:
    def load(self):
        raise RuntimeError("the weights are not there")

    def predict(self, model_input):
        return model_input
