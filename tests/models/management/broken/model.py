"""Breaks the contract: predict is missing."""


class Model:
    def load(self):
        pass
