"""Bad input: random invalid calls over many ops always end in a clear eagerrt error.

Hypothesis draws calls with wrong shapes, dtypes and devices (a ``cpu`` tensor
with a ``teststream:0`` one), non-tensors (None, strings, objects), NaN and inf
where a number must be an int or finite, negative and unallocatable sizes, huge
reshapes and out-of-range indices and axes. Every call must do one of:

* raise a :class:`eagerrt.UsageError` at the call, naming the op;
* return a tensor that, read under a timeout, raises a :class:`eagerrt.KernelError`
  naming the op (an allocation that fails: ``MemoryError`` chained);
* return a tensor equal to numpy's answer for the same call (it was valid).

Never another exception (a crash), a hang, or a wrong value. The runtime keeps
working after an allocation failure: eagerly, on worker threads and compiled.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import eagerrt as ert

from .conftest import scale
from .leaks import no_leaks

#: Reading a result that takes longer than this has hung.
READ_TIMEOUT_S = 20.0
#: Elements no machine can allocate (7 TiB of float64): fails at once, never swaps.
UNALLOCATABLE = 10**12

NAN, INF = float("nan"), float("inf")
# Things that are not tensors, nor numbers an op can use.
JUNK: list[Any] = [None, "x", b"x", object(), [1, "a"], {"a": 1}, [[1, 2], [3]]]
DTYPES = ["float32", "float64", "int32", "int8", "bool"]
DEVICES = ["cpu", "teststream:0"]


# -- what the calls are made of ----------------------------------------------------------
@st.composite
def tensors(draw: st.DrawFn) -> ert.Tensor:
    shape = draw(st.sampled_from([(), (3,), (2, 3), (3, 2), (1, 3), (2, 1, 3), (0, 3)]))
    dtype = draw(st.sampled_from(DTYPES))
    device = draw(st.sampled_from(DEVICES))
    data = np.arange(math.prod(shape), dtype=np.float64).reshape(shape) - 2.5
    if dtype != "bool":
        data = data * 3 if "int" not in dtype else np.round(data)
    return ert.asarray(data.astype(dtype), device=device)


scalars = st.sampled_from([0, 1, -1, 2.5, NAN, INF, -INF, 10**30, 300, True])
operands = st.one_of(tensors(), tensors(), scalars, st.sampled_from(JUNK))
# Ints for sizes, axes and indices: in range, out of range, negative, huge; and not ints.
ints = st.one_of(st.integers(-4, 4), st.sampled_from([7, -9, 10**30, UNALLOCATABLE]))
not_ints = st.sampled_from([2.0, 1.5, NAN, INF, "2", None, [1]])
sizes = st.one_of(st.integers(0, 4), st.integers(-3, -1), not_ints, st.just(UNALLOCATABLE))
shapes = st.one_of(
    sizes,
    st.lists(sizes, max_size=3).map(tuple),
    st.just((UNALLOCATABLE, UNALLOCATABLE)),  # overflows the element count
)
# Shapes that never name an allocatable huge size (a view numpy could make
# cheaply may be a copy in eagerrt; and comparing it would allocate it).
small_shapes = st.lists(st.one_of(st.integers(-2, 4), not_ints), max_size=3).map(tuple)
axes = st.one_of(ints, not_ints, st.lists(st.integers(-3, 3), max_size=3).map(tuple))
indices = st.one_of(
    ints,
    not_ints,
    st.tuples(st.integers(-3, 3), st.integers(-4, 4)),
    st.just(slice(None, None, 0)),  # a zero step
    st.just(slice(1, "a")),
)
dtypes = st.one_of(st.sampled_from(DTYPES), st.sampled_from(["foo", 3, "complex512"]))


@dataclass(frozen=True)
class Spec:
    """One op under test: how to draw a call, make it eagerly and with numpy."""

    names: tuple[str, ...]  # what its errors may call it (zeros is the op 'fill')
    args: Callable[[st.DrawFn], tuple[Any, ...]]
    call: Callable[..., Any]
    reference: Callable[..., Any]


def _np(x: Any) -> Any:
    return x.numpy() if isinstance(x, ert.Tensor) else x


def _binary(op: Callable[..., Any], ref: Callable[..., Any], *names: str) -> Spec:
    return Spec(names, lambda d: (d(operands), d(operands)), op, ref)


def _unary(op: Callable[..., Any], ref: Callable[..., Any], *names: str) -> Spec:
    return Spec(names, lambda d: (d(operands),), op, ref)


def _with(
    op: Callable[..., Any], ref: Callable[..., Any], extra: Any, names: tuple[str, ...]
) -> Spec:
    return Spec(names, lambda d: (d(operands), d(extra)), op, ref)


def _softmax(x: np.ndarray, axis: Any) -> np.ndarray:
    if x.dtype.kind in "biu":  # eagerrt's: the smallest float that holds the values
        x = x.astype(np.float16 if x.dtype.itemsize == 1 else np.float64)
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


SPECS: dict[str, Spec] = {
    # The operators on a tensor, the functions on anything.
    "add": Spec(("add",), lambda d: (d(tensors()), d(operands)), lambda a, b: a + b, np.add),
    "radd": Spec(("add",), lambda d: (d(operands), d(tensors())), lambda a, b: a + b, np.add),
    "subtract": _binary(ert.subtract, np.subtract, "subtract"),
    "multiply": _binary(ert.multiply, np.multiply, "multiply"),
    "divide": _binary(ert.divide, np.divide, "divide"),
    "matmul": _binary(ert.matmul, np.matmul, "matmul"),
    "matmul_operator": Spec(
        ("matmul",), lambda d: (d(tensors()), d(operands)), lambda a, b: a @ b, np.matmul
    ),
    "maximum": _binary(ert.maximum, np.maximum, "maximum"),
    "exp": _unary(ert.exp, np.exp, "exp"),
    "sqrt": _unary(ert.sqrt, np.sqrt, "sqrt"),
    "tanh": _unary(ert.tanh, np.tanh, "tanh"),
    "sum": _with(lambda x, a: ert.sum(x, axis=a), lambda x, a: np.sum(x, axis=a), axes, ("sum",)),
    "mean": _with(
        lambda x, a: ert.mean(x, axis=a), lambda x, a: np.mean(x, axis=a), axes, ("mean",)
    ),
    "argmax": _with(
        lambda x, a: ert.argmax(x, axis=a), lambda x, a: np.argmax(x, axis=a), ints, ("argmax",)
    ),
    "softmax": _with(lambda x, a: ert.softmax(x, axis=a), _softmax, ints, ("softmax",)),
    "reshape": _with(ert.reshape, np.reshape, shapes, ("reshape",)),
    "transpose": _with(ert.transpose, np.transpose, axes, ("transpose",)),
    "broadcast_to": _with(ert.broadcast_to, np.broadcast_to, small_shapes, ("broadcast_to",)),
    "getitem": Spec(
        ("getitem", "gather_index"),
        lambda d: (d(tensors()), d(indices)),
        lambda x, i: x[i],
        lambda x, i: x[i],
    ),
    "astype": _with(ert.astype, lambda x, t: np.asarray(x).astype(t), dtypes, ("astype",)),
    "where": Spec(
        ("where",), lambda d: (d(operands), d(operands), d(operands)), ert.where, np.where
    ),
    "concat": Spec(
        ("concat",),
        lambda d: (d(st.lists(operands, max_size=3)), d(ints)),
        lambda xs, a: ert.concat(xs, axis=a),
        lambda xs, a: np.concatenate(xs, axis=a),
    ),
    "zeros": Spec(
        ("zeros", "fill"),
        lambda d: (d(shapes), d(dtypes)),
        lambda s, t: ert.zeros(s, dtype=t),
        lambda s, t: np.zeros(s, dtype=t),
    ),
    "full": Spec(
        ("full", "fill"),
        lambda d: (d(shapes), d(scalars), d(dtypes)),
        lambda s, v, t: ert.full(s, v, dtype=t),
        lambda s, v, t: np.full(s, v, dtype=t),
    ),
    "arange": Spec(
        ("arange",),
        lambda d: (d(st.one_of(ints, scalars)), d(st.one_of(ints, scalars))),
        ert.arange,
        np.arange,
    ),
    "eye": Spec(("eye",), lambda d: (d(sizes),), ert.eye, np.eye),
    "asarray": Spec(
        ("asarray",),
        lambda d: (d(st.one_of(st.sampled_from(JUNK), scalars)),),
        ert.asarray,
        np.asarray,
    ),
}


# -- one call, judged --------------------------------------------------------------------
def _names_the_op(error: BaseException, spec: Spec) -> bool:
    return any(name in str(error) for name in spec.names)


def _numpy_reference(spec: Spec, args: tuple[Any, ...]) -> Any:
    # Under the same warning filters: where the tests turn numpy's RuntimeWarning
    # (sqrt(-1)) into an error, a kernel fails the same way.
    plain = tuple([_np(a) for a in x] if isinstance(x, list) else _np(x) for x in args)
    return np.asarray(spec.reference(*plain))


def judge(op: str, args: tuple[Any, ...]) -> str:
    """Make the call and read its result; returns how it ended (or fails the test)."""
    spec = SPECS[op]
    where = f"{op}{args!r}"
    try:
        result = spec.call(*args)
    except ert.UsageError as e:
        assert _names_the_op(e, spec), f"{where}: the error does not name the op: {e}"
        return "usage error"
    except Exception as e:  # a crash: an error that is not eagerrt's
        raise AssertionError(f"{where} raised {type(e).__name__}: {e}") from e
    assert isinstance(result, ert.Tensor), f"{where} returned {type(result).__name__}"
    try:
        got = result.numpy(timeout=READ_TIMEOUT_S)
    except ert.WaitTimeoutError as e:
        raise AssertionError(f"{where} hung") from e
    except ert.KernelError as e:
        assert _names_the_op(e, spec), f"{where}: the error does not name the op: {e}"
        assert e.__cause__ is not None, f"{where}: the kernel's own error is not chained"
        if isinstance(e.__cause__, MemoryError):
            return "allocation failure"
        # Anything else the kernel raised must be an error numpy raises too.
        with pytest.raises(Exception):  # noqa: B017
            _numpy_reference(spec, args)
        return "kernel error"
    except Exception as e:
        raise AssertionError(f"{where} read raised {type(e).__name__}: {e}") from e
    try:
        expected = _numpy_reference(spec, args)
    except Exception as e:
        raise AssertionError(f"{where} gave {got!r}, but numpy refused: {e!r}") from e
    assert got.shape == expected.shape, f"{where}: shape {got.shape} vs numpy {expected.shape}"
    assert got.dtype == expected.dtype, f"{where}: dtype {got.dtype} vs numpy {expected.dtype}"
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6, equal_nan=True, err_msg=where)
    return "valid"


# -- the tests -------------------------------------------------------------------------
@pytest.mark.parametrize("placement", ["inline", "workers"])
@settings(
    max_examples=scale(500, 5000),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_random_invalid_calls_give_an_eagerrt_error(placement: str, data: st.DataObject) -> None:
    op = data.draw(st.sampled_from(sorted(SPECS)), label="op")
    args = SPECS[op].args(data.draw)
    # "workers": every kernel offloaded, so errors are raised on worker threads.
    threshold = 0 if placement == "workers" else ert.config.inline_threshold_ns
    with ert.config.override(inline_threshold_ns=threshold):
        event(judge(op, args))


# -- an allocation that fails ------------------------------------------------------------
def unallocatable(kind: str) -> ert.Tensor:
    """A tensor whose kernel cannot allocate its result (shape known, data never)."""
    if kind == "zeros":
        return ert.zeros((UNALLOCATABLE,), dtype="float32")
    if kind == "arange":
        return ert.arange(UNALLOCATABLE * 10)
    return ert.broadcast_to(ert.asarray(1.0), (UNALLOCATABLE, 8)) + 1


def assert_allocation_failure(t: ert.Tensor, op: str) -> None:
    with pytest.raises(ert.KernelError, match=f"op '{op}' failed") as caught:
        t.numpy(timeout=READ_TIMEOUT_S)
    assert isinstance(caught.value.__cause__, MemoryError)


W = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)


def small_model(x: Any) -> Any:
    return ert.tanh(x @ ert.asarray(W)) * 2 + 1


@ert.function
async def compiled_model(x: Any) -> Any:
    return small_model(x)


@ert.function
async def compiled_allocates(x: Any) -> Any:
    # The huge buffer is made inside the compiled graph, on its executor.
    return ert.sum(ert.zeros((UNALLOCATABLE,), dtype="float32")) + x


async def still_works() -> None:
    """Ops inline, on the workers and compiled give right values."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    expected = np.tanh(x @ W) * 2 + 1
    np.testing.assert_allclose(await small_model(ert.asarray(x)), expected, rtol=1e-5)
    with ert.config.override(inline_threshold_ns=0):  # every kernel on a worker thread
        np.testing.assert_allclose(await small_model(ert.asarray(x)), expected, rtol=1e-5)
    got = await compiled_model(ert.asarray(x))
    np.testing.assert_allclose(await got, expected, rtol=1e-5)
    np.testing.assert_allclose(ert.zeros((4, 5)).numpy(), np.zeros((4, 5)))


