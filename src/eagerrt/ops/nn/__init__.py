"""Neural-network ops, with ``torch.nn.functional``'s names, arguments and semantics.

Convolutions (``conv2d``, ``conv_transpose2d``), pooling (``max_pool2d``,
``avg_pool2d``, ``adaptive_avg_pool2d``), normalization (``batch_norm`` in
inference, ``layer_norm``, ``group_norm``), ``linear``, ``embedding``,
activations (``softmax``, ``log_softmax``, ``silu``, ``softplus``; ``gelu`` lives
in :mod:`~eagerrt.ops.elementwise`), ``scaled_dot_product_attention``, ``pad``,
``interpolate``, ``one_hot`` and ``cross_entropy``.

Each is one op, defined in the module of its family (``conv``, ``pooling``,
``norm``, ``linear``, ``activation``, ``attention``, ``resize``, ``loss``): its
shape rule runs at the call (bad shapes, dtypes and arguments fail on the user's
line), its cost counts flops and bytes so heavy calls go to a worker, and its
generic kernel is plain numpy-API code. A device's backend brings faster ones:
the CPU's (BLAS, numba, MKL's thread pool) live in :mod:`eagerrt.backends.cpu`.
Float ops take float32 or float64 tensors and keep their dtype. Optional tensor
arguments (a bias, a weight) that are given become operands of the op.

>>> import eagerrt as ert
>>> ert.softmax(ert.asarray([[0.0, 0.0]]), axis=-1).numpy()
array([[0.5, 0.5]])
>>> x = ert.ones((1, 1, 4, 4))
>>> ert.conv2d(x, ert.ones((1, 1, 3, 3)), padding=1).numpy()[0, 0]
array([[4., 6., 6., 4.],
       [6., 9., 9., 6.],
       [6., 9., 9., 6.],
       [4., 6., 6., 4.]])
"""

from __future__ import annotations

from ..registry import Op, get_op
from .activation import log_softmax, silu, softmax, softplus
from .attention import scaled_dot_product_attention
from .conv import conv2d, conv_transpose2d
from .linear import embedding, linear
from .loss import cross_entropy, one_hot
from .norm import batch_norm, group_norm, layer_norm
from .pooling import adaptive_avg_pool2d, avg_pool2d, max_pool2d
from .resize import interpolate, pad

__all__ = [
    "adaptive_avg_pool2d",
    "avg_pool2d",
    "batch_norm",
    "conv2d",
    "conv_transpose2d",
    "cross_entropy",
    "embedding",
    "group_norm",
    "interpolate",
    "layer_norm",
    "linear",
    "log_softmax",
    "max_pool2d",
    "one_hot",
    "pad",
    "scaled_dot_product_attention",
    "silu",
    "softmax",
    "softplus",
]

#: The ops behind the functions above, by name (``get_op`` finds them too).
NN_OPS: dict[str, Op] = {name: get_op(name) for name in __all__}

# Doctests of the ops defined directly (their docs live on Op objects, which
# doctest's finder does not visit by itself).
__test__ = {name: op.__doc__ for name, op in NN_OPS.items() if op.__doc__ and ">>>" in op.__doc__}
