"""Errors: call-time errors at the user's line, kernel failures on read."""

from __future__ import annotations

import os
import sys
import traceback
import warnings
from typing import Any

import anyio
import numpy as np
import pytest

import eagerrt as ert

THIS_FILE = os.path.abspath(__file__)
CORE_DIR = os.path.join(os.path.dirname(os.path.abspath(ert.__file__)), "_core") + os.sep
PACKAGE_DIR = os.path.dirname(os.path.abspath(ert.__file__)) + os.sep


def here() -> int:
    """The caller's current line number."""
    return sys._getframe(1).f_lineno


def at_line(line: int) -> str:
    return f'File "{THIS_FILE}", line {line}'


def tb_files(exc: BaseException) -> list[str]:
    return [os.path.abspath(frame.filename) for frame in traceback.extract_tb(exc.__traceback__)]


_kernel_raises = ert.define_op("errors_user_kernel_raises", rule=lambda x: (x.shape, x.dtype))


@_kernel_raises.kernel()
def _raising_kernel(x: np.ndarray) -> np.ndarray:
    raise ZeroDivisionError("user kernel divided by zero")


# -- call-time errors ----------------------------------------------------------------
def test_matmul_shape_error_names_op_operands_and_line() -> None:
    a, b = ert.ones((2, 3)), ert.ones((2, 3))
    with pytest.raises(ert.ShapeError) as info:
        line = here() + 1
        a @ b
    err = info.value
    assert isinstance(err, ValueError) and isinstance(err, ert.UsageError)
    message = str(err)
    assert "matmul" in message
    assert "float64[2, 3]" in message
    assert os.path.basename(__file__) in message
    assert f"at {at_line(line)}" in message


def test_shape_error_through_function_call_names_this_line() -> None:
    with pytest.raises(ValueError, match="add") as info:
        line = here() + 1
        ert.add(ert.ones((2, 3)), ert.ones((4,)))
    assert isinstance(info.value, ert.ShapeError)
    assert at_line(line) in str(info.value)
    assert "float64[2, 3]" in str(info.value) and "float64[4]" in str(info.value)


def test_call_time_error_is_raised_at_once_even_with_pending_inputs(gate) -> None:
    g = gate()
    pending = g(np.ones((2, 3)))
    with pytest.raises(ert.ShapeError) as info:
        line = here() + 1
        pending @ ert.ones((2, 3))
    assert at_line(line) in str(info.value)
    assert not pending.is_ready()  # raised without waiting for data


def test_dtype_error_is_a_type_error() -> None:
    with pytest.raises(TypeError) as info:
        line = here() + 1
        ert.take(ert.arange(5), ert.asarray([1.5]))
    err = info.value
    assert isinstance(err, ert.DTypeError) and isinstance(err, ert.UsageError)
    assert "take" in str(err) and "float64[1]" in str(err) and "int64[5]" in str(err)
    assert at_line(line) in str(err)


def test_out_of_bounds_error_is_an_index_error() -> None:
    t = ert.ones((3,))
    with pytest.raises(IndexError) as info:
        line = here() + 1
        t[5]
    err = info.value
    assert isinstance(err, ert.OutOfBoundsError) and isinstance(err, ert.ShapeError)
    assert "getitem" in str(err) and at_line(line) in str(err)


def test_device_error_for_unknown_device() -> None:
    with pytest.raises(ert.DeviceError) as info:
        ert.ones((2,), device="no-such-device")
    assert isinstance(info.value, ValueError)
    assert "no-such-device" in str(info.value)


def test_user_op_rule_errors_become_usage_errors() -> None:
    def rule(x: ert.Tensor) -> tuple:
        if x.ndim != 2:
            raise ValueError(f"wants a matrix, got {x.ndim}-d")
        if x.dtype.kind != "f":
            raise TypeError(f"wants floats, got {x.dtype}")
        return x.shape, x.dtype

    op = ert.define_op("errors_matrix_only", rule=rule, replace=True)
    op.kernel()(lambda x: x)
    with pytest.raises(ert.ShapeError, match="wants a matrix") as info:
        line = here() + 1
        op(ert.ones((3,)))
    assert "errors_matrix_only(float64[3])" in str(info.value)
    assert at_line(line) in str(info.value)
    with pytest.raises(ert.DTypeError, match="wants floats"):
        op(ert.ones((2, 2), dtype="int32"))
    np.testing.assert_array_equal(op(ert.ones((2, 2))).numpy(), np.ones((2, 2)))


