"""The ops behind the Array API's ``linalg`` extension (``eagerrt.linalg``).

Every function works on stacks of matrices: the last two axes are the matrix,
any leading axes a batch. Kernels call ``numpy.linalg``, which loops over the
batch in C; float32 and complex64 stay in single precision, and integer or bool
input is computed in float64, as numpy does. A kernel's cost counts the flops of
the decomposition (about n^3 per matrix), so large problems run on a worker.

A matrix that numpy cannot factor (a singular one given to ``inv`` or ``solve``,
one that is not positive definite given to ``cholesky``) is a run-time failure:
the result raises :class:`~eagerrt.KernelError` when read.

**Several results from one op.** An op returns one tensor, so ``eigh``, ``qr``,
``slogdet`` and ``svd`` run one op whose kernel packs its results into a numpy
*structured* array (one field per result, e.g. ``("U", float32, (m, k))``),
then take each field with a cheap view op. The packed dtype is exact metadata
known at the call like any other, the decomposition runs once, and a failure of
it is the failure of every field.

This module adds nothing to the main namespace; ``eagerrt.linalg`` gathers its
functions and the main namespace's matmul, tensordot, vecdot and
matrix_transpose.

>>> import eagerrt as ert
>>> ert.linalg.det(ert.asarray([[2.0, 1.0], [1.0, 3.0]])).item()
5.000000000000001
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from .._core import ArgumentError, config
from ..tensor import Tensor
from ._rules import (
    RuleOut,
    as_array,
    broadcast_shapes,
    foreign_array,
    need_tensor,
    normalize_axes,
    to_dtype,
    ufunc_dtype,
    view_cost,
)
from .linalg import contracted_axis, contracted_shape, from_the_end
from .reduction import reduced_shape
from .registry import GENERIC, Op, define_op, exposes
from .wrap import wrap

__all__: list[str] = []  # nothing for the main namespace; see eagerrt.linalg

_FLOAT64 = np.dtype(np.float64)
_INTP = np.dtype(np.intp)


# -- shared rules ------------------------------------------------------------------
def _float_dtype(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """The dtype numpy.linalg computes ``dtype`` in: floats and complex as they
    are, bools and integers as float64; float16 is refused, as numpy does."""
    if dtype.kind in "fc" and dtype.itemsize >= 4:
        return dtype
    if dtype.kind in "biu":
        return _FLOAT64
    raise TypeError(
        f"linalg works on float32, float64, complex64 and complex128 (or integers), not {dtype}"
    )


def _real(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """The real dtype of the same precision: what norms and singular values have."""
    return np.finfo(dtype).dtype


def _matrices(op: str, x: Any, *, square: bool = False) -> Tensor:
    if type(x) is not Tensor or x.ndim < 2:
        ndim = x.ndim if type(x) is Tensor else 0
        raise ValueError(f"{op} needs a matrix or a stack of matrices, got {ndim} dimension(s)")
    if square and x.shape[-1] != x.shape[-2]:
        raise ValueError(f"{op} needs square matrices, got {x.shape[-2]}x{x.shape[-1]}")
    return x


def _as_float(x: Any) -> Any:
    """A kernel's input in the dtype the rule promised (ints become float64)."""
    return as_array(x, _float_dtype(x.dtype))


# Measured against numpy.linalg at n = 8..128 on the reference machine: its
# Python wrapper costs about ten op overheads a call and a little per matrix of
# a batch, and LAPACK's factorizations reach about 1/12 of matmul's flop rate
# (config.ns_per_flop is matmul's), so an inverse goes to a worker from n ~ 50.
_LAPACK_SLOWDOWN = 12.0


def _linalg_cost(batch: int, flops_per_matrix: float) -> float:
    per_matrix = (
        2.5 * config.op_overhead_ns + flops_per_matrix * _LAPACK_SLOWDOWN * config.ns_per_flop
    )
    return 10 * config.op_overhead_ns + batch * per_matrix


def _cubic_cost(factor: float) -> Callable[..., float]:
    """``factor`` flops per m*n*min(m, n) of each matrix (4x that for complex)."""

    def cost(
        shape: tuple[int, ...], dtype: np.dtype[Any], /, x: Tensor, *_: Any, **__: Any
    ) -> float:
        m, n = x.shape[-2:]
        flops = factor * m * n * min(m, n) * (4 if x.dtype.kind == "c" else 1)
        return _linalg_cost(math.prod(x.shape[:-2]), flops)

    return cost


