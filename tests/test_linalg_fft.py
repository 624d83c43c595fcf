"""The Array API's linalg and fft extensions (and vecdot, matrix_transpose) against
numpy: values, dtypes, batches, namedtuples, signatures and errors."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import eagerrt as ert

DTYPES = ["float32", "float64", "complex64", "complex128"]
BATCHES = [(), (3,), (2, 2), (0,)]
rng = np.random.default_rng(7)


def tolerance(dtype: Any) -> float:
    return 1e-4 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-10


def random(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def well_conditioned(batch: tuple[int, ...], n: int, dtype: Any) -> np.ndarray:
    return (random((*batch, n, n), dtype) + 3 * n * np.eye(n)).astype(dtype)


def positive_definite(batch: tuple[int, ...], n: int, dtype: Any) -> np.ndarray:
    a = random((*batch, n, n), dtype)
    return (a @ np.conj(np.swapaxes(a, -1, -2)) + n * np.eye(n)).astype(dtype)


def check(t: ert.Tensor, expected: Any, dtype: Any = None) -> None:
    """Same shape and dtype as numpy's result (metadata and data), close values."""
    expected = np.asarray(expected)
    got = t.numpy()
    assert t.shape == expected.shape == got.shape, (t.shape, expected.shape)
    assert t.dtype == expected.dtype == got.dtype, (t.dtype, expected.dtype)
    tol = tolerance(dtype or expected.dtype)
    np.testing.assert_allclose(got, expected, rtol=tol, atol=tol * 10)


def hermitian_t(a: np.ndarray) -> np.ndarray:
    return np.conj(np.swapaxes(a, -1, -2))


# -- main namespace ------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_vecdot_conjugates_the_first_operand_and_broadcasts(dtype: str) -> None:
    a, b = random((4, 1, 3), dtype), random((5, 3), dtype)
    check(ert.vecdot(a, b), np.sum(np.conj(a) * b, axis=-1))
    c, d = random((2, 3, 4), dtype), random((3, 4), dtype)
    check(ert.vecdot(c, d, axis=-2), np.sum(np.conj(c) * d, axis=-2))
    check(ert.vecdot(c, c, axis=1), np.sum(np.conj(c) * c, axis=1))  # from the front, same ndim


def test_vecdot_and_cross_refuse_bad_axes_and_sizes() -> None:
    with pytest.raises(ert.ShapeError, match="vecdot"):
        ert.vecdot(ert.ones((2, 3)), ert.ones((2, 4)))
    with pytest.raises(ert.ShapeError):
        ert.vecdot(ert.ones((2, 3)), ert.ones(3), axis=-2)  # past the 1-d operand
    with pytest.raises(ert.ShapeError):
        ert.vecdot(ert.ones(()), ert.ones(()))
    with pytest.raises(ert.ShapeError, match="3 elements"):
        ert.linalg.cross(ert.ones(4), ert.ones(4))


@pytest.mark.parametrize("batch", BATCHES)
def test_matrix_transpose(batch: tuple[int, ...]) -> None:
    x = random((*batch, 2, 3), "float32")
    check(ert.matrix_transpose(x), np.swapaxes(x, -1, -2))
    with pytest.raises(ert.ShapeError):
        ert.matrix_transpose(ert.ones(3))


def test_matmul_and_tensordot_in_both_namespaces() -> None:
    a, b = random((2, 3, 4), "float64"), random((4, 5), "float64")
    check(ert.linalg.matmul(a, b), a @ b)
    check(ert.linalg.tensordot(a, b, axes=1), np.tensordot(a, b, axes=1))
    check(ert.linalg.tensordot(a, a, axes=([1, 2], [1, 2])), np.tensordot(a, a, ([1, 2], [1, 2])))
    check(ert.tensordot(a, b, axes=1), np.tensordot(a, b, axes=1))
    assert ert.linalg.matmul is ert.matmul and ert.linalg.tensordot is ert.tensordot
    # The op behind tensordot still takes axes by position, as numpy's does.
    check(ert.tensordot.op(a, b, 1), np.tensordot(a, b, 1))  # type: ignore[attr-defined]


