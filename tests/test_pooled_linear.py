"""Linear layers as one numba parallel loop on MKL's oneTBB workers
(eagerrt.backends.cpu.pooled_linear): eager calls, compiled plans with fused
epilogues, the one-thread form under load, and the fallbacks."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

import eagerrt as ert
from eagerrt.backends.cpu import linear as cpu_linear
from eagerrt.backends.cpu import pooled_linear as _pooled_linear
from eagerrt.backends.cpu import threads as cpu_threads

RNG = np.random.default_rng(7)


def rand(*shape: int, dtype: Any = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def close(got: Any, want: Any, dtype: Any = np.float32, scale: float = 1.0) -> None:
    got = got.numpy() if isinstance(got, ert.Tensor) else np.asarray(got)
    assert got.shape == want.shape and got.dtype == want.dtype
    tol = (2e-5 if np.dtype(dtype) == np.float32 else 1e-12) * scale
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.fixture
def pool_runs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, bool]]:
    """Skips without the pool; else records each pool kernel call as (kernel's
    name, column parts, whether it ran), eager calls' kept kernels cleared."""
    from eagerrt.backends.cpu import shared_pool as _shared_pool

    if not _shared_pool.ready():
        pytest.skip("MKL on oneTBB (the mkl extra) with numba's loops on oneTBB is not here")
    monkeypatch.setattr(cpu_linear, "_POOLED_LINEARS", {})
    runs: list[tuple[str, int, bool]] = []
    real = _pooled_linear.PooledLinear.__call__

    def spy(self: Any, *args: Any) -> bool:
        ran = real(self, *args)
        runs.append((self.kernel.__name__, self.columns, ran))
        return ran

    monkeypatch.setattr(_pooled_linear.PooledLinear, "__call__", spy)
    return runs


#: (x's shape, weight's shape, column parts expected on two threads)
LINEARS = [
    ((3, 100, 96), (200, 96), 0),  # blocks of rows
    ((128, 512), (64, 512), 2),  # few rows of a deep weight: by columns
    ((128, 600), (70, 600), 2),  # columns cut at 48, not a multiple of 16 in all
    ((4100, 32), (40, 32), 0),  # eight blocks of rows
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("with_bias", [True, False])
def test_eager_linear_runs_as_one_pool_kernel(
    pool_runs: list[Any], dtype: Any, with_bias: bool
) -> None:
    for xs, ws, columns in LINEARS:
        x, w = rand(*xs, dtype=dtype), rand(*ws, dtype=dtype)
        b = rand(ws[0], dtype=dtype)
        want = x.astype(np.float64) @ w.T.astype(np.float64) + (b if with_bias else 0)
        with ert.config.override(num_threads=2):
            got = ert.linear(x, w, b) if with_bias else ert.linear(x, w)
            close(got, want.astype(dtype), dtype, scale=xs[-1] ** 0.5)
        assert pool_runs[-1] == ("linear_on_pool", columns, True)


def test_row_blocks_give_every_thread_as_many() -> None:
    for m in (1, 2, 3, 7, 100, 128, 1000, 4096, 4100, 9999):
        for threads in (1, 2, 4):
            bounds = _pooled_linear.row_blocks(m, threads)
            count = len(bounds) - 1
            assert bounds[0] == 0 and bounds[-1] == m
            assert all(a < b for a, b in itertools.pairwise(bounds))  # no empty block
            assert count % threads == 0 or count == m  # as many a thread, unless too few rows
            if m >= 8 * count:
                assert all(edge % 8 == 0 for edge in bounds[:-1])
            if m >= 2 * _pooled_linear.BLOCK_ROWS * threads:
                assert (
                    max(b - a for a, b in itertools.pairwise(bounds))
                    < 2 * _pooled_linear.BLOCK_ROWS
                )


def layer(x: Any, residual: Any, weights: list[Any]) -> Any:
    """A transformer's feed-forward: GELU, a per-feature scale (whole), a scalar
    and a residual read by rows."""
    w, b, scale = weights
    return ert.gelu(ert.linear(x, w, b)) * scale + residual * 0.5


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    ("xs", "n", "columns"),
    [((2, 64, 128), 160, 0), ((128, 512), 64, 2), ((2, 3, 40, 48), 256, 0)],  # 3-, 2-, 4-d
)
def test_compiled_epilogue_runs_in_the_pool_kernel(
    pool_runs: list[Any], monkeypatch: pytest.MonkeyPatch, dtype: Any, xs: Any, n: int, columns: int
) -> None:
    # The product and its epilogue are one generated kernel ("pooled"): equal to
    # the eager ops, set up once (when the plan is made), with the residual a
    # graph input (read-only) and by rows.
    made: list[int] = []
    setup = _pooled_linear.PooledLinear.__init__
    monkeypatch.setattr(
        _pooled_linear.PooledLinear, "__init__", lambda self, *a: made.append(1) or setup(self, *a)
    )
    k = xs[-1]
    weights = [ert.asarray(a) for a in (rand(n, k, dtype=dtype), rand(n, dtype=dtype))]
    weights.append(ert.asarray(rand(*[1] * (len(xs) - 1), n, dtype=dtype)))
    x, residual = rand(*xs, dtype=dtype), rand(*xs[:-1], n, dtype=dtype)
    compiled = ert.function(lambda x, r: layer(x, r, weights))
    with ert.config.override(num_threads=2):
        want = layer(x, residual, weights).numpy()
        pool_runs.clear()
        for _ in range(2):
            close(compiled(ert.asarray(x), ert.asarray(residual)), want, dtype, scale=k**0.5)
        before = len(made)
        close(compiled(ert.asarray(x), ert.asarray(residual)), want, dtype, scale=k**0.5)
        assert len(made) == before  # nothing set up per call
    graph = compiled.compiled_for(ert.asarray(x), ert.asarray(residual)).graph
    assert [node.name for node in graph.nodes] == ["fused[linear,gelu,multiply,multiply,add]"]
    assert pool_runs == [("pooled", columns, True)] * 3