def _copy_cost(shape: tuple[int, ...], dtype: np.dtype[Any], /, *args: Any, **_: Any) -> float:
    size = max([math.prod(shape), *(a.size for a in args if type(a) is Tensor)])
    return config.op_overhead_ns + size * config.ns_per_element


def _linalg_op(
    name: str,
    kernel: Callable[..., Any],
    cost: Callable[..., float],
    *,
    operands: int | None = 1,
    doc: str,
) -> Callable[[Callable[..., RuleOut]], Op]:
    """Decorator: the op whose rule it decorates, with ``kernel`` as its generic kernel."""

    def define(rule: Callable[..., RuleOut]) -> Op:
        # "linalg." in the name keeps these apart from main-namespace ops (and
        # error messages read ``linalg.inv(float64[2, 3]): ...``).
        op = define_op(
            f"linalg.{name}", rule, cost=cost, operands=operands, weak_scalars=False, doc=doc
        )
        op.register_kernel(GENERIC, kernel)
        return op

    return define


# -- several results: one packed op, then a view per field ---------------------------
def _field_kernel(packed: Any, name: str) -> Any:
    # A contiguous copy (O(n^2) after an O(n^3) decomposition), not a strided
    # view that would keep every other field's memory alive with this one.
    return np.asarray(packed[name]).copy()  # C order; 0-d stays 0-d


@_linalg_op("field", _field_kernel, _copy_cost, doc="One result of a packed decomposition.")
def _field(packed: Tensor, name: str) -> RuleOut:
    fields = packed.dtype.fields
    if fields is None or name not in fields:
        raise TypeError(f"{packed.dtype} has no field {name!r}")
    sub = fields[name][0]
    return packed.shape + sub.shape, sub.base


#: One packed result: its name, dtype and per-matrix shape.
Field = tuple[str, np.dtype[Any], tuple[int, ...]]


def _packed_dtype(fields: Sequence[Field]) -> np.dtype[Any]:
    return np.dtype([(name, dtype, shape) for name, dtype, shape in fields])


def _pack(batch: tuple[int, ...], fields: Sequence[Field], *results: Any) -> Any:
    """The kernel's side: the same fields the rule declared, filled in."""
    out = np.empty(batch, _packed_dtype(fields))
    for (name, _, _), value in zip(fields, results, strict=True):
        out[name] = value
    return out


def _unpack(packed: Tensor, names: Sequence[str]) -> list[Tensor]:
    return [_field(packed, name=name) for name in names]


class EighResult(NamedTuple):
    """``eigh``'s results: real eigenvalues (ascending) and eigenvectors as columns."""

    eigenvalues: Tensor
    eigenvectors: Tensor


class QRResult(NamedTuple):
    """``qr``'s results: orthonormal ``Q`` and upper-triangular ``R``."""

    Q: Tensor
    R: Tensor


class SlogdetResult(NamedTuple):
    """``slogdet``'s results: the determinant is ``sign * exp(logabsdet)``."""

    sign: Tensor
    logabsdet: Tensor


class SVDResult(NamedTuple):
    """``svd``'s results: ``x == U @ (S[..., None] * Vh)`` (reduced form)."""

    U: Tensor
    S: Tensor
    Vh: Tensor


# -- decompositions -------------------------------------------------------------------
@_linalg_op(
    "cholesky",
    lambda x, upper=False: np.linalg.cholesky(_as_float(x), upper=bool(upper)),
    _cubic_cost(1 / 3),
    doc="Cholesky factor of Hermitian positive-definite matrices.",
)
def _cholesky(x: Any, upper: bool = False) -> RuleOut:
    x = _matrices("cholesky", x, square=True)
    return x.shape, _float_dtype(x.dtype)


@exposes(_cholesky)
def cholesky(x: Any, /, *, upper: bool = False) -> Tensor:
    """The Cholesky factor ``L`` with ``x == L @ L^H`` (``U`` with ``x == U^H @ U``
    when ``upper``); a matrix that is not positive definite fails on read.

    >>> import eagerrt as ert
    >>> ert.linalg.cholesky(ert.asarray([[4.0, 2.0], [2.0, 5.0]])).numpy()
    array([[2., 0.],
           [1., 2.]])
    """
    return _cholesky(x, upper=upper)


@_linalg_op(
    "det", lambda x: as_array(np.linalg.det(_as_float(x))), _cubic_cost(2 / 3), doc="Determinants."
)
def _det(x: Any) -> RuleOut:
    x = _matrices("det", x, square=True)
    return x.shape[:-2], _float_dtype(x.dtype)


