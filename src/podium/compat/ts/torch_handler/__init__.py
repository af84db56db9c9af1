"""``ts.torch_handler``: TorchServe's ``BaseHandler`` and its default handlers.

``base_handler``, ``vision_handler``, ``image_classifier``, ``image_segmenter``,
``object_detector``, ``text_handler``, ``text_classifier`` and ``contractions``: Podium's own
implementations with TorchServe 0.12's behaviour (``docs/torchserve.md``, "Default handlers").
They need torch and Pillow (``pip install 'podium[torchserve-handlers]'``), not torchvision and
not the ``torchserve`` package. DALI's and the distributed handlers are not provided.
"""
