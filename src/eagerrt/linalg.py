"""The Array API's ``linalg`` extension: ``eagerrt.linalg``.

Functions over matrices and stacks of matrices (the last two axes; leading
axes are a batch), computed by ``numpy.linalg`` like every other op: each
returns a Tensor at once, with its shape and dtype, and runs inline or on a
worker by its cost. Bad shapes fail at the call (:class:`~eagerrt.ShapeError`);
a matrix that can't be factored (singular, not positive definite) fails when
the result is read (:class:`~eagerrt.KernelError`).

>>> import eagerrt as ert
>>> a = ert.asarray([[4.0, 1.0], [1.0, 3.0]], dtype="float32")
>>> ert.linalg.inv(a).dtype
dtype('float32')
>>> ert.linalg.solve(a, ert.asarray([1.0, 2.0], dtype="float32")).numpy()
array([0.09090909, 0.6363636 ], dtype=float32)
>>> ert.linalg.eigh(a).eigenvalues.shape
(2,)
"""

from __future__ import annotations

from .ops.linalg import matmul, matrix_transpose, tensordot, vecdot
from .ops.linalg_extension import (
    EighResult,
    QRResult,
    SlogdetResult,
    SVDResult,
    cholesky,
    cross,
    det,
    diagonal,
    eigh,
    eigvalsh,
    inv,
    matrix_norm,
    matrix_power,
    matrix_rank,
    outer,
    pinv,
    qr,
    slogdet,
    solve,
    svd,
    svdvals,
    trace,
    vector_norm,
)

__all__ = [
    "EighResult",
    "QRResult",
    "SVDResult",
    "SlogdetResult",
    "cholesky",
    "cross",
    "det",
    "diagonal",
    "eigh",
    "eigvalsh",
    "inv",
    "matmul",
    "matrix_norm",
    "matrix_power",
    "matrix_rank",
    "matrix_transpose",
    "outer",
    "pinv",
    "qr",
    "slogdet",
    "solve",
    "svd",
    "svdvals",
    "tensordot",
    "trace",
    "vecdot",
    "vector_norm",
]