@exposes(_det)
def det(x: Any, /) -> Tensor:
    """The determinant of each square matrix.

    >>> import eagerrt as ert
    >>> ert.linalg.det(ert.eye(3, dtype="float32") * 2).item()
    8.0
    """
    return _det(x)


def _slogdet_fields(x: Any) -> list[Field]:
    dtype = _float_dtype(x.dtype)
    return [("sign", dtype, ()), ("logabsdet", _real(dtype), ())]


def _slogdet_kernel(x: Any) -> Any:
    return _pack(x.shape[:-2], _slogdet_fields(x), *np.linalg.slogdet(_as_float(x)))


@_linalg_op("slogdet", _slogdet_kernel, _cubic_cost(2 / 3), doc="Sign and log|det|.")
def _slogdet(x: Any) -> RuleOut:
    x = _matrices("slogdet", x, square=True)
    return x.shape[:-2], _packed_dtype(_slogdet_fields(x))


@exposes(_slogdet)
def slogdet(x: Any, /) -> SlogdetResult:
    """The sign and the natural log of the absolute value of each determinant,
    which does not overflow where ``det`` would.

    >>> import eagerrt as ert
    >>> sign, logabsdet = ert.linalg.slogdet(ert.asarray([[0.0, 2.0], [3.0, 0.0]]))
    >>> sign.item(), round(logabsdet.item(), 6)
    (-1.0, 1.791759)
    """
    return SlogdetResult(*_unpack(_slogdet(x), SlogdetResult._fields))


def _eigh_fields(x: Any) -> list[Field]:
    dtype, n = _float_dtype(x.dtype), x.shape[-1]
    return [("eigenvalues", _real(dtype), (n,)), ("eigenvectors", dtype, (n, n))]


@_linalg_op(
    "eigh",
    lambda x: _pack(x.shape[:-2], _eigh_fields(x), *np.linalg.eigh(_as_float(x))),
    _cubic_cost(9),
    doc="Eigen-decomposition of Hermitian matrices.",
)
def _eigh(x: Any) -> RuleOut:
    x = _matrices("eigh", x, square=True)
    return x.shape[:-2], _packed_dtype(_eigh_fields(x))


@exposes(_eigh)
def eigh(x: Any, /) -> EighResult:
    """Eigenvalues (real, ascending) and eigenvectors (as columns) of Hermitian
    or real symmetric matrices; only the lower triangle is read.

    >>> import eagerrt as ert
    >>> w, v = ert.linalg.eigh(ert.asarray([[2.0, 1.0], [1.0, 2.0]]))
    >>> w.numpy()
    array([1., 3.])
    >>> v.shape
    (2, 2)
    """
    return EighResult(*_unpack(_eigh(x), EighResult._fields))


@_linalg_op(
    "eigvalsh",
    lambda x: np.linalg.eigvalsh(_as_float(x)),
    _cubic_cost(4),
    doc="Eigenvalues of Hermitian matrices.",
)
def _eigvalsh(x: Any) -> RuleOut:
    x = _matrices("eigvalsh", x, square=True)
    return x.shape[:-1], _real(_float_dtype(x.dtype))


@exposes(_eigvalsh)
def eigvalsh(x: Any, /) -> Tensor:
    """The eigenvalues of Hermitian matrices, real and ascending.

    >>> import eagerrt as ert
    >>> ert.linalg.eigvalsh(ert.asarray([[2.0, 1.0], [1.0, 2.0]], dtype="float32")).numpy()
    array([1., 3.], dtype=float32)
    """
    return _eigvalsh(x)


@_linalg_op("inv", lambda x: np.linalg.inv(_as_float(x)), _cubic_cost(2), doc="Inverses.")
def _inv(x: Any) -> RuleOut:
    x = _matrices("inv", x, square=True)
    return x.shape, _float_dtype(x.dtype)


@exposes(_inv)
def inv(x: Any, /) -> Tensor:
    """The inverse of each square matrix; a singular one fails on read.

    >>> import eagerrt as ert
    >>> ert.linalg.inv(ert.asarray([[2.0, 0.0], [0.0, 4.0]])).numpy()
    array([[0.5 , 0.  ],
           [0.  , 0.25]])
    """
    return _inv(x)


def _qr_fields(x: Any, mode: str) -> list[Field]:
    dtype, (m, n) = _float_dtype(x.dtype), x.shape[-2:]
    k = min(m, n) if mode == "reduced" else m
    return [("Q", dtype, (m, k)), ("R", dtype, (k, n))]


