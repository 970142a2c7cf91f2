"""Built-in primitives, one module per op family; attaches Tensor's operators."""
from __future__ import annotations

from .._tensor import Tensor
from . import creation, elementwise, indexing, linalg, manipulation, reductions
from . import dtypes, searching, sets, sorting, utility
from .creation import *  # noqa: F403
from .elementwise import *  # noqa: F403
from .indexing import *  # noqa: F403
from .linalg import *  # noqa: F403
from .manipulation import *  # noqa: F403
from .reductions import *  # noqa: F403
from .dtypes import *  # noqa: F403
from .searching import *  # noqa: F403
from .sets import *  # noqa: F403
from .sorting import *  # noqa: F403
from .utility import *  # noqa: F403
from ._operators import attach as _attach

__all__ = [*creation.__all__, *elementwise.__all__, *indexing.__all__, *linalg.__all__,
           *manipulation.__all__, *reductions.__all__, *dtypes.__all__, *searching.__all__,
           *sets.__all__, *sorting.__all__, *utility.__all__]

_attach(Tensor)