# -- kernel failures -----------------------------------------------------------------
@pytest.mark.parametrize("where", ["inline", "offloaded"])
def test_bad_take_fails_on_read_with_creating_line(where: str, clean_errors) -> None:
    threshold = ert.config.inline_threshold_ns if where == "inline" else 0
    with ert.config.override(inline_threshold_ns=threshold):
        line = here() + 1
        bad = ert.take(ert.arange(5), ert.asarray([7]))  # no error at the call
    assert bad.shape == (1,) and bad.dtype == np.int64
    assert bad.wait(10) and bad.is_ready()
    with pytest.raises(ert.KernelError) as info:
        bad.numpy()
    err = info.value
    assert isinstance(err, RuntimeError) and isinstance(err, ert.EagerError)
    message = str(err)
    assert "'take'" in message
    assert f"created at {at_line(line)}" in message
    assert isinstance(err.__cause__, IndexError)
    assert "out of bounds" in str(err.__cause__)
    # Every other way of reading raises it too.
    with pytest.raises(ert.KernelError, match="take"):
        np.asarray(bad)
    with pytest.raises(ert.KernelError, match="take"):
        int(bad)
    with pytest.raises(ert.KernelError, match="take"):
        bad.item()
    assert "error" in repr(bad) and "take" in repr(bad)


@pytest.mark.anyio
async def test_bad_take_fails_on_await(clean_errors) -> None:
    with ert.config.override(inline_threshold_ns=0):
        line = here() + 1
        bad = ert.take(ert.arange(5), ert.asarray([7]))
    with anyio.fail_after(10), pytest.raises(ert.KernelError) as info:
        await bad
    assert "'take'" in str(info.value)
    assert f"created at {at_line(line)}" in str(info.value)
    assert isinstance(info.value.__cause__, IndexError)


@pytest.mark.parametrize("where", ["inline", "offloaded"])
def test_dependents_inherit_the_failure(where: str, clean_errors) -> None:
    threshold = ert.config.inline_threshold_ns if where == "inline" else 0
    with ert.config.override(inline_threshold_ns=threshold):
        line = here() + 1
        bad = ert.take(ert.arange(5), ert.asarray([7]))
        plus_one = bad + 1
        deeper = ert.exp(plus_one * 2).sum()
    assert plus_one.shape == (1,) and deeper.shape == ()
    with pytest.raises(ert.KernelError) as direct:
        bad.numpy(timeout=10)
    for dependent, reading in ((plus_one, "add"), (deeper, "sum")):
        with pytest.raises(ert.KernelError) as info:
            dependent.numpy(timeout=10)
        message = str(info.value)
        assert "'take'" in message  # names the op that failed, not the one read
        assert f"created at {at_line(line)}" in message
        assert reading in message
        assert info.value.__cause__ is direct.value.__cause__


def test_dependent_of_pending_input_that_fails(gate, clean_errors) -> None:
    g = gate()
    indices = g(np.array([9]))
    line = here() + 1
    bad = ert.take(ert.arange(3), indices)  # parked: fails later, on a worker thread
    result = bad * 10
    assert not bad.is_ready()
    g.open()
    with pytest.raises(ert.KernelError) as info:
        result.numpy(timeout=10)
    assert f"created at {at_line(line)}" in str(info.value)
    assert isinstance(info.value.__cause__, IndexError)


@pytest.mark.parametrize("where", ["inline", "offloaded"])
def test_cause_traceback_is_trimmed_of_runtime_frames(where: str, clean_errors) -> None:
    threshold = ert.config.inline_threshold_ns if where == "inline" else 0
    with ert.config.override(inline_threshold_ns=threshold):
        bad = ert.take(ert.arange(5), ert.asarray([7]))
    with pytest.raises(ert.KernelError) as info:
        bad.numpy(timeout=10)
    frames = info.value.kernel_traceback
    assert frames, "the error says where the kernel failed"
    assert not [f for f in frames if os.path.abspath(f.filename).startswith(CORE_DIR)]
    assert info.value.__cause__.__traceback__ is None  # no live frames kept
    assert "kernel traceback" in "\n".join(info.value.__notes__)


@pytest.mark.parametrize("where", ["inline", "offloaded"])
def test_user_kernel_failure_traceback_starts_in_the_users_kernel(where: str, clean_errors) -> None:
    threshold = ert.config.inline_threshold_ns if where == "inline" else 0
    with ert.config.override(inline_threshold_ns=threshold):
        line = here() + 1
        bad = _kernel_raises(ert.ones((2,)))
    with pytest.raises(ert.KernelError, match="errors_user_kernel_raises") as info:
        bad.numpy(timeout=10)
    assert f"created at {at_line(line)}" in str(info.value)
    cause = info.value.__cause__
    assert isinstance(cause, ZeroDivisionError)
    frames = info.value.kernel_traceback
    assert [os.path.abspath(f.filename) for f in frames] == [THIS_FILE]
    assert frames[0].name == "_raising_kernel"
    assert 'raise ZeroDivisionError("user kernel divided by zero")' in info.value.__notes__[0]


def test_error_property_marks_failure_observed(clean_errors) -> None:
    bad = ert.take(ert.arange(2), ert.asarray([3]))
    err = bad.error
    assert isinstance(err, ert.KernelError) and "take" in str(err)
    ert.synchronize(timeout=10)  # already observed through .error
    with pytest.raises(ert.UsageError):
        _ = ert.ones((2,)).error  # not an error tensor