@_linalg_op(
    "qr",
    lambda x, mode="reduced": _pack(
        x.shape[:-2], _qr_fields(x, mode), *np.linalg.qr(_as_float(x), mode=mode)
    ),
    _cubic_cost(8),
    doc="QR decomposition.",
)
def _qr(x: Any, mode: str = "reduced") -> RuleOut:
    x = _matrices("qr", x)
    if mode not in ("reduced", "complete"):
        raise ArgumentError(f"mode must be 'reduced' or 'complete', got {mode!r}")
    return x.shape[:-2], _packed_dtype(_qr_fields(x, mode))


@exposes(_qr)
def qr(x: Any, /, *, mode: str = "reduced") -> QRResult:
    """``x == Q @ R`` with orthonormal columns in ``Q`` and upper-triangular ``R``:
    ``Q`` is m x k and ``R`` k x n, k = min(m, n) (``mode="reduced"``) or m
    (``mode="complete"``).

    >>> import eagerrt as ert
    >>> q, r = ert.linalg.qr(ert.ones((3, 2)))
    >>> q.shape, r.shape
    ((3, 2), (2, 2))
    >>> ert.linalg.qr(ert.ones((3, 2)), mode="complete").Q.shape
    (3, 3)
    """
    return QRResult(*_unpack(_qr(x, mode=mode), QRResult._fields))


def _svd_fields(x: Any, full_matrices: bool) -> list[Field]:
    dtype, (m, n) = _float_dtype(x.dtype), x.shape[-2:]
    k = min(m, n)
    u, vh = ((m, m), (n, n)) if full_matrices else ((m, k), (k, n))
    return [("U", dtype, u), ("S", _real(dtype), (k,)), ("Vh", dtype, vh)]


@_linalg_op(
    "svd",
    lambda x, full_matrices=True: _pack(
        x.shape[:-2],
        _svd_fields(x, full_matrices),
        *np.linalg.svd(_as_float(x), full_matrices=bool(full_matrices)),
    ),
    _cubic_cost(12),
    doc="Singular value decomposition.",
)
def _svd(x: Any, full_matrices: bool = True) -> RuleOut:
    x = _matrices("svd", x)
    return x.shape[:-2], _packed_dtype(_svd_fields(x, full_matrices))


@exposes(_svd)
def svd(x: Any, /, *, full_matrices: bool = True) -> SVDResult:
    """``x == U @ (S[..., None] * Vh)``: singular values ``S`` (real, descending)
    and unitary ``U``, ``Vh``; square ones when ``full_matrices``, else only the
    min(m, n) columns/rows that take part.

    >>> import eagerrt as ert
    >>> u, s, vh = ert.linalg.svd(ert.asarray([[3.0, 0.0], [0.0, -2.0], [0.0, 0.0]]))
    >>> s.numpy(), u.shape, vh.shape
    (array([3., 2.]), (3, 3), (2, 2))
    >>> ert.linalg.svd(ert.ones((3, 2)), full_matrices=False).U.shape
    (3, 2)
    """
    return SVDResult(*_unpack(_svd(x, full_matrices=full_matrices), SVDResult._fields))


@_linalg_op(
    "svdvals", lambda x: np.linalg.svdvals(_as_float(x)), _cubic_cost(4), doc="Singular values."
)
def _svdvals(x: Any) -> RuleOut:
    x = _matrices("svdvals", x)
    return (*x.shape[:-2], min(x.shape[-2:])), _real(_float_dtype(x.dtype))


@exposes(_svdvals)
def svdvals(x: Any, /) -> Tensor:
    """The singular values of each matrix, descending.

    >>> import eagerrt as ert
    >>> ert.linalg.svdvals(ert.asarray([[0.0, 2.0], [-3.0, 0.0]])).numpy()
    array([3., 2.])
    """
    return _svdvals(x)


# -- solving and inverting with tolerances --------------------------------------------
def _solve_kernel(x1: Any, x2: Any) -> Any:
    dtype = _float_dtype(np.result_type(x1.dtype, x2.dtype))
    # numpy 2's solve reads x2 as the standard does (a vector only when 1-d).
    return np.linalg.solve(x1.astype(dtype, copy=False), x2.astype(dtype, copy=False))


def _solve_cost(shape: tuple[int, ...], dtype: np.dtype[Any], /, x1: Tensor, x2: Tensor) -> float:
    m = x1.shape[-1]
    columns = 1 if x2.ndim == 1 else x2.shape[-1]
    batch = math.prod(shape[:-2] if x2.ndim > 1 else shape[:-1])
    return _linalg_cost(batch, 2 / 3 * m**3 + 2 * m * m * columns)