# -- decompositions and inverses ---------------------------------------------------------
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_inverse_like_functions_match_numpy(dtype: str, batch: tuple[int, ...]) -> None:
    a = well_conditioned(batch, 3, dtype)
    b = random((*batch, 3, 2), dtype)
    check(ert.linalg.inv(a), np.linalg.inv(a))
    check(ert.linalg.det(a), np.linalg.det(a))
    check(ert.linalg.solve(a, b), np.linalg.solve(a, b))
    check(ert.linalg.pinv(b), np.linalg.pinv(b), dtype)
    check(ert.linalg.matrix_power(a, 3), np.linalg.matrix_power(a, 3))
    check(ert.linalg.matrix_power(a, -2), np.linalg.matrix_power(a, -2))
    check(ert.linalg.matrix_power(a, 0), np.linalg.matrix_power(a, 0))
    check(ert.linalg.matrix_rank(b), np.linalg.matrix_rank(b))
    sign, logabsdet = np.linalg.slogdet(a)
    result = ert.linalg.slogdet(a)
    check(result.sign, sign)
    check(result.logabsdet, logabsdet)


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_hermitian_decompositions_match_numpy(dtype: str, batch: tuple[int, ...]) -> None:
    a = positive_definite(batch, 4, dtype)
    check(ert.linalg.cholesky(a), np.linalg.cholesky(a))
    check(ert.linalg.cholesky(a, upper=True), np.linalg.cholesky(a, upper=True))
    check(ert.linalg.eigvalsh(a), np.linalg.eigvalsh(a), dtype)
    w, v = ert.linalg.eigh(a)
    check(w, np.linalg.eigvalsh(a), dtype)
    assert v.dtype == np.dtype(dtype) and v.shape == a.shape
    # Eigenvectors are unique up to phase: check a v = v w instead.
    vv, ww = v.numpy(), w.numpy()
    tol = tolerance(dtype) * 100
    np.testing.assert_allclose(a @ vv, vv * ww[..., None, :], rtol=tol, atol=tol)