#: numpy tells tracemalloc of a huge allocation before it fails and never takes
#: it back (numpy's bookkeeping, not memory held): the memory check of cases
#: that fail to allocate cannot see a real leak, the value and thread checks can.
NUMPY_FAILED_ALLOCATIONS = 10**18


def fail_to_allocate(kind: str) -> None:
    huge = unallocatable(kind)  # no error at the call: the shape is fine
    assert huge.shape[0] >= UNALLOCATABLE
    dependent = ert.sum(huge) * 2
    op = {"zeros": "fill", "arange": "arange", "add": "add"}[kind]
    assert_allocation_failure(huge, op)
    # Its dependents hold the same failure, still naming the op that failed.
    assert_allocation_failure(dependent, op)


@pytest.fixture(scope="module")
def warm() -> None:
    """Compile once outside the leak checks (a compiled function keeps its traces)."""
    anyio.run(still_works)


@pytest.mark.parametrize("placement", ["inline", "workers"])
@pytest.mark.parametrize("kind", ["zeros", "arange", "add"])
def test_an_allocation_failure_is_an_error_value_and_the_runtime_goes_on(
    kind: str, placement: str, warm: None
) -> None:
    threshold = 0 if placement == "workers" else ert.config.inline_threshold_ns
    with (
        no_leaks(memory_slack=NUMPY_FAILED_ALLOCATIONS),
        ert.config.override(inline_threshold_ns=threshold),
    ):
        fail_to_allocate(kind)
        anyio.run(still_works)
        ert.synchronize(timeout=READ_TIMEOUT_S)