def test_the_pool_kernels_run_alone_while_other_tasks_have_the_cores(
    pool_runs: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Other requests' tasks on the other cores: still one kernel, but on this
    # thread alone (one block), MKL held to it too.
    import numba

    from eagerrt.backends.cpu import blas as _blas

    seen: list[tuple[int, int | None, int]] = []

    def watching(kernel: Any) -> Any:
        def spy(*args: Any) -> None:
            held = _blas.hold_to_one_thread()  # what MKL's count was, set back at once
            _blas.release_thread_hold(held)
            seen.append((numba.get_num_threads(), held, len(args[-2]) - 1))
            kernel(*args)

        spy.__name__ = kernel.__name__
        return spy

    monkeypatch.setattr(cpu_threads, "cores_taken", lambda others=1: True)
    monkeypatch.setattr(_pooled_linear, "linear_on_pool", watching(_pooled_linear.linear_on_pool))
    x, w, b = rand(128, 512), rand(64, 512), rand(64)
    close(ert.linear(x, w, b), x @ w.T + b, scale=25)
    x2, w2 = rand(300, 96), rand(200, 96)
    close(ert.linear(x2, w2), x2 @ w2.T, scale=10)
    assert seen == [(1, 1, 1), (1, 1, 1)]
    assert [ran for *_, ran in pool_runs] == [True, True]


def test_the_pool_kernels_step_aside_where_they_cannot_run(pool_runs: list[Any]) -> None:
    x, w, b = rand(300, 96), rand(200, 96), rand(200)
    want = x @ w.T + b
    weights = [ert.asarray(w), ert.asarray(b)]
    compiled = ert.function(lambda x: ert.linear(x, *weights))
    close(compiled(ert.asarray(x)), want, scale=10)
    assert pool_runs == [("linear_on_pool", 0, True)]
    pool_runs.clear()
    # Settings changed after the plan set its kernel up: it declines, the plan
    # runs the product as before.
    with ert.config.override(blas="numpy"):
        close(compiled(ert.asarray(x)), want, scale=10)
    with ert.config.override(num_threads=1):
        close(compiled(ert.asarray(x)), want, scale=10)
    strided = np.asfortranarray(x)  # rows the kernel can't read in place
    close(ert.linear(strided, w, b), want, scale=10)
    assert [ran for *_, ran in pool_runs] == [False, False, False]
    pool_runs.clear()
    with ert.config.override(blas="numpy"):  # eager calls make no kernel then
        close(ert.linear(x, w, b), want, scale=10)
    small, ws = rand(8, 16), rand(4, 16)
    close(ert.linear(small, ws), small @ ws.T, scale=4)  # too little work
    assert pool_runs == []
    close(ert.linear(x, w, b), want, scale=10)  # numpy's BLAS no longer asked: the pool
    assert pool_runs == [("linear_on_pool", 0, True)]


def test_by_columns_only_for_few_rows_of_a_deep_weight() -> None:
    assert _pooled_linear.by_columns(128, 384, 1536, 2)  # MiniLM's second feed-forward
    assert not _pooled_linear.by_columns(128, 1536, 384, 2)  # its first: by rows
    assert not _pooled_linear.by_columns(4096, 384, 1536, 2)  # batch 32: rows enough
    assert not _pooled_linear.by_columns(128, 384, 1536, 1)


def test_a_pool_kernels_thread_count_is_set_only_when_it_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # numba's count is per thread; asking numba for it costs a microsecond a
    # kernel, so the count this thread set is remembered and set only on change.
    import threading

    import numba

    from eagerrt.backends.cpu import shared_pool as _shared_pool

    sets: list[int] = []
    real = numba.set_num_threads
    monkeypatch.setattr(numba, "set_num_threads", lambda n: sets.append(n) or real(n))

    seen: list[int] = []

    def calls() -> None:
        seen.append(_shared_pool.pool_threads())
        for alone in (True, True, False, False):
            seen.append(_shared_pool.threads_for_call(alone))
            seen.append(numba.get_num_threads())

    worker = threading.Thread(target=calls)  # a fresh thread: nothing set there yet
    worker.start()
    worker.join()
    most = seen.pop(0)
    assert seen == [1, 1, 1, 1, most, most, most, most]
    assert sets == ([1] if most == 1 else [1, most])
