"""Import paths of other servers, so that models written for them run on Podium unmodified.

``ts/`` is TorchServe's (``ts.context``, ``ts.torch_handler.base_handler``, ...: re-exports of
``podium.model.torchserve``), ``mlserver/`` MLServer's (``MLModel``, its pydantic types and
codecs). Each mirrors the layout of the package it stands in for; the model contracts make
``import ts`` / ``import mlserver`` resolve there only when the real package is absent, both by
``_aliases.Aliases``.
"""

__all__: list[str] = []