@pytest.mark.parametrize("shape", [(4, 3), (3, 4), (2, 0, 3, 3), (2, 1, 1), (5, 2, 3)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_svd_and_qr_match_numpy(dtype: str, shape: tuple[int, ...]) -> None:
    x = random(shape, dtype)
    for full in (True, False):
        u, s, vh = np.linalg.svd(x, full_matrices=full)
        result = ert.linalg.svd(x, full_matrices=full)
        assert (result.U.shape, result.S.shape, result.Vh.shape) == (u.shape, s.shape, vh.shape)
        check(result.S, s, dtype)
        assert result.U.dtype == u.dtype and result.Vh.dtype == vh.dtype
        k = s.shape[-1]
        rebuilt = (
            result.U.numpy()[..., :k]
            * result.S.numpy()[..., None, :]
            @ result.Vh.numpy()[..., :k, :]
        )
        np.testing.assert_allclose(
            rebuilt, x, rtol=tolerance(dtype) * 10, atol=tolerance(dtype) * 10
        )
    check(ert.linalg.svdvals(x), np.linalg.svdvals(x), dtype)
    for mode in ("reduced", "complete"):
        q, r = np.linalg.qr(x, mode=mode)
        result = ert.linalg.qr(x, mode=mode)
        check(result.Q, q)
        check(result.R, r)


def test_one_by_one_and_empty_matrices() -> None:
    one = np.array([[4.0]], dtype="float32")
    check(ert.linalg.inv(one), np.linalg.inv(one))
    check(ert.linalg.cholesky(one), np.linalg.cholesky(one))
    check(ert.linalg.det(one), np.linalg.det(one))
    empty = np.zeros((0, 0))
    check(ert.linalg.det(empty), np.linalg.det(empty))
    check(ert.linalg.inv(empty), np.linalg.inv(empty))
    check(ert.linalg.matrix_rank(np.zeros((2, 0, 3))), np.zeros(2, dtype=np.intp))
    check(ert.linalg.pinv(np.zeros((2, 0, 3))), np.linalg.pinv(np.zeros((2, 0, 3))))
    for order in ("fro", "nuc", 1, 2, np.inf, None):
        check(ert.linalg.matrix_norm(np.zeros((3, 0)), ord=order), np.array(0.0))
    check(ert.linalg.vector_norm(np.zeros((2, 0)), axis=1, ord=np.inf), np.zeros(2))


def test_integer_input_is_computed_in_float64() -> None:
    a = np.array([[2, 1], [1, 3]])
    check(ert.linalg.inv(a), np.linalg.inv(a))
    check(ert.linalg.det(a), np.linalg.det(a))
    check(ert.linalg.matrix_power(a, 2), np.linalg.matrix_power(a, 2))  # stays integer
    assert ert.linalg.eigh(a).eigenvectors.dtype == np.float64


def test_namedtuples_have_the_standards_fields() -> None:
    x = positive_definite((), 3, "float64")
    assert ert.linalg.eigh(x)._fields == ("eigenvalues", "eigenvectors")
    assert ert.linalg.qr(x)._fields == ("Q", "R")
    assert ert.linalg.slogdet(x)._fields == ("sign", "logabsdet")
    assert ert.linalg.svd(x)._fields == ("U", "S", "Vh")
    for result in (ert.linalg.eigh(x), ert.linalg.svd(x)):
        assert all(isinstance(t, ert.Tensor) for t in result)
        assert all(t.numpy().flags.c_contiguous for t in result)  # copies, not record views
    assert ert.linalg.EighResult is type(ert.linalg.eigh(x))


# -- rtol, solve's broadcasting, norms, small products ------------------------------------
def test_rank_and_pinv_take_rtol_as_float_or_tensor() -> None:
    x = np.stack([np.diag([1.0, 1e-3, 0.0]), np.diag([1.0, 0.5, 0.25])])
    check(ert.linalg.matrix_rank(x), np.linalg.matrix_rank(x))
    check(ert.linalg.matrix_rank(x, rtol=0.1), np.linalg.matrix_rank(x, rtol=0.1))
    rtol = np.array([0.1, 0.3])
    check(ert.linalg.matrix_rank(x, rtol=ert.asarray(rtol)), np.array([1, 2]))
    check(ert.linalg.matrix_rank(x, rtol=rtol), np.array([1, 2]))
    check(ert.linalg.pinv(x, rtol=0.1), np.linalg.pinv(x, rtol=0.1))
    # A tolerance per matrix in a larger batch broadcasts the batch.
    assert ert.linalg.pinv(x, rtol=np.full((4, 1), 0.1)).shape == (4, 2, 3, 3)


def test_solve_follows_the_2024_rules_for_x2() -> None:
    a = well_conditioned((4,), 3, "float64")
    vector = random((3,), "float64")
    check(ert.linalg.solve(a, vector), np.linalg.solve(a, vector))  # 1-d: a vector
    stacked = random((2, 1, 3, 5), "float64")
    check(ert.linalg.solve(a, stacked), np.linalg.solve(a, stacked))  # batches broadcast
    matrix = random((3, 4), "float64")  # 2-d: a matrix (M, K), never a stack of vectors
    check(ert.linalg.solve(a, matrix), np.linalg.solve(a, matrix))
    with pytest.raises(ert.ShapeError, match="solve"):
        ert.linalg.solve(a, np.ones((4, 3)))
    with pytest.raises(ert.ShapeError):
        ert.linalg.solve(a, np.ones(4))
    with pytest.raises(ert.ShapeError):
        ert.linalg.solve(a, np.ones((3, 3, 1)))  # batches 4 and 3 don't broadcast


@pytest.mark.parametrize("dtype", DTYPES)
def test_norms_match_numpy(dtype: str) -> None:
    x = random((2, 3, 4), dtype)
    for order in ("fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf):
        check(ert.linalg.matrix_norm(x, ord=order), np.linalg.matrix_norm(x, ord=order), dtype)
    check(ert.linalg.matrix_norm(x, keepdims=True), np.linalg.matrix_norm(x, keepdims=True), dtype)
    for order in (2, 1, 0, 3.5, np.inf, -np.inf):
        check(ert.linalg.vector_norm(x, ord=order), np.linalg.vector_norm(x, ord=order), dtype)
    for axis in (1, (0, 2), -1):
        expected = np.linalg.vector_norm(x, axis=axis, keepdims=True)
        check(ert.linalg.vector_norm(x, axis=axis, keepdims=True), expected, dtype)


def test_trace_diagonal_outer_cross_match_numpy() -> None:
    x = random((2, 3, 4), "float64")
    for offset in (-3, -1, 0, 2, 5):
        check(ert.linalg.diagonal(x, offset=offset), np.diagonal(x, offset, -2, -1))
        check(ert.linalg.trace(x, offset=offset), np.trace(x, offset, -2, -1))
    small = np.arange(8, dtype="int8").reshape(2, 2, 2)
    check(ert.linalg.trace(small), np.trace(small, axis1=-2, axis2=-1))  # widened to int64
    check(ert.linalg.trace(small, dtype="float32"), np.trace(small, 0, -2, -1, dtype="float32"))
    u, v = random((3,), "complex64"), random((4,), "float32")
    check(ert.linalg.outer(u, v), np.outer(u, v))
    a, b = random((2, 3), "float32"), random((4, 1, 3), "float32")
    check(ert.linalg.cross(a, b), np.cross(a, b))
    c, d = random((3, 5), "float64"), random((3, 5), "float64")
    check(ert.linalg.cross(c, d, axis=0), np.cross(c, d, axis=0))
    check(ert.linalg.cross(c, d, axis=-2), np.cross(c, d, axis=0))


# -- errors -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda: ert.linalg.inv(ert.ones((2, 3))), ert.ShapeError),
        (lambda: ert.linalg.det(ert.ones((3, 2))), ert.ShapeError),
        (lambda: ert.linalg.det(ert.ones(3)), ert.ShapeError),
        (lambda: ert.linalg.cholesky(ert.ones((2, 3, 4))), ert.ShapeError),
        (lambda: ert.linalg.eigh(ert.ones((2, 3))), ert.ShapeError),
        (lambda: ert.linalg.solve(ert.ones((3, 3)), ert.ones((2, 1))), ert.ShapeError),
        (lambda: ert.linalg.solve(ert.ones((2, 3)), ert.ones(2)), ert.ShapeError),
        (lambda: ert.linalg.outer(ert.ones((2, 2)), ert.ones(2)), ert.ShapeError),
        (lambda: ert.linalg.inv(ert.ones((2, 2), dtype="float16")), ert.DTypeError),
        (lambda: ert.linalg.matrix_power(ert.ones((2, 2)), 1.5), ert.DTypeError),
        (lambda: ert.linalg.qr(ert.ones((2, 2)), mode="r"), ert.ArgumentError),
        (lambda: ert.linalg.matrix_norm(ert.ones((2, 2)), ord=3), ert.ArgumentError),
        (lambda: ert.linalg.vector_norm(ert.ones(2), axis=(0, 0)), ert.ShapeError),
        (
            lambda: ert.linalg.cross(ert.ones(3, dtype=bool), ert.ones(3, dtype=bool)),
            ert.DTypeError,
        ),
        (lambda: ert.fft.fft(ert.ones(4), norm="none"), ert.ArgumentError),
        (lambda: ert.fft.fft(ert.ones(4), n=0), ert.ShapeError),
        (lambda: ert.fft.fft(ert.ones(0)), ert.ShapeError),
        (lambda: ert.fft.irfft(ert.ones(1)), ert.ShapeError),
        (lambda: ert.fft.rfft(ert.ones(4, dtype="complex64")), ert.DTypeError),
        (lambda: ert.fft.fftn(ert.ones((2, 2)), s=(2, 2, 2)), ert.ShapeError),
        (lambda: ert.fft.fftn(ert.ones((2, 2)), s=(2,), axes=(0, 1)), ert.ShapeError),
        (lambda: ert.fft.rfftn(ert.ones((2, 2)), axes=()), ert.ShapeError),
        (lambda: ert.fft.fft(ert.ones(4), axis=1), IndexError),
        (lambda: ert.fft.fftfreq(4, dtype="int32"), ert.DTypeError),
        (lambda: ert.fft.fftfreq(0), ert.ShapeError),
        (lambda: ert.fft.fftfreq(4, d=0.0), ert.ArgumentError),
    ],
)
def test_bad_calls_fail_at_the_call(call: Callable[[], Any], error: type[Exception]) -> None:
    with pytest.raises(error) as info:
        call()
    assert __file__ in str(info.value)  # names the user's line


def test_singular_matrices_fail_on_read(clean_errors: None) -> None:
    singular = ert.asarray([[1.0, 2.0], [2.0, 4.0]])
    inverse = ert.linalg.inv(singular)  # the call itself succeeds: shape and dtype known
    assert inverse.shape == (2, 2)
    with pytest.raises(ert.KernelError, match=r"linalg\.inv"):
        inverse.numpy()
    with pytest.raises(ert.KernelError):
        ert.linalg.solve(singular, ert.ones(2)).numpy()
    with pytest.raises(ert.KernelError, match="cholesky"):
        ert.linalg.cholesky(-ert.eye(2)).numpy()


def test_failed_decomposition_fails_every_field_on_a_worker(clean_errors: None) -> None:
    with ert.config.override(inline_threshold_ns=0):  # every op on a worker thread
        bad = ert.linalg.svd(ert.full((2, 2), float("nan")))  # LAPACK: did not converge
        good = ert.linalg.svd(ert.eye(3), full_matrices=False)
    assert (bad.U.shape, bad.S.shape, bad.Vh.shape) == ((2, 2), (2,), (2, 2))
    for field in bad:
        with pytest.raises(ert.KernelError, match=r"linalg\.svd"):
            field.numpy()
    np.testing.assert_allclose(good.S.numpy(), np.ones(3))


# -- einsum -------------------------------------------------------------------------------
EINSUM_CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),  # a matrix product
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),  # attention's scores
    ("i,j->ij", [(3,), (4,)]),  # outer
    ("ii", [(3, 3)]),  # trace, implicit output
    ("ii->i", [(4, 4)]),  # diagonal
    ("ij->ji", [(2, 5)]),
    ("ij,jk", [(3, 4), (4, 2)]),  # implicit: letters seen once, sorted
    ("...ij,...jk->...ik", [(1, 3, 4), (2, 1, 4, 5)]),  # ellipses broadcast
    ("...ij", [(2, 3, 4)]),  # implicit output keeps the ellipsis
    ("ij->", [(3, 4)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
    (" bi , bj -> bij ", [(2, 3), (2, 4)]),  # spaces
]


@pytest.mark.parametrize("equation, shapes", EINSUM_CASES)
def test_einsum_matches_numpy_eager_and_compiled(equation: str, shapes: list[Any]) -> None:
    arrays = [rng.standard_normal(s) for s in shapes]
    want = np.einsum(equation, *arrays)
    got = ert.einsum(equation, *arrays)
    assert got.shape == want.shape and got.dtype == want.dtype  # known at the call
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)
    compiled = ert.function(lambda *xs: ert.einsum(equation, *xs) * 2)
    np.testing.assert_allclose(compiled(*arrays).numpy(), want * 2, rtol=1e-12, atol=1e-12)


