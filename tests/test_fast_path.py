"""The fast sync path: its per-op inline cache, kernel specialization, and reads."""

from __future__ import annotations

import numpy as np
import pytest

import eagerrt as ert


def test_specializer_picks_a_kernel_per_signature_and_the_cache_reuses_it() -> None:
    op = ert.define_op("fast_path_scale", rule=lambda x: (x.shape, x.dtype), replace=True)
    calls: list[str] = []

    @op.kernel()
    def _generic(x: np.ndarray) -> np.ndarray:
        calls.append("generic")
        return x * 2

    def small(x: np.ndarray) -> np.ndarray:
        calls.append("small")
        return x + x

    @op.specialize("cpu")
    def _choose(x: ert.Tensor) -> object:
        return small if x.size <= 4 else None

    tiny, big = ert.asarray(np.arange(3.0)), ert.asarray(np.arange(10.0))
    for _ in range(3):  # the first call takes the general path, the rest the cache
        np.testing.assert_array_equal(op(tiny).numpy(), [0.0, 2.0, 4.0])
    np.testing.assert_array_equal(op(big).numpy(), np.arange(10.0) * 2)
    assert calls == ["small", "small", "small", "generic"]


def test_new_kernel_replaces_the_cached_one() -> None:
    op = ert.define_op("fast_path_swap", rule=lambda x: (x.shape, x.dtype), replace=True)
    op.register_kernel("generic", lambda x: x + 1)
    x = ert.asarray(np.zeros(2))
    assert op(x).numpy().tolist() == [1.0, 1.0]
    assert op(x).numpy().tolist() == [1.0, 1.0]  # served by the inline cache
    op.register_kernel("cpu", lambda x: x - 1)
    assert op(x).numpy().tolist() == [-1.0, -1.0]


def test_matmul_on_vectors_and_matrices_equals_numpy() -> None:
    rng = np.random.default_rng(0)
    for a_shape, b_shape in [((4, 4), (4, 4)), ((3,), (3, 2)), ((2, 3), (3,)), ((5,), (5,))]:
        a = rng.standard_normal(a_shape).astype(np.float32)
        b = rng.standard_normal(b_shape).astype(np.float32)
        for _ in range(2):  # general path, then the fast path's specialized kernel
            got = ert.asarray(a) @ ert.asarray(b)
            np.testing.assert_allclose(got.numpy(), a @ b, rtol=1e-6)
            assert got.shape == (a @ b).shape


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")
def test_matrix_subclass_becomes_a_plain_array() -> None:
    m = np.matrix([[1.0, 2.0], [3.0, 4.0]])
    t = ert.asarray(m)
    product = (t * t).numpy()  # elementwise, as for arrays, not np.matrix's matmul
    assert type(product) is np.ndarray
    np.testing.assert_array_equal(product, np.asarray(m) ** 2)


def test_repeated_reads_hand_out_one_read_only_array() -> None:
    t = ert.exp(ert.zeros(3))
    first = t.numpy()
    assert t.numpy() is first and np.asarray(t) is first
    assert not first.flags.writeable
