"""Class style: initialize(context) and handle(data, context), with headers in and out."""

from ts.context import Context


class Handler:
    def __init__(self):
        self.initialized = False
        self.context = None

    def initialize(self, context: Context):
        self.context = context
        self.greeting = context.model_yaml_config["handler"]["greeting"]
        self.properties = dict(context.system_properties)
        self.initialized = True

    def handle(self, data, context):
        out = []
        for idx, row in enumerate(data):
            body = row.get("body")
            if isinstance(body, (bytes, bytearray)):
                body = body.decode()
            want = context.get_request_header(idx, "x-want-status")
            if want:
                context.set_response_status(int(want), "Custom", idx)
            context.set_response_header(idx, "X-Handled-By", "class-style")
            context.set_response_header(idx, "X-Request-Id", context.get_request_id(idx))
            if context.get_request_header(idx, "X-Want-Text"):
                context.set_response_content_type(idx, "text/x-greeting")
                out.append(f"{self.greeting} {body}")
                continue
            out.append(
                {
                    "greeting": self.greeting,
                    "body": body,
                    "header": context.get_request_header(idx, "X-Custom"),
                    "all_headers_has_custom": "x-custom" in context.get_all_request_header(idx),
                    "model_name": context.model_name,
                    "manifest_handler": context.manifest["model"]["handler"],
                    "batch_size": self.properties["batch_size"],
                    "gpu_id": self.properties["gpu_id"],
                    "server_name": self.properties["server_name"],
                    "same_context": context is self.context,
                    "sequence_id": context.get_sequence_id(idx),
                }
            )
        return out