def test_einsum_dtypes_follow_numpy() -> None:
    a, b = np.arange(6).reshape(2, 3), rng.standard_normal((3, 2)).astype(np.float32)
    assert ert.einsum("ij,jk->ik", a, a.T).dtype == np.einsum("ij,jk->ik", a, a.T).dtype
    np.testing.assert_array_equal(ert.einsum("ij,jk->ik", a, a.T).numpy(), a @ a.T)
    assert ert.einsum("ij,jk", b.T, b).dtype == np.float32


@pytest.mark.parametrize(
    "equation, shapes, error, match",
    [
        ("ij,jk->ik", [(3, 4)], ert.ShapeError, "2 operands, 1 given"),
        ("ij,jk->ik", [(3, 4), (5, 2)], ert.ShapeError, "'j' has size 4 and 5"),
        ("ijk->i", [(3, 4)], ert.ShapeError, "don't fit a 2-d operand"),
        ("ij->ix", [(3, 4)], ert.ShapeError, "in no operand"),
        ("ij->ii", [(3, 3)], ert.ShapeError, "repeats a subscript"),
        ("i1->i", [(3, 3)], ert.ShapeError, "subscripts are letters"),
        ("ii->i", [(3, 4)], ert.ShapeError, "'i' has size 3 and 4"),
        ("...i,...i->...", [(2, 3), (4, 3)], ert.ShapeError, "broadcast"),
    ],
)
def test_einsum_bad_equations_fail_at_the_call(
    equation: str, shapes: list[Any], error: type, match: str
) -> None:
    with pytest.raises(error, match=match):
        ert.einsum(equation, *(np.ones(s) for s in shapes))


