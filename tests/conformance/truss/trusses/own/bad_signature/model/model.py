class Model:
    def predict(self, a, b, c):
        return a
