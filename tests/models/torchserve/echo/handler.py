"""Answers each request with what it received, the model's version and what TorchServe's
frontend tells a handler of the path (the ``url_path`` header) and the call (``explain``); a
JSON body ``{"fail": "..."}`` raises, to show error bodies."""


def _body(row):
    body = row.get("data") or row.get("body")
    if isinstance(body, (bytes, bytearray)):
        body = body.decode("utf-8", errors="replace")
    return body


class EchoHandler:
    def initialize(self, context):
        self.version = str(context.manifest["model"].get("modelVersion"))
        self.initialized = True

    def handle(self, data, context):
        answers = []
        for idx, row in enumerate(data):
            body = _body(row)
            if isinstance(body, dict) and "fail" in body:
                raise ValueError(f"asked to fail: {body['fail']}")
            answers.append(
                {
                    "echo": body,
                    "keys": sorted(row),
                    "version": self.version,
                    "url_path": context.get_request_header(idx, "url_path"),
                    "explain": context.get_request_header(idx, "explain"),
                }
            )
        return answers