@_linalg_op("solve", _solve_kernel, _solve_cost, operands=2, doc="Solve x1 @ y == x2.")
def _solve(x1: Any, x2: Any) -> RuleOut:
    x1 = _matrices("solve", x1, square=True)
    if type(x2) is not Tensor or x2.ndim == 0:
        raise ValueError("solve needs x2 to be a vector or a stack of matrices, not a scalar")
    dtype = _float_dtype(np.result_type(x1.dtype, x2.dtype))
    m = x1.shape[-1]
    # 2024.12: x2 is a vector only when it is 1-d; otherwise it is (..., M, K).
    if x2.ndim == 1:
        if x2.shape[0] != m:
            raise ValueError(f"x2 has {x2.shape[0]} rows, x1's matrices are {m}x{m}")
        return x1.shape[:-1], dtype
    if x2.shape[-2] != m:
        raise ValueError(f"x2's matrices have {x2.shape[-2]} rows, x1's matrices are {m}x{m}")
    return (*broadcast_shapes(x1.shape[:-2], x2.shape[:-2]), m, x2.shape[-1]), dtype


@exposes(_solve)
def solve(x1: Any, x2: Any, /) -> Tensor:
    """The ``y`` with ``x1 @ y == x2`` for square ``x1``. ``x2`` is a vector when
    1-d, else a stack of matrices whose batch broadcasts against ``x1``'s. A
    singular ``x1`` fails on read.

    >>> import eagerrt as ert
    >>> ert.linalg.solve(ert.asarray([[2.0, 0.0], [0.0, 4.0]]), ert.asarray([2.0, 2.0])).numpy()
    array([1. , 0.5])
    """
    return _solve(x1, x2)


def _tolerance_operand(rtol: Any) -> Any:
    """rtol as a static float, or as a tensor operand (one per matrix of the batch)."""
    if rtol is None or (isinstance(rtol, (int, float, np.floating)) and not isinstance(rtol, bool)):
        return None if rtol is None else float(rtol)
    if type(rtol) is Tensor:
        return rtol
    return wrap(rtol)


def _tolerance_batch(x: Tensor, rtol: Any) -> tuple[int, ...]:
    if type(rtol) is Tensor:
        if rtol.dtype.kind not in "biuf":
            raise TypeError(f"rtol must be real, got {rtol.dtype}")
        return broadcast_shapes(x.shape[:-2], rtol.shape)
    if rtol is not None and not isinstance(rtol, float):
        raise TypeError(f"rtol must be a float or a tensor, got {type(rtol).__name__}")
    return x.shape[:-2]


def _above_cutoff(s: Any, x: Any, rtol: Any) -> Any:
    """Which singular values s of x count (the others are zero): those above rtol
    (default max(m, n) * eps) times the largest one, per matrix."""
    if rtol is None:
        rtol = max(x.shape[-2:]) * np.finfo(s.dtype).eps
    largest = np.max(s, axis=-1, initial=0.0)
    return s > (np.asarray(rtol) * largest)[..., None]


def _matrix_rank_kernel(x: Any, rtol: Any = None) -> Any:
    s = np.linalg.svdvals(_as_float(x))
    return np.count_nonzero(_above_cutoff(s, x, rtol), axis=-1).astype(_INTP)


@_linalg_op(
    "matrix_rank",
    _matrix_rank_kernel,
    _cubic_cost(4),
    operands=None,  # rtol given as a tensor becomes an operand
    doc="Ranks, from singular values.",
)
def _matrix_rank(x: Any, rtol: Any = None) -> RuleOut:
    x = _matrices("matrix_rank", x)
    _float_dtype(x.dtype)
    return _tolerance_batch(x, rtol), _INTP


@exposes(_matrix_rank)
def matrix_rank(x: Any, /, *, rtol: float | Any | None = None) -> Tensor:
    """The number of singular values above ``rtol`` times the largest one, per
    matrix (``rtol`` defaults to max(m, n) * eps and may be a tensor that
    broadcasts against the batch).

    >>> import eagerrt as ert
    >>> ert.linalg.matrix_rank(ert.asarray([[1.0, 2.0], [2.0, 4.0]])).item()
    1
    """
    return _matrix_rank(x, rtol=_tolerance_operand(rtol))