def test_einsum_equation_must_be_a_string() -> None:
    with pytest.raises(ert.ArgumentError, match="must be a str"):
        ert.einsum(3, np.ones(2))  # type: ignore[arg-type]


# -- signatures ---------------------------------------------------------------------------
P, K, PK = "positional-only", "keyword-only", "positional or keyword"
SIGNATURES: dict[str, list[tuple[str, str]]] = {
    "vecdot": [("x1", P), ("x2", P), ("axis", K)],
    "matrix_transpose": [("x", P)],
    "matmul": [("x1", P), ("x2", P)],
    "tensordot": [("x1", P), ("x2", P), ("axes", K)],
    "linalg.cholesky": [("x", P), ("upper", K)],
    "linalg.cross": [("x1", P), ("x2", P), ("axis", K)],
    "linalg.det": [("x", P)],
    "linalg.diagonal": [("x", P), ("offset", K)],
    "linalg.eigh": [("x", P)],
    "linalg.eigvalsh": [("x", P)],
    "linalg.inv": [("x", P)],
    "linalg.matrix_norm": [("x", P), ("keepdims", K), ("ord", K)],
    "linalg.matrix_power": [("x", P), ("n", P)],
    "linalg.matrix_rank": [("x", P), ("rtol", K)],
    "linalg.outer": [("x1", P), ("x2", P)],
    "linalg.pinv": [("x", P), ("rtol", K)],
    "linalg.qr": [("x", P), ("mode", K)],
    "linalg.slogdet": [("x", P)],
    "linalg.solve": [("x1", P), ("x2", P)],
    "linalg.svd": [("x", P), ("full_matrices", K)],
    "linalg.svdvals": [("x", P)],
    "linalg.trace": [("x", P), ("offset", K), ("dtype", K)],
    "linalg.vector_norm": [("x", P), ("axis", K), ("keepdims", K), ("ord", K)],
    **{
        f"fft.{name}": [("x", P), ("n", K), ("axis", K), ("norm", K)]
        for name in ("fft", "ifft", "rfft", "irfft", "hfft", "ihfft")
    },
    **{
        f"fft.{name}": [("x", P), ("s", K), ("axes", K), ("norm", K)]
        for name in ("fftn", "ifftn", "rfftn", "irfftn")
    },
    "fft.fftfreq": [("n", P), ("d", K), ("dtype", K), ("device", K)],
    "fft.rfftfreq": [("n", P), ("d", K), ("dtype", K), ("device", K)],
    "fft.fftshift": [("x", P), ("axes", K)],
    "fft.ifftshift": [("x", P), ("axes", K)],
}