def test_failure_is_read_again_each_time(clean_errors) -> None:
    bad = ert.take(ert.arange(2), ert.asarray([3]))
    with pytest.raises(ert.KernelError) as first:
        bad.numpy()
    with pytest.raises(ert.KernelError) as second:
        bad.numpy()
    assert first.value is not second.value  # a fresh exception per read
    assert first.value.__cause__ is second.value.__cause__
    assert str(first.value) == str(second.value)


def test_kernel_errors_are_also_of_their_causes_type(clean_errors: None) -> None:
    """Issue 21, item 7: libraries catch what numpy raises (scikit-learn's
    ``except np.linalg.LinAlgError`` around a Cholesky)."""
    bad = ert.linalg.cholesky(ert.asarray([[1.0, 2.0], [2.0, 1.0]]))
    with pytest.raises(np.linalg.LinAlgError) as info:
        bad.numpy()
    assert isinstance(info.value, ert.KernelError)
    assert isinstance(info.value.__cause__, np.linalg.LinAlgError)
    assert type(info.value).__name__ == "KernelError"
    assert "linalg.cholesky" in str(info.value)


def test_a_cause_with_its_own_message_format_gives_a_plain_kernel_error(
    clean_errors: None,
) -> None:
    picky = ert.define_op("errors_test_keyerror", rule=lambda x: (x.shape, x.dtype))

    @picky.kernel()
    def _picky(x: Any) -> Any:
        raise KeyError("missing")  # KeyError's str() quotes: not combined

    with pytest.raises(ert.KernelError) as info:
        picky(ert.ones(2)).numpy()
    assert not isinstance(info.value, KeyError)
    assert isinstance(info.value.__cause__, KeyError)


# -- numeric warnings ----------------------------------------------------------------
@pytest.mark.parametrize("where", ["inline", "offloaded"])
def test_numeric_warnings_point_at_the_users_line(where: str) -> None:
    """Issue 21, item 7: numpy's divide-by-zero and invalid-value warnings name
    the line that made the op, whether its kernel ran at the call or on a worker
    (not eagerrt's registry, where the default filter showed each only once)."""
    threshold = ert.config.inline_threshold_ns if where == "inline" else 0
    x = ert.asarray([1.0, 0.0])
    with ert.config.override(inline_threshold_ns=threshold), pytest.warns(RuntimeWarning) as caught:
        line = here() + 1
        y = x / 0.0
        y.numpy()
        log_line = here() + 1
        z = ert.log(x)
        z.numpy()
    seen = {(str(w.message), os.path.abspath(w.filename), w.lineno) for w in caught}
    assert seen == {
        ("divide by zero encountered in divide", THIS_FILE, line),
        ("invalid value encountered in divide", THIS_FILE, line),
        ("divide by zero encountered in log", THIS_FILE, log_line),
    }


def test_in_place_numeric_warnings_point_at_the_users_line() -> None:
    t = ert.asarray([1.0, 2.0])
    with pytest.warns(RuntimeWarning, match="divide by zero encountered in divide") as caught:
        line = here() + 1
        t /= 0.0
    assert [(os.path.abspath(w.filename), w.lineno) for w in caught] == [(THIS_FILE, line)]


@pytest.mark.parametrize("where", ["inline", "offloaded"])
def test_np_errstate_around_the_call_holds_for_its_op(where: str) -> None:
    """An op made inside ``np.errstate(...)`` keeps those modes, even when its
    kernel runs later on a worker (scikit-learn silences warnings this way)."""
    threshold = ert.config.inline_threshold_ns if where == "inline" else 0
    x = ert.asarray([1.0, 0.0])
    with ert.config.override(inline_threshold_ns=threshold), warnings.catch_warnings():
        warnings.simplefilter("error")
        with np.errstate(divide="ignore", invalid="ignore"):
            quiet = x / 0.0
        loud = x / 0.0
        np.testing.assert_array_equal(quiet.numpy(), [np.inf, np.nan])
        with pytest.raises(RuntimeWarning, match="divide by zero"):
            loud.numpy()  # the "error" filter made the warning the kernel's failure
        with np.errstate(divide="raise"):
            raising = x / 0.0
        with pytest.raises(FloatingPointError):
            raising.numpy()


def test_numeric_warnings_of_different_lines_each_show_once_by_default() -> None:
    x = ert.asarray([1.0])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for _ in range(3):
            x / 0.0
            x / 0.0
    assert len(caught) == 2 and caught[0].lineno != caught[1].lineno


@pytest.mark.parametrize("shape", [(2,), (2000, 1000)])
def test_numeric_warnings_of_a_compiled_function_point_at_its_call(shape: tuple[int, ...]) -> None:
    divide = ert.function(lambda x: x / 0.0)
    x = ert.ones(shape)
    with pytest.warns(RuntimeWarning, match="divide by zero encountered") as caught:
        line = here() + 1
        y = divide(x)
        y.numpy()
    assert {(os.path.abspath(w.filename), w.lineno) for w in caught} == {(THIS_FILE, line)}
