"""The kernels' products through MKL (config.blas): the same results as numpy's,
layouts read in place, everything else left to numpy, clear errors."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import eagerrt as ert
from eagerrt.backends.cpu import blas as _blas

needs_mkl = pytest.mark.skipif(
    _blas._find_mkl() is None, reason="MKL is not installed (the mkl extra)"
)
BACKENDS = ["numpy", pytest.param("mkl", marks=needs_mkl)]


@pytest.fixture
def mkl_calls(monkeypatch) -> list[str]:
    """The names of MKL's product functions called while the test runs."""
    calls: list[str] = []
    mkl = _blas._load()
    if mkl is None:
        return calls
    for table, name in ((mkl.gemm, "gemm"), (mkl.gemm_batch, "gemm_batch")):
        for dtype, fn in list(table.items()):

            def counted(*args, _fn=fn, _name=name):
                calls.append(_name)
                return _fn(*args)

            monkeypatch.setitem(table, dtype, counted)
    return calls


def _layouts(rng: np.random.Generator, dtype: type) -> list[tuple[np.ndarray, np.ndarray]]:
    a = rng.standard_normal((70, 90)).astype(dtype)
    b = rng.standard_normal((90, 50)).astype(dtype)
    wide = rng.standard_normal((100, 130)).astype(dtype)
    return [
        (a, b),  # both row-major
        (a, np.ascontiguousarray(b.T).T),  # b transposed in place (linear's weight.T)
        (np.asfortranarray(a), b),  # a transposed
        (wide[5:75, 10:100], wide[:90, 70:120]),  # sub-matrices with leading dimensions
    ]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_products_equal_numpys_for_every_layout_blas_reads_in_place(
    backend, dtype, mkl_calls
) -> None:
    rng = np.random.default_rng(0)
    tol = 1e-4 if dtype == np.float32 else 1e-10
    with ert.config.override(blas=backend):
        assert _blas.backend() == backend
        for a, b in _layouts(rng, dtype):
            out = np.full((a.shape[0], b.shape[1]), np.nan, dtype)
            _blas.matmul(a, b, out)
            np.testing.assert_allclose(out, a @ b, rtol=tol, atol=tol)
            # Into a strided window of a bigger array, the rest untouched.
            big = np.zeros((a.shape[0] + 4, b.shape[1] + 7), dtype)
            _blas.matmul(a, b, big[2:-2, 3:-4])
            np.testing.assert_allclose(big[2:-2, 3:-4], a @ b, rtol=tol, atol=tol)
            assert not big[:2].any() and not big[:, :3].any() and not big[:, -4:].any()
    assert mkl_calls == (["gemm"] * 8 if backend == "mkl" else [])


@pytest.mark.parametrize("backend", BACKENDS)
def test_batched_products_with_strided_operands(backend, mkl_calls) -> None:
    # Winograd's 16 products: a group's slice of channels from every batch entry.
    rng = np.random.default_rng(1)
    u = rng.standard_normal((16, 40, 24)).astype(np.float32)
    v = rng.standard_normal((16, 64, 90)).astype(np.float32)
    m = np.zeros((16, 48, 90), np.float32)
    with ert.config.override(blas=backend):
        _blas.matmul(u, v[:, 8:32, :70], m[:, 4:44, :70])
    np.testing.assert_allclose(m[:, 4:44, :70], u @ v[:, 8:32, :70], rtol=1e-4, atol=1e-4)
    assert not m[:, :4].any() and not m[:, 44:].any() and not m[:, :, 70:].any()
    # One matrix for every batch entry: a 1x1 convolution's weights over its images.
    w = rng.standard_normal((40, 24)).astype(np.float32)
    images = np.zeros((3, 40, 90), np.float32)
    with ert.config.override(blas=backend):
        _blas.matmul(w, v[:3, 8:32, :], images)
    np.testing.assert_allclose(images, w @ v[:3, 8:32, :], rtol=1e-4, atol=1e-4)
    assert mkl_calls == (["gemm_batch"] * 2 if backend == "mkl" else [])