def _pinv_kernel(x: Any, rtol: Any = None) -> Any:
    u, s, vh = np.linalg.svd(_as_float(x), full_matrices=False)
    keep = _above_cutoff(s, x, rtol)
    with np.errstate(divide="ignore"):
        s_inv = np.where(keep, 1 / np.where(keep, s, 1), 0).astype(s.dtype)
    # pinv = V diag(1/s) U^H, over singular values above the cutoff only.
    return np.matmul(
        np.conj(np.swapaxes(vh, -1, -2)) * s_inv[..., None, :], np.conj(np.swapaxes(u, -1, -2))
    )


@_linalg_op(
    "pinv",
    _pinv_kernel,
    _cubic_cost(14),
    operands=None,  # rtol given as a tensor becomes an operand
    doc="Moore-Penrose pseudo-inverses.",
)
def _pinv(x: Any, rtol: Any = None) -> RuleOut:
    x = _matrices("pinv", x)
    return (*_tolerance_batch(x, rtol), x.shape[-1], x.shape[-2]), _float_dtype(x.dtype)


@exposes(_pinv)
def pinv(x: Any, /, *, rtol: float | Any | None = None) -> Tensor:
    """The Moore-Penrose pseudo-inverse (n x m for an m x n matrix), treating
    singular values at most ``rtol`` times the largest as zero (``rtol``: as for
    :func:`matrix_rank`).

    >>> import eagerrt as ert
    >>> ert.linalg.pinv(ert.asarray([[2.0, 0.0, 0.0]])).numpy()
    array([[0.5],
           [0. ],
           [0. ]])
    """
    return _pinv(x, rtol=_tolerance_operand(rtol))


def _matrix_power_cost(shape: tuple[int, ...], dtype: np.dtype[Any], /, x: Tensor, n: int) -> float:
    products = 2 * max(1, abs(int(n))).bit_length() + (4 if n < 0 else 0)
    return _cubic_cost(2 * products)(shape, dtype, x)


@_linalg_op(
    "matrix_power",
    lambda x, n: np.linalg.matrix_power(x, int(n)),
    _matrix_power_cost,
    doc="Integer powers of square matrices.",
)
def _matrix_power(x: Any, n: Any) -> RuleOut:
    x = _matrices("matrix_power", x, square=True)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"n must be an int, got {type(n).__name__}")
    # numpy's dtype (integer matrices stay integer for n >= 0), from a stand-in.
    stand_in = np.eye(1, dtype=x.dtype)
    try:
        dtype = np.linalg.matrix_power(stand_in, max(-2, min(int(n), 2))).dtype
    except TypeError as exc:  # float16 and n < 0: numpy.linalg refuses the dtype
        raise TypeError(f"matrix_power of {x.dtype} to the power {n}: {exc}") from None
    return x.shape, dtype


@exposes(_matrix_power)
def matrix_power(x: Any, n: int, /) -> Tensor:
    """``x`` multiplied by itself ``n`` times (the identity for 0, powers of the
    inverse for negative ``n``).

    >>> import eagerrt as ert
    >>> ert.linalg.matrix_power(ert.asarray([[1, 1], [0, 1]]), 3).numpy()
    array([[1, 3],
           [0, 1]])
    """
    return _matrix_power(x, n=n)


# -- norms, products, diagonals ---------------------------------------------------------
_MATRIX_ORDS = ("fro", "nuc", 1, -1, 2, -2, math.inf, -math.inf)


def _matrix_norm_kernel(x: Any, keepdims: bool = False, ord: Any = "fro") -> Any:
    x = _as_float(x)
    ord = "fro" if ord is None else ord
    if x.size == 0 and ord not in ("fro", "nuc"):
        # numpy's max/min over an empty matrix fails; its norm is 0.
        shape = (*x.shape[:-2], 1, 1) if keepdims else x.shape[:-2]
        return np.zeros(shape, _real(x.dtype))
    return as_array(np.linalg.matrix_norm(x, keepdims=bool(keepdims), ord=ord))


def _matrix_norm_cost(
    shape: tuple[int, ...], dtype: np.dtype[Any], /, x: Tensor, **static: Any
) -> float:
    if static.get("ord", "fro") in ("nuc", 2, -2):
        return _cubic_cost(4)(shape, dtype, x)
    return _copy_cost(shape, dtype, x)


@_linalg_op("matrix_norm", _matrix_norm_kernel, _matrix_norm_cost, doc="Matrix norms.")
def _matrix_norm(x: Any, keepdims: bool = False, ord: Any = "fro") -> RuleOut:
    x = _matrices("matrix_norm", x)
    if isinstance(ord, bool) or (ord is not None and ord not in _MATRIX_ORDS):
        raise ArgumentError(f"ord must be one of {_MATRIX_ORDS}, got {ord!r}")
    shape = (*x.shape[:-2], 1, 1) if keepdims else x.shape[:-2]
    return shape, _real(_float_dtype(x.dtype))


