"""Every built-in op, defined once each, and the public registry for new ones.

Each op module lists its public functions in its own ``__all__``; this package
re-exports them all (one line per module below), so a new module of ops needs
one import here and nothing else.
"""

from __future__ import annotations

from . import (
    creation,
    elementwise,
    fft,
    futures,
    indexing,
    interop,
    linalg,
    linalg_extension,
    manipulation,
    nn,
    pickling,  # noqa: F401 - tensors pickle and copy as their values
    random,
    reduction,
    registry,
    searching,
    sets,
    sorting,
    tensor_methods,  # noqa: F401 - installs Tensor's operators and methods
)
from .creation import *  # noqa: F403
from .elementwise import *  # noqa: F403
from .futures import *  # noqa: F403
from .indexing import *  # noqa: F403
from .interop import *  # noqa: F403
from .linalg import *  # noqa: F403
from .manipulation import *  # noqa: F403
from .nn import *  # noqa: F403
from .reduction import *  # noqa: F403
from .registry import GENERIC, Op, define_op, elementwise_cost, get_op, registered_ops
from .searching import *  # noqa: F403
from .sets import *  # noqa: F403
from .sorting import *  # noqa: F403

registry.seal_builtin_ops()

__all__ = [
    "GENERIC",
    "Op",
    "define_op",
    "elementwise_cost",
    "get_op",
    "random",
    "registered_ops",
]
__all__ += creation.__all__
__all__ += elementwise.__all__
__all__ += fft.__all__
__all__ += futures.__all__
__all__ += indexing.__all__
__all__ += interop.__all__
__all__ += linalg.__all__
__all__ += linalg_extension.__all__
__all__ += manipulation.__all__
__all__ += nn.__all__
__all__ += reduction.__all__
__all__ += searching.__all__
__all__ += sets.__all__
__all__ += sorting.__all__
