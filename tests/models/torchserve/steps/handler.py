"""Only preprocess / inference / postprocess: the default handle calls them in turn."""


class Steps:
    def initialize(self, context):
        self.factor = context.model_yaml_config.get("handler", {}).get("factor", 2)

    def preprocess(self, data):
        return [float(row["body"]["x"]) for row in data]

    def inference(self, xs):
        return [x * self.factor for x in xs]

    def postprocess(self, ys):
        # TorchServe's add_time returns None; that it ran without raising is the point
        return [
            {"y": y, "metrics": self.context.metrics.add_time("T", 1.0, None, "ms") is None}
            for y in ys
        ]