@exposes(_matrix_norm)
def matrix_norm(x: Any, /, *, keepdims: bool = False, ord: float | str | None = "fro") -> Tensor:
    """The norm of each matrix: ``"fro"`` (Frobenius), ``"nuc"`` (nuclear),
    1 / -1 (max / min column sum), inf / -inf (row sums), 2 / -2 (singular values).

    >>> import eagerrt as ert
    >>> x = ert.asarray([[3.0, 0.0], [4.0, 1.0]])
    >>> ert.linalg.matrix_norm(x, ord=1).item(), ert.linalg.matrix_norm(x, ord=float("inf")).item()
    (7.0, 5.0)
    """
    return _matrix_norm(x, keepdims=keepdims, ord=ord)


def _vector_norm_kernel(x: Any, axis: Any = None, keepdims: bool = False, ord: Any = 2) -> Any:
    x = _as_float(x)
    axes = normalize_axes(axis, x.ndim)
    if ord in (math.inf, -math.inf) and any(x.shape[a] == 0 for a in axes):
        # numpy's max over nothing fails; a norm of no elements is 0.
        return np.zeros(reduced_shape(x.shape, axes, keepdims), _real(x.dtype))
    if foreign_array(x):  # CuPy has no vector_norm: numpy's definition in its ops
        out = _vector_norm_by_parts(x, axes, bool(keepdims), ord)
    else:
        out = np.linalg.vector_norm(x, axis=axes, keepdims=bool(keepdims), ord=ord)
    return as_array(out, _real(x.dtype))


def _vector_norm_by_parts(x: Any, axes: tuple[int, ...], keepdims: bool, ord: Any) -> Any:
    """``vector_norm`` from elementwise ops and reductions that dispatch to the
    array's own library."""
    size = np.abs(x)
    if ord == 2:
        return np.sqrt(np.sum(size * size, axis=axes, keepdims=keepdims))
    if ord == 1:
        return np.sum(size, axis=axes, keepdims=keepdims)
    if ord == math.inf:
        return np.max(size, axis=axes, keepdims=keepdims)
    if ord == -math.inf:
        return np.min(size, axis=axes, keepdims=keepdims)
    if ord == 0:
        return np.sum(size != 0, axis=axes, keepdims=keepdims).astype(size.dtype)
    return np.sum(size**ord, axis=axes, keepdims=keepdims) ** (1.0 / ord)


@_linalg_op("vector_norm", _vector_norm_kernel, _copy_cost, doc="Vector norms.")
def _vector_norm(x: Any, axis: Any = None, keepdims: bool = False, ord: Any = 2) -> RuleOut:
    need_tensor("vector_norm", x)
    if isinstance(ord, bool) or not isinstance(ord, (int, float, np.integer, np.floating)):
        raise ArgumentError(f"ord must be a number (or inf), got {ord!r}")
    axes = normalize_axes(axis, x.ndim)
    return reduced_shape(x.shape, axes, keepdims), _real(_float_dtype(x.dtype))


@exposes(_vector_norm)
def vector_norm(
    x: Any,
    /,
    *,
    axis: int | tuple[int, ...] | None = None,
    keepdims: bool = False,
    ord: float = 2,
) -> Tensor:
    """The ``ord``-norm of the vectors along ``axis`` (every element when None):
    ``sum(abs(x)**ord)**(1/ord)``, with inf / -inf the largest / smallest
    magnitude and 0 the count of non-zeros.

    >>> import eagerrt as ert
    >>> ert.linalg.vector_norm(ert.asarray([3.0, -4.0])).item()
    5.0
    >>> ert.linalg.vector_norm(ert.asarray([[3.0, -4.0]]), axis=1, ord=1, keepdims=True).numpy()
    array([[7.]])
    """
    return _vector_norm(x, axis=axis, keepdims=keepdims, ord=ord)


@_linalg_op("outer", np.outer, _copy_cost, operands=2, doc="Outer products of vectors.")
def _outer(x1: Any, x2: Any) -> RuleOut:
    for x in (x1, x2):
        if type(x) is not Tensor or x.ndim != 1:
            ndim = x.ndim if type(x) is Tensor else 0
            raise ValueError(f"outer needs two 1-d tensors, got {ndim} dimension(s)")
    return (x1.shape[0], x2.shape[0]), ufunc_dtype(np.multiply, x1, x2)


