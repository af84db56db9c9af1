"""Logs a line while serving, and answers each request's id as TorchServe's context gives it."""

import logging

logger = logging.getLogger("models.ts_tell")


class TellHandler:
    def initialize(self, context):
        self.initialized = True

    def handle(self, data, context):
        logger.info("handling %d request(s)", len(data))
        return [{"request_id": context.get_request_id(idx)} for idx in range(len(data))]