def resolve(name: str) -> Any:
    target: Any = ert
    for part in name.split("."):
        target = getattr(target, part)
    return target


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_signatures_are_the_standards(name: str) -> None:
    kinds = {
        inspect.Parameter.POSITIONAL_ONLY: P,
        inspect.Parameter.KEYWORD_ONLY: K,
        inspect.Parameter.POSITIONAL_OR_KEYWORD: PK,
    }
    params = inspect.signature(resolve(name)).parameters.values()
    assert [(p.name, kinds[p.kind]) for p in params] == SIGNATURES[name]


def test_namespaces_list_the_standards_functions() -> None:
    linalg = {n.split(".")[1] for n in SIGNATURES if n.startswith("linalg.")}
    shared = {"matmul", "matrix_transpose", "tensordot", "vecdot"}
    assert linalg | shared <= set(ert.linalg.__all__)
    assert all(getattr(ert.linalg, name) is getattr(ert, name) for name in shared)
    assert {n.split(".")[1] for n in SIGNATURES if n.startswith("fft.")} == set(ert.fft.__all__)
    assert {"fft", "linalg", "vecdot", "matrix_transpose"} <= set(ert.__all__)
    assert not {"cholesky", "svd", "fftshift"} & set(ert.__all__)  # extensions stay apart
    import eagerrt.linalg
    import eagerrt.ops.linalg

    assert eagerrt.linalg is ert.linalg is not eagerrt.ops.linalg