def test_an_allocation_failure_inside_a_compiled_function(warm: None) -> None:
    """Raised on awaiting the call (the first call runs while it traces) or on
    reading its result (replays): a KernelError naming 'fill', MemoryError chained."""

    async def call() -> None:
        result = await compiled_allocates(ert.asarray(np.float32(2.0)))
        await result

    for _ in range(3):  # the first call traces, later ones replay
        with pytest.raises(ert.KernelError, match="op 'fill' failed") as caught:
            anyio.run(call)
        assert isinstance(caught.value.__cause__, MemoryError)
    anyio.run(still_works)


def crowd(n: int) -> None:
    good = [ert.full((3,), float(i)) * 2 for i in range(n)]
    bad = [ert.zeros((UNALLOCATABLE + i,), dtype="int8") for i in range(n)]
    for i, (g, b) in enumerate(zip(good, bad, strict=True)):
        np.testing.assert_array_equal(g.numpy(timeout=READ_TIMEOUT_S), np.full(3, 2.0 * i))
        assert_allocation_failure(b, "fill")


def test_failed_allocations_in_a_crowd_of_good_work(warm: None) -> None:
    """Good and failing results interleaved, on worker threads: each gets its own."""
    with (
        no_leaks(memory_slack=NUMPY_FAILED_ALLOCATIONS),
        ert.config.override(inline_threshold_ns=0),
    ):
        crowd(50)
        ert.synchronize(timeout=READ_TIMEOUT_S)
        assert ert.stats().pending_values == 0


# -- regressions found by the fuzzer ---------------------------------------------------
def test_a_list_index_on_another_device_is_made_there() -> None:
    x = ert.asarray(np.arange(6.0).reshape(2, 3), device="teststream:0")
    np.testing.assert_array_equal(x[[1, 0]].numpy(), [[3, 4, 5], [0, 1, 2]])
    np.testing.assert_array_equal(x[np.array([1])].numpy(), [[3, 4, 5]])
    np.testing.assert_array_equal(x[x > 2.5].numpy(), [3, 4, 5])
    assert x[[1]].device == x.device


@pytest.mark.parametrize(
    "call",
    [
        lambda: ert.full((2,), 0, dtype="foo"),
        lambda: ert.full((2,), None),
        lambda: ert.astype(None, "float32"),
        lambda: ert.astype(ert.asarray([1.0]), "foo", copy=False),
    ],
)
def test_errors_raised_before_the_op_is_made_still_name_it(call: Callable[[], Any]) -> None:
    with pytest.raises(ert.DTypeError, match=r"^(full|astype): "):
        call()
