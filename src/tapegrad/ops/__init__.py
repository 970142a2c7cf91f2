"""Built-in primitives, one module per op family; attaches Tensor's operators and gives the
core its structural ops (:mod:`tapegrad._structural`).

The main namespace's functions are re-exported here; ``nn`` (``tg.nn``), ``linalg_ext``
(``tg.linalg``) and ``fft`` (``tg.fft``) are reached through their namespace modules.

A family's gradients use ops of the families below it only, so the modules import one another
in one direction (no cycle), bottom to top: ``dtypes``; ``creation`` and ``manipulation``;
``elementwise``; ``conversion``; ``reductions``; ``products`` and ``indexing``; ``repetition``.
The other modules (``searching``, ``sets``, ``sorting``, ``utility``, ``linalg_ext``, ``fft``,
``clipping``, ``normalization``) import from these, never from one another; ``nn`` also
imports ``clipping``.
"""
from __future__ import annotations

from .._structural import provide as _provide
from .._tensor import Tensor
from . import conversion, creation, elementwise, indexing, manipulation, products, reductions
from . import dtypes, repetition, searching, sets, sorting, utility
from . import clipping
from .conversion import *  # noqa: F403
from .creation import *  # noqa: F403
from .elementwise import *  # noqa: F403
from .indexing import *  # noqa: F403
from .products import *  # noqa: F403
from .manipulation import *  # noqa: F403
from .repetition import *  # noqa: F403
from .reductions import *  # noqa: F403
from .dtypes import *  # noqa: F403
from .searching import *  # noqa: F403
from .sets import *  # noqa: F403
from .sorting import *  # noqa: F403
from .utility import *  # noqa: F403
from .clipping import *  # noqa: F403
from ._operators import attach as _attach

__all__ = [*conversion.__all__, *creation.__all__, *elementwise.__all__, *indexing.__all__,
           *products.__all__, *manipulation.__all__, *repetition.__all__, *reductions.__all__,
           *dtypes.__all__, *searching.__all__, *sets.__all__, *sorting.__all__, *utility.__all__,
           *clipping.__all__]

_attach(Tensor)
_provide(add=elementwise.add, sum=reductions.sum, reshape=manipulation.reshape,
         astype=elementwise.astype, real=elementwise.real, stack=manipulation.stack, zeros=creation.zeros,
         zeros_like=creation.zeros_like, ones_like=creation.ones_like,
         identity=elementwise.positive)
