"""The steps and an explain_handle: /predictions runs inference and postprocess, /explanations
(the request header ``explain: True``) runs explain_handle on what preprocess made, as
TorchServe's BaseHandler.handle does."""


class Explainer:
    def preprocess(self, data):
        return [float(row["body"]["x"]) for row in data]

    def inference(self, xs):
        return [x * 2 for x in xs]

    def postprocess(self, ys):
        return [{"y": y} for y in ys]

    def explain_handle(self, data_preprocess, raw_data):
        return [
            {"x": x, "attribution": 1.0, "target": row["body"].get("target", 0)}
            for x, row in zip(data_preprocess, raw_data, strict=False)
        ]