def test_positional_only_and_keyword_only_are_enforced() -> None:
    x = ert.eye(2)
    with pytest.raises(TypeError):
        ert.linalg.inv(x=x)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        ert.linalg.cholesky(x, True)  # type: ignore[misc]
    with pytest.raises(TypeError):
        ert.linalg.matrix_power(x, n=2)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        ert.vecdot(x1=x, x2=x)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        ert.vecdot(x, x, -1)  # type: ignore[misc]
    with pytest.raises(TypeError):
        ert.tensordot(x, x, 1)  # type: ignore[misc]
    with pytest.raises(TypeError):
        ert.fft.fft(x, 2)  # type: ignore[misc]
    with pytest.raises(TypeError):
        ert.matmul(x1=x, x2=x)


# -- fft ----------------------------------------------------------------------------------
COMPLEX_OF = {"float32": "complex64", "float64": "complex128"}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("norm", ["backward", "ortho", "forward"])
def test_complex_transforms_match_numpy(dtype: str, norm: str) -> None:
    x = random((3, 8), dtype)
    for name in ("fft", "ifft"):
        ours, theirs = getattr(ert.fft, name), getattr(np.fft, name)
        check(ours(x, norm=norm), theirs(x, norm=norm), dtype)
        check(ours(x, n=5, axis=0, norm=norm), theirs(x, n=5, axis=0, norm=norm), dtype)
        check(ours(x, n=11, norm=norm), theirs(x, n=11, norm=norm), dtype)
    for name in ("fftn", "ifftn"):
        ours, theirs = getattr(ert.fft, name), getattr(np.fft, name)
        check(ours(x, norm=norm), theirs(x, norm=norm), dtype)
        check(ours(x, s=(4, 6), norm=norm), theirs(x, s=(4, 6), axes=(0, 1), norm=norm), dtype)
        check(ours(x, axes=(1,), norm=norm), theirs(x, axes=(1,), norm=norm), dtype)
        check(ours(x, s=(-1, 4), axes=(0, 1)), theirs(x, s=(3, 4), axes=(0, 1)), dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_real_transforms_match_numpy_and_keep_precision(dtype: str) -> None:
    x = random((2, 3, 8), dtype)
    spectrum = ert.fft.rfft(x)
    assert spectrum.dtype == np.dtype(COMPLEX_OF[dtype])
    check(spectrum, np.fft.rfft(x), dtype)
    check(ert.fft.rfft(x, n=5, axis=1), np.fft.rfft(x, n=5, axis=1), dtype)
    check(ert.fft.ihfft(x, norm="ortho"), np.fft.ihfft(x, norm="ortho"), dtype)
    check(ert.fft.rfftn(x), np.fft.rfftn(x), dtype)
    check(ert.fft.rfftn(x, axes=(0, 2)), np.fft.rfftn(x, axes=(0, 2)), dtype)
    half = np.fft.rfft(x).astype(COMPLEX_OF[dtype])
    for n in (None, 8, 9):
        check(ert.fft.irfft(half, n=n), np.fft.irfft(half, n=n), dtype)
        check(
            ert.fft.hfft(half, n=n, norm="forward"), np.fft.hfft(half, n=n, norm="forward"), dtype
        )
    check(ert.fft.irfftn(half), np.fft.irfftn(half), dtype)
    check(
        ert.fft.irfftn(half, s=(3, 9), axes=(1, 2)),
        np.fft.irfftn(half, s=(3, 9), axes=(1, 2)),
        dtype,
    )
    # Round trips.
    np.testing.assert_allclose(ert.fft.irfft(spectrum, n=8).numpy(), x, atol=tolerance(dtype) * 10)
    assert ert.fft.irfft(spectrum).dtype == np.dtype(dtype)


def test_transforms_of_integers_and_edge_cases() -> None:
    ints = np.arange(6).reshape(2, 3)
    check(ert.fft.fft(ints), np.fft.fft(ints))
    check(ert.fft.rfft(ints), np.fft.rfft(ints))
    assert ert.fft.fftn(ert.ones((2, 3), dtype="float32"), axes=()).dtype == np.complex64
    check(ert.fft.fft(np.ones((0, 4))), np.fft.fft(np.ones((0, 4))))  # empty batch
    check(ert.fft.fft(np.ones(1)), np.fft.fft(np.ones(1)))


@pytest.mark.parametrize("n", [1, 4, 7])
def test_frequencies_and_shifts_match_numpy(n: int) -> None:
    check(ert.fft.fftfreq(n), np.fft.fftfreq(n))
    check(ert.fft.fftfreq(n, d=0.25), np.fft.fftfreq(n, d=0.25))
    check(ert.fft.rfftfreq(n, d=2.0), np.fft.rfftfreq(n, d=2.0))
    freqs = ert.fft.fftfreq(n, dtype="float32", device="cpu")
    assert freqs.dtype == np.float32 and freqs.device is ert.get_device("cpu")
    check(freqs, np.fft.fftfreq(n).astype("float32"))
    x = np.arange(n * 3).reshape(n, 3)
    check(ert.fft.fftshift(x), np.fft.fftshift(x))
    check(ert.fft.ifftshift(x), np.fft.ifftshift(x))
    check(ert.fft.fftshift(x, axes=0), np.fft.fftshift(x, axes=0))
    check(ert.fft.ifftshift(x, axes=(1,)), np.fft.ifftshift(x, axes=(1,)))


def test_big_transforms_and_decompositions_run_on_workers() -> None:
    """Their cost puts them off the calling thread; the data is the same."""
    if ert.config.sync_active:
        pytest.skip("sync mode runs every op at its call")
    x = random((256, 256), "float64")
    before = ert.stats()
    result = ert.fft.fftn(x)
    inverse = ert.linalg.inv(x + 256 * np.eye(256))
    check(result, np.fft.fftn(x))
    check(inverse, np.linalg.inv(x + 256 * np.eye(256)))
    assert ert.stats().ops_offloaded >= before.ops_offloaded + 2