@exposes(_outer)
def outer(x1: Any, x2: Any, /) -> Tensor:
    """``x1[:, None] * x2[None, :]`` for 1-d ``x1`` and ``x2``.

    >>> import eagerrt as ert
    >>> ert.linalg.outer(ert.asarray([1, 2]), ert.asarray([1, 10, 100])).numpy()
    array([[  1,  10, 100],
           [  2,  20, 200]])
    """
    return _outer(x1, x2)


@_linalg_op(
    "cross",
    lambda x1, x2, axis=-1: np.cross(x1, x2, axis=from_the_end(x1, x2, axis)),
    _copy_cost,
    operands=2,
    doc="Cross products.",
)
def _cross(x1: Any, x2: Any, axis: int = -1) -> RuleOut:
    if type(x1) is not Tensor or type(x2) is not Tensor:
        raise ValueError("cross needs two tensors of at least one dimension")
    ax = contracted_axis("cross", x1, x2, axis)
    if x1.shape[ax] != 3 or x2.shape[ax] != 3:
        raise ValueError(f"cross needs vectors of 3 elements along axis {axis}")
    dtype = ufunc_dtype(np.multiply, x1, x2)
    if dtype.kind == "b":
        raise TypeError("cross needs numbers, not bools")
    return contracted_shape("cross", x1, x2, ax), dtype


@exposes(_cross)
def cross(x1: Any, x2: Any, /, *, axis: int = -1) -> Tensor:
    """The cross product of 3-element vectors along ``axis`` (counted from the
    end, as for :func:`~eagerrt.vecdot`), the other dimensions broadcast.

    >>> import eagerrt as ert
    >>> ert.linalg.cross(ert.asarray([1, 0, 0]), ert.asarray([0, 1, 0])).numpy()
    array([0, 0, 1])
    """
    return _cross(x1, x2, axis=axis)


@_linalg_op(
    "diagonal",
    lambda x, offset=0: np.diagonal(x, offset=int(offset), axis1=-2, axis2=-1),
    view_cost,
    doc="Matrix diagonals.",
)
def _diagonal(x: Any, offset: int = 0) -> RuleOut:
    x = _matrices("diagonal", x)
    if isinstance(offset, bool) or not isinstance(offset, (int, np.integer)):
        raise TypeError(f"offset must be an int, got {type(offset).__name__}")
    m, n = x.shape[-2:]
    length = min(m, n - offset) if offset >= 0 else min(m + offset, n)
    return (*x.shape[:-2], max(0, length)), x.dtype


@exposes(_diagonal)
def diagonal(x: Any, /, *, offset: int = 0) -> Tensor:
    """The diagonal of each matrix (``offset`` > 0: above the main one, < 0: below).

    >>> import eagerrt as ert
    >>> x = ert.arange(9).reshape((3, 3))
    >>> ert.linalg.diagonal(x).numpy(), ert.linalg.diagonal(x, offset=1).numpy()
    (array([0, 4, 8]), array([1, 5]))
    """
    return _diagonal(x, offset=offset)


def _trace_kernel(x: Any, offset: int = 0, dtype: Any = None) -> Any:
    dt = None if dtype is None else to_dtype(dtype)
    return as_array(np.trace(x, offset=int(offset), axis1=-2, axis2=-1, dtype=dt))


@_linalg_op("trace", _trace_kernel, _copy_cost, doc="Sums of diagonals.")
def _trace(x: Any, offset: int = 0, dtype: Any = None) -> RuleOut:
    x = _matrices("trace", x)
    if isinstance(offset, bool) or not isinstance(offset, (int, np.integer)):
        raise TypeError(f"offset must be an int, got {type(offset).__name__}")
    # numpy's accumulation dtype (small ints widen, as sum's do), from a stand-in.
    stand_in = np.ones((1, 1), x.dtype)
    out = np.trace(stand_in, dtype=None if dtype is None else to_dtype(dtype)).dtype
    return x.shape[:-2], out


@exposes(_trace)
def trace(x: Any, /, *, offset: int = 0, dtype: Any = None) -> Tensor:
    """The sum of each matrix's diagonal (``offset`` as for :func:`diagonal`),
    accumulated in ``dtype`` (by default as ``sum`` would: small ints widen).

    >>> import eagerrt as ert
    >>> ert.linalg.trace(ert.arange(9, dtype="int8").reshape((3, 3))).dtype
    dtype('int64')
    >>> ert.linalg.trace(ert.ones((2, 3, 3)), offset=-1).numpy()
    array([2., 2.])
    """
    return _trace(x, offset=offset, dtype=dtype)
