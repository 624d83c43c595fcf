"""The ops behind the Array API's ``fft`` extension (``eagerrt.fft``).

Kernels call ``numpy.fft`` (pocketfft). Result dtypes are numpy 2's, which are
the standard's: float32 and complex64 input transform in single precision
(complex64 out, or float32 for the inverse real transforms), float64 and
complex128 in double; integers and bools are computed in double precision.
A transform's cost is n log n per transformed axis, so large ones run on a
worker.

This module adds nothing to the main namespace; ``eagerrt.fft`` gathers it.

>>> import eagerrt as ert
>>> ert.fft.fft(ert.asarray([1.0, 0.0, 0.0, 0.0], dtype="float32")).numpy()
array([1.+0.j, 1.+0.j, 1.+0.j, 1.+0.j], dtype=complex64)
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._core import ArgumentError, config
from ..devices.base import Device
from ..tensor import Tensor
from ._rules import RuleOut, normalize_axes, normalize_axis, to_dtype
from .registry import GENERIC, Op, define_op, exposes

__all__: list[str] = []  # nothing for the main namespace; see eagerrt.fft

_NORMS = ("backward", "ortho", "forward")
_COMPLEX = {
    np.dtype(np.float32): np.dtype(np.complex64),
    np.dtype(np.complex64): np.dtype(np.complex64),
}


# -- dtypes, sizes, costs -----------------------------------------------------------------
def _complex_dtype(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """The complex dtype a transform of ``dtype`` computes in (numpy 2's rule)."""
    if dtype.kind not in "biufc":
        raise TypeError(f"fft works on numbers, not {dtype}")
    return _COMPLEX.get(dtype, np.dtype(np.complex128))


def _real_dtype(dtype: np.dtype[Any], what: str) -> np.dtype[Any]:
    """The real dtype of a transform that takes real input (``rfft``, ``ihfft``)."""
    if dtype.kind == "c":
        raise TypeError(f"{what} takes real input, not {dtype}; use fft for complex input")
    return np.finfo(_complex_dtype(dtype)).dtype


def _need_tensor(name: str, x: Any, ndim: int = 1) -> Tensor:
    if type(x) is not Tensor or x.ndim < ndim:
        got = x.ndim if type(x) is Tensor else 0
        raise ValueError(f"{name} needs a tensor of at least {ndim} dimension(s), got {got}")
    return x


def _check_norm(norm: Any) -> None:
    if norm not in _NORMS:
        raise ArgumentError(f"norm must be one of {_NORMS}, got {norm!r}")


def _points(name: str, n: Any) -> int:
    """A transform length from the user: a positive int."""
    try:
        points = operator.index(n)
    except TypeError:
        raise TypeError(f"{name}: a length must be an int, got {type(n).__name__}") from None
    if points < 1:
        raise ValueError(f"{name}: invalid number of data points ({points}); it must be >= 1")
    return points


# -- plans: the output shape of a transform, from shapes alone ----------------------------
# kind: "c2c" (complex in and out), "r2c" (real in, half spectrum out: rfft and
# ihfft), "c2r" (half spectrum in, real out: irfft, and hfft, the Hermitian one).
# Rules and kernels share the plan, so a kernel runs numpy with the very sizes
# and axes that the rule promised.
def _out_dtype(name: str, kind: str, dtype: np.dtype[Any]) -> np.dtype[Any]:
    if kind == "r2c":
        return _complex_dtype(_real_dtype(dtype, name))
    if kind == "c2r":
        return np.finfo(_complex_dtype(dtype)).dtype
    return _complex_dtype(dtype)


def _one_axis_plan(
    name: str, kind: str, shape: tuple[int, ...], n: Any, axis: Any
) -> tuple[tuple[int, ...], int, int]:
    """(output shape, transform length, axis) of a one-axis transform."""
    ax = normalize_axis(axis, len(shape))
    m = shape[ax]
    points = _points(name, (2 * (m - 1) if kind == "c2r" else m) if n is None else n)
    out = list(shape)
    out[ax] = points // 2 + 1 if kind == "r2c" else points
    return tuple(out), points, ax


def _nd_plan(
    name: str, kind: str, shape: tuple[int, ...], s: Any, axes: Any
) -> tuple[tuple[int, ...], list[int], list[int]]:
    """(output shape, transform lengths, axes) of an n-d transform: axes default
    to the last len(s) (or all), a length of -1 keeps the axis' size."""
    ndim = len(shape)
    if s is not None:
        s = list(s)
    if axes is None:
        count = ndim if s is None else len(s)
        if count > ndim:
            raise ValueError(f"{name}: s={tuple(s or ())} has more entries than {ndim} dimensions")
        ax = list(range(ndim - count, ndim))
    else:
        ax = [normalize_axis(a, ndim) for a in axes]
        if len(set(ax)) != len(ax):
            raise ValueError(f"{name}: repeated axis in axes={tuple(axes)}")
    if s is not None and len(s) != len(ax):
        raise ValueError(f"{name}: s={tuple(s)} and axes={tuple(ax)} differ in length")
    if kind != "c2c" and not ax:
        raise ValueError(f"{name} needs at least one axis")
    sizes = []
    for i, a in enumerate(ax):
        given = None if s is None or s[i] == -1 else s[i]
        default = 2 * (shape[a] - 1) if kind == "c2r" and i == len(ax) - 1 else shape[a]
        sizes.append(_points(name, default if given is None else given))
    out = list(shape)
    for a, size in zip(ax, sizes, strict=True):
        out[a] = size
    if kind == "r2c":
        out[ax[-1]] = sizes[-1] // 2 + 1
    return tuple(out), sizes, ax


def _fft_cost(shape: tuple[int, ...], dtype: np.dtype[Any], /, x: Tensor, **_: Any) -> float:
    # n log n: each element of the larger of input and output, times log2 of
    # the transformed length (bounded by the whole size).
    size = max(math.prod(shape), x.size, 1)
    return config.op_overhead_ns + size * max(1.0, math.log2(size)) * 2 * config.ns_per_element


# -- the transforms ---------------------------------------------------------------------
def _one_axis_op(name: str, kind: str, numpy_fn: Callable[..., Any]) -> Op:
    def rule(x: Any, n: Any = None, axis: int = -1, norm: str = "backward") -> RuleOut:
        x = _need_tensor(name, x)
        _check_norm(norm)
        out, _, _ = _one_axis_plan(name, kind, x.shape, n, axis)
        return out, _out_dtype(name, kind, x.dtype)

    def kernel(x: Any, n: Any = None, axis: int = -1, norm: str = "backward") -> Any:
        _, points, ax = _one_axis_plan(name, kind, x.shape, n, axis)
        out = numpy_fn(x, n=points, axis=ax, norm=norm)
        return out.astype(_out_dtype(name, kind, x.dtype), copy=False)

    op = define_op(f"fft.{name}", rule, cost=_fft_cost, operands=1, doc=f"numpy.fft.{name}")
    op.register_kernel(GENERIC, kernel)
    return op


def _nd_op(name: str, kind: str, numpy_fn: Callable[..., Any]) -> Op:
    def rule(x: Any, s: Any = None, axes: Any = None, norm: str = "backward") -> RuleOut:
        x = _need_tensor(name, x, ndim=0 if kind == "c2c" else 1)
        _check_norm(norm)
        out, _, _ = _nd_plan(name, kind, x.shape, s, axes)
        return out, _out_dtype(name, kind, x.dtype)

    def kernel(x: Any, s: Any = None, axes: Any = None, norm: str = "backward") -> Any:
        _, sizes, ax = _nd_plan(name, kind, x.shape, s, axes)
        # No axes: numpy hands back its input as it is; the rule promised complex.
        out = numpy_fn(x, s=sizes, axes=ax, norm=norm) if ax else x
        return np.asarray(out).astype(_out_dtype(name, kind, x.dtype), copy=False)

    op = define_op(f"fft.{name}", rule, cost=_fft_cost, operands=1, doc=f"numpy.fft.{name}")
    op.register_kernel(GENERIC, kernel)
    return op


#: The n-d transforms' lengths ``s`` and ``axes``: one int per transformed axis.
Sizes = Sequence[int] | None

_fft = _one_axis_op("fft", "c2c", np.fft.fft)
_ifft = _one_axis_op("ifft", "c2c", np.fft.ifft)
_rfft = _one_axis_op("rfft", "r2c", np.fft.rfft)
_irfft = _one_axis_op("irfft", "c2r", np.fft.irfft)
_hfft = _one_axis_op("hfft", "c2r", np.fft.hfft)
_ihfft = _one_axis_op("ihfft", "r2c", np.fft.ihfft)
_fftn = _nd_op("fftn", "c2c", np.fft.fftn)
_ifftn = _nd_op("ifftn", "c2c", np.fft.ifftn)
_rfftn = _nd_op("rfftn", "r2c", np.fft.rfftn)
_irfftn = _nd_op("irfftn", "c2r", np.fft.irfftn)


@exposes(_fft)
def fft(x: Any, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Tensor:
    """The discrete Fourier transform along ``axis``, of length ``n`` (``x``
    cropped or zero-padded; by default the axis' size). ``norm``: "backward"
    (no scaling), "ortho" (1/sqrt(n)) or "forward" (1/n).

    >>> import eagerrt as ert
    >>> ert.fft.fft(ert.asarray([1.0, 2.0, 3.0, 4.0])).numpy()
    array([10.+0.j, -2.+2.j, -2.+0.j, -2.-2.j])
    """
    return _fft(x, n=n, axis=axis, norm=norm)


@exposes(_ifft)
def ifft(x: Any, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Tensor:
    """The inverse of :func:`fft` (scaled by 1/n with the default ``norm``).

    >>> import eagerrt as ert
    >>> ert.fft.ifft(ert.asarray([4.0, 0.0, 0.0, 0.0])).numpy()
    array([1.+0.j, 1.+0.j, 1.+0.j, 1.+0.j])
    """
    return _ifft(x, n=n, axis=axis, norm=norm)


@exposes(_rfft)
def rfft(x: Any, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Tensor:
    """The transform of real input: only the n // 2 + 1 non-negative frequencies.

    >>> import eagerrt as ert
    >>> ert.fft.rfft(ert.asarray([1.0, 2.0, 3.0, 4.0])).numpy()
    array([10.+0.j, -2.+2.j, -2.+0.j])
    """
    return _rfft(x, n=n, axis=axis, norm=norm)


@exposes(_irfft)
def irfft(x: Any, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Tensor:
    """The inverse of :func:`rfft`: a real signal of length ``n`` (by default
    2 * (m - 1) for m frequencies) from its non-negative frequencies.

    >>> import eagerrt as ert
    >>> ert.fft.irfft(ert.asarray([10.0, -2 + 2j, -2.0])).numpy()
    array([1., 2., 3., 4.])
    """
    return _irfft(x, n=n, axis=axis, norm=norm)


@exposes(_hfft)
def hfft(x: Any, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Tensor:
    """The transform of a signal with Hermitian symmetry, given by its first half:
    a real spectrum of length ``n`` (by default 2 * (m - 1)).

    >>> import eagerrt as ert
    >>> ert.fft.hfft(ert.asarray([1.0, 0.0, 0.0])).numpy()
    array([1., 1., 1., 1.])
    """
    return _hfft(x, n=n, axis=axis, norm=norm)


@exposes(_ihfft)
def ihfft(x: Any, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Tensor:
    """The inverse of :func:`hfft`: the first half of a Hermitian signal from a
    real spectrum.

    >>> import eagerrt as ert
    >>> ert.fft.ihfft(ert.asarray([1.0, 1.0, 1.0, 1.0])).numpy()
    array([1.-0.j, 0.-0.j, 0.-0.j])
    """
    return _ihfft(x, n=n, axis=axis, norm=norm)


@exposes(_fftn)
def fftn(x: Any, /, *, s: Sizes = None, axes: Sizes = None, norm: str = "backward") -> Tensor:
    """The n-dimensional transform over ``axes`` (by default the last len(s), or
    all), of lengths ``s`` (-1 keeps an axis' size).

    >>> import eagerrt as ert
    >>> ert.fft.fftn(ert.ones((2, 3))).numpy().real
    array([[6., 0., 0.],
           [0., 0., 0.]])
    """
    return _fftn(x, s=s, axes=axes, norm=norm)


@exposes(_ifftn)
def ifftn(x: Any, /, *, s: Sizes = None, axes: Sizes = None, norm: str = "backward") -> Tensor:
    """The inverse of :func:`fftn`.

    >>> import eagerrt as ert
    >>> ert.fft.ifftn(ert.fft.fftn(ert.ones((2, 2)))).numpy().real
    array([[1., 1.],
           [1., 1.]])
    """
    return _ifftn(x, s=s, axes=axes, norm=norm)


@exposes(_rfftn)
def rfftn(x: Any, /, *, s: Sizes = None, axes: Sizes = None, norm: str = "backward") -> Tensor:
    """The n-dimensional transform of real input; the last of ``axes`` keeps
    only its non-negative frequencies.

    >>> import eagerrt as ert
    >>> ert.fft.rfftn(ert.ones((2, 4))).shape
    (2, 3)
    """
    return _rfftn(x, s=s, axes=axes, norm=norm)


@exposes(_irfftn)
def irfftn(x: Any, /, *, s: Sizes = None, axes: Sizes = None, norm: str = "backward") -> Tensor:
    """The inverse of :func:`rfftn` (the last axis' length defaults to 2 * (m - 1)).

    >>> import eagerrt as ert
    >>> ert.fft.irfftn(ert.fft.rfftn(ert.ones((2, 4)))).numpy()
    array([[1., 1., 1., 1.],
           [1., 1., 1., 1.]])
    """
    return _irfftn(x, s=s, axes=axes, norm=norm)


# -- frequencies and shifts -----------------------------------------------------------------
def _freq_rule(*, n: Any, d: Any, dtype: Any, half: bool) -> RuleOut:
    points = _points("fftfreq", n)
    if isinstance(d, bool) or not isinstance(d, (int, float, np.integer, np.floating)):
        raise TypeError(f"d must be a real number, got {type(d).__name__}")
    if d == 0:
        raise ArgumentError("d (the sample spacing) must not be 0")
    dt = np.dtype(np.float64) if dtype is None else to_dtype(dtype)
    if dt.kind != "f":
        raise TypeError(f"the frequencies' dtype must be a real floating type, not {dt}")
    return ((points // 2 + 1) if half else points,), dt


def _freq_kernel(*, n: int, d: float, dtype: Any, half: bool) -> Any:
    freqs = np.fft.rfftfreq(n, d) if half else np.fft.fftfreq(n, d)
    return freqs.astype(np.dtype(np.float64) if dtype is None else to_dtype(dtype))


_freq = define_op("fft.fftfreq", _freq_rule, doc="Sample frequencies.")
_freq.register_kernel(GENERIC, _freq_kernel)


@exposes(_freq)
def fftfreq(
    n: int, /, *, d: float = 1.0, dtype: Any = None, device: str | Device | None = None
) -> Tensor:
    """The sample frequencies of an ``n``-point :func:`fft` with sample spacing
    ``d``: ``[0, 1, ..., n//2 - 1 (or so), -n//2, ..., -1] / (d * n)``, in
    ``dtype`` (default float64).

    >>> import eagerrt as ert
    >>> ert.fft.fftfreq(4, d=0.5).numpy()
    array([ 0. ,  0.5, -1. , -0.5])
    """
    return _freq(n=n, d=d, dtype=dtype, half=False, device=device)


@exposes(_freq)
def rfftfreq(
    n: int, /, *, d: float = 1.0, dtype: Any = None, device: str | Device | None = None
) -> Tensor:
    """The non-negative sample frequencies of an ``n``-point :func:`rfft`.

    >>> import eagerrt as ert
    >>> ert.fft.rfftfreq(4, d=0.5, dtype="float32").numpy()
    array([0. , 0.5, 1. ], dtype=float32)
    """
    return _freq(n=n, d=d, dtype=dtype, half=True, device=device)


def _shift_rule(x: Any, axes: Any = None, inverse: bool = False) -> RuleOut:
    x = _need_tensor("fftshift", x, ndim=0)
    normalize_axes(axes, x.ndim)
    return x.shape, x.dtype


def _shift_kernel(x: Any, axes: Any = None, inverse: bool = False) -> Any:
    shifted = np.fft.ifftshift if inverse else np.fft.fftshift
    return shifted(x, axes=normalize_axes(axes, x.ndim))


_shift = define_op("fft.fftshift", _shift_rule, operands=1, doc="Roll to center.")
_shift.register_kernel(GENERIC, _shift_kernel)


@exposes(_shift)
def fftshift(x: Any, /, *, axes: int | Sequence[int] | None = None) -> Tensor:
    """Roll the zero frequency to the middle of ``axes`` (default: all).

    >>> import eagerrt as ert
    >>> ert.fft.fftshift(ert.fft.fftfreq(5)).numpy()
    array([-0.4, -0.2,  0. ,  0.2,  0.4])
    """
    return _shift(x, axes=axes, inverse=False)


@exposes(_shift)
def ifftshift(x: Any, /, *, axes: int | Sequence[int] | None = None) -> Tensor:
    """The inverse of :func:`fftshift` (they differ for odd lengths).

    >>> import eagerrt as ert
    >>> ert.fft.ifftshift(ert.fft.fftshift(ert.arange(5))).numpy()
    array([0, 1, 2, 3, 4])
    """
    return _shift(x, axes=axes, inverse=True)
