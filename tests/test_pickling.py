"""Tensors and compiled functions pickle, copy and deep-copy (issue 21, item 4): a
tensor as its value, a compiled function as its function and options."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import numpy as np
import pytest

import eagerrt as ert


def double_plus_one(x: ert.Tensor) -> ert.Tensor:
    return x * 2 + 1


@pytest.mark.parametrize(
    "data",
    [np.arange(6.0).reshape(2, 3), np.array(3.5, "float32"), np.array([True, False]), np.int8(7)],
)
def test_a_tensor_pickles_as_its_value(data: Any) -> None:
    t = ert.asarray(data)
    loaded = pickle.loads(pickle.dumps(t))
    assert type(loaded) is ert.Tensor and loaded is not t
    assert loaded.shape == t.shape and loaded.dtype == t.dtype and loaded.device is t.device
    np.testing.assert_array_equal(loaded.numpy(), np.asarray(data))


def test_a_pending_tensor_is_waited_for(gate: Any) -> None:
    g = gate()
    pending = g(np.arange(3.0)) + 1
    assert not pending.is_ready()
    g.open()
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(pending)).numpy(), [1.0, 2.0, 3.0])


def test_a_failed_tensor_raises_its_error_when_pickled(clean_errors: None) -> None:
    bad = ert.linalg.cholesky(ert.asarray([[1.0, 2.0], [2.0, 1.0]]))
    with pytest.raises(ert.KernelError):
        pickle.dumps(bad)


def test_copies_and_deep_copies_of_model_state() -> None:
    state = {"weight": ert.asarray(np.eye(2)), "layers": [ert.ones(3)]}
    deep = copy.deepcopy(state)
    assert deep["weight"] is not state["weight"]
    np.testing.assert_array_equal(deep["weight"].numpy(), np.eye(2))
    np.testing.assert_array_equal(deep["layers"][0].numpy(), np.ones(3))
    shallow = copy.copy(state["weight"])
    np.testing.assert_array_equal(shallow.numpy(), np.eye(2))


def test_a_device_tensor_comes_back_on_its_device() -> None:
    dev = ert.get_device("teststream:0")
    t = ert.asarray(np.arange(4.0), device=dev) * 3
    loaded = pickle.loads(pickle.dumps(t))
    assert loaded.device is dev
    np.testing.assert_array_equal(loaded.numpy(), [0.0, 3.0, 6.0, 9.0])


def test_a_compiled_function_pickles_as_its_function() -> None:
    f = ert.function(double_plus_one, max_traces=3)
    x = ert.asarray(np.arange(3.0))
    f(x)  # traced: the traces don't travel
    loaded = pickle.loads(pickle.dumps(f))
    assert loaded is not f and loaded.traces == 0
    np.testing.assert_array_equal(loaded(x).numpy(), [1.0, 3.0, 5.0])
    assert loaded._max_traces == 3
    np.testing.assert_array_equal(copy.deepcopy(f)(x).numpy(), [1.0, 3.0, 5.0])
