"""``ts.torch_handler``: only ``base_handler`` (needs torch). TorchServe's built-in handlers
(``image_classifier``, ...) are not reimplemented: they need the real ``torchserve`` package."""
