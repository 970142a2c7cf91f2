"""``tg.optimizers``: Keras 3's optimizers (``SGD``, ``Adam``, ``AdamW``, ``RMSprop``,
``Adagrad``, ``Nadam``, ``Lion``) and learning-rate schedules (``tg.optimizers.schedules``).
"""
from . import schedules
from ._algorithms import SGD, Adagrad, Adam, AdamW, Lion, Nadam, Optimizer, RMSprop

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Nadam", "Lion",
           "schedules"]