@pytest.mark.parametrize("backend", BACKENDS)
def test_leading_dimensions_fold_into_the_rows_where_they_can(backend, mkl_calls) -> None:
    # ONNX's form of a linear layer: (batch, length, k) @ (k, n).
    rng = np.random.default_rng(4)
    a = rng.standard_normal((2, 64, 96)).astype(np.float32)
    w = rng.standard_normal((40, 96)).astype(np.float32)
    out = np.empty((2, 64, 40), np.float32)
    strided = np.empty((2, 64, 50), np.float32)[..., :40]  # rows 50 apart: still one matrix
    swapped = np.swapaxes(rng.standard_normal((64, 2, 96)).astype(np.float32), 0, 1)
    unfolded = np.empty((2, 64, 40), np.float32)  # swapped's rows are no one matrix
    with ert.config.override(blas=backend):
        _blas.matmul(a, w.T, out)
        _blas.matmul(a, w.T, strided)
        _blas.matmul(swapped, w.T, unfolded)
    np.testing.assert_allclose(out, a @ w.T, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(strided, a @ w.T, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(unfolded, swapped @ w.T, rtol=1e-4, atol=1e-4)
    assert mkl_calls == (["gemm", "gemm"] if backend == "mkl" else [])


@pytest.mark.parametrize("backend", BACKENDS)
def test_products_mkl_cannot_take_are_numpys(backend, mkl_calls) -> None:
    rng = np.random.default_rng(2)
    a = rng.standard_normal((64, 64))
    with ert.config.override(blas=backend):
        cases = [
            (a.astype(np.int64), a.astype(np.int64)),  # integers
            (a.astype(np.float32), a),  # mixed dtypes
            (a.astype(np.complex64), a.astype(np.complex64)),
            (a[::2, ::2], a[::2, ::2]),  # no unit stride on either axis
            (a[:4, :4], a[:4, :4]),  # too small to be worth a call
            (np.stack([a, a, a]), np.stack([a, a])[:, None]),  # broadcast batches
        ]
        for x, y in cases:
            want = np.matmul(x, y)
            out = np.zeros(want.shape, want.dtype)
            _blas.matmul(x, y, out)
            np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)
        # out overlapping an operand: numpy copies as needed, so must we.
        x = a.copy()
        want = x @ x
        _blas.matmul(x, x, x)
        np.testing.assert_allclose(x, want, rtol=1e-12)
    assert mkl_calls == []


@needs_mkl
def test_linear_and_convolutions_agree_across_backends(mkl_calls) -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((300, 384)).astype(np.float32)
    w = rng.standard_normal((512, 384)).astype(np.float32)
    b = rng.standard_normal(512).astype(np.float32)
    images = rng.standard_normal((2, 32, 16, 16)).astype(np.float32)
    k3 = rng.standard_normal((48, 32, 3, 3)).astype(np.float32)  # Winograd
    k5 = rng.standard_normal((48, 32, 5, 5)).astype(np.float32)  # gathered (im2col)

    def layer(x, w, b, images):
        return ert.linear(x, w, b), ert.conv2d(images, k3, padding=1), ert.conv2d(images, k5)

    compiled = ert.function(layer)
    results = {}
    for backend in ("numpy", "mkl"):
        with ert.config.override(blas=backend):
            inputs = [ert.asarray(v) for v in (x, w, b, images)]
            both = (*layer(*inputs), *compiled(*inputs))
            results[backend] = [t.numpy() for t in both]
    # linear's product, eager and compiled, through ctypes; the convolutions' too
    # (the gathered conv's, Winograd's 16 at once), unless they all ran as numba
    # loops on MKL's oneTBB workers, which call MKL by its address
    # (tests/test_nn.py, tests/test_pooled_linear.py).
    from eagerrt.backends.cpu import shared_pool as _shared_pool

    with ert.config.override(blas="mkl"):
        pooled = _shared_pool.ready()
    if not pooled:
        assert mkl_calls.count("gemm") >= 4 and mkl_calls.count("gemm_batch") >= 2
    for want, got in zip(results["numpy"], results["mkl"], strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


@needs_mkl
def test_a_thread_held_to_one_gets_mkls_own_count_back() -> None:
    mkl = _blas._active()
    assert mkl is not None
    saved = _blas.hold_to_one_thread()
    try:
        assert mkl.set_local_threads(1) == 1  # held: the count in force is one
    finally:
        _blas.release_thread_hold(saved)
    again = _blas.hold_to_one_thread()
    _blas.release_thread_hold(again)
    assert again == saved


def test_config_blas_takes_only_known_backends() -> None:
    with pytest.raises(ValueError, match=r"config\.blas must be one of"):
        ert.config.blas = "openblas-ilp64"
    assert ert.config.blas in ("auto", "mkl", "numpy")
    with (
        pytest.raises(ValueError, match=r"config\.blas must be one of"),
        ert.config.override(blas="MKL "),
    ):
        pass


def test_asking_for_mkl_where_it_is_missing_fails_clearly_on_await(monkeypatch) -> None:
    monkeypatch.setattr(_blas, "_find_mkl", lambda: None)
    monkeypatch.setattr(_blas, "_looked", False)
    monkeypatch.setattr(_blas, "_mkl", None)
    x = np.ones((128, 384), np.float32)
    w = np.ones((384, 384), np.float32)
    with ert.config.override(blas="mkl"), pytest.raises(ert.KernelError, match="linear") as caught:
        ert.linear(x, w).numpy()
    assert isinstance(caught.value.__cause__, _blas.MKLMissingError)
    assert "pip install 'eagerrt[mkl]'" in str(caught.value.__cause__)
    with ert.config.override(blas="auto"):  # auto: numpy's, silently
        np.testing.assert_allclose(ert.linear(x, w).numpy(), x @ w.T)


@needs_mkl
def test_mkl_threads_through_onetbb_beside_pytorchs_gnu_openmp() -> None:
    # With OpenMP, MKL either joined PyTorch's libgomp (which then throttled every
    # thread) or ran Intel's runtime with PyTorch's omp_get_thread_num (every
    # thread computed the same share: wrong results).
    pytest.importorskip("torch")
    script = textwrap.dedent(
        """
        import numpy as np, torch, eagerrt as ert
        torch.ones(64, 64) @ torch.ones(64, 64)  # GNU OpenMP loaded and running
        rng = np.random.default_rng(0)
        x = rng.standard_normal((512, 384), dtype=np.float32)
        w = rng.standard_normal((1536, 384), dtype=np.float32)
        got = ert.linear(x, w).numpy()  # one product, on MKL's two threads
        error = np.abs(got - x.astype(np.float64) @ w.T.astype(np.float64)).max()
        maps = open("/proc/self/maps").read()
        layers = [n for n in ("tbb_thread", "gnu_thread", "intel_thread", "iomp5") if n in maps]
        print(error < 1e-3, *layers)
        """
    )
    ran = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["True", "tbb_thread"]


@needs_mkl
def test_import_loads_no_mkl() -> None:
    script = textwrap.dedent(
        """
        import numpy as np, eagerrt as ert
        maps = lambda: open("/proc/self/maps").read()
        assert "libmkl_rt" not in maps(), "import eagerrt loaded MKL"
        x = np.ones((256, 256), np.float32)
        ert.linear(x, x).numpy()
        assert "libmkl_rt" in maps(), "a linear layer did not load MKL"
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "EAGERRT_BLAS"}
    ran = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
