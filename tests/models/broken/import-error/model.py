"""Imports a module that does not exist."""

import podium_e2e_no_such_module  # noqa: F401


class Model:
    def predict(self, inputs):
        return inputs
