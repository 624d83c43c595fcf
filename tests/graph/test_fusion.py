"""Fusion passes: elementwise groups, matmul epilogues, small-op regions.

Scalar semantics are checked op by op against the eager ops in a few shared
kernels (one per dtype family: numba compiles each once, and its disk cache
keeps them); graph-level tests check what the passes make of small programs
and that compiled results equal eager ones.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import eagerrt as ert
from eagerrt.backends.cpu.codegen import HEADER, NJIT, Operand, ScalarEmitter, load_source
from eagerrt.backends.cpu.passes import fusion
from eagerrt.ops import elementwise, manipulation, nn

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # inf - inf and friends

OPS: dict[str, Any] = {
    **elementwise.UFUNC_OPS,
    "relu": elementwise.relu,
    "sigmoid": elementwise.sigmoid,
    "gelu": elementwise.gelu,
    "where": elementwise.where,
    "clip": elementwise._clip_op,
    "reciprocal": elementwise.reciprocal,
    "silu": nn.silu,
    "softplus": nn.softplus,
    "astype": manipulation._astype,
}
UNARY = list(elementwise.UNARY_UFUNCS)
BINARY = list(elementwise.BINARY_UFUNCS)
TRANSCENDENTAL = {
    *("exp", "expm1", "log", "log1p", "log2", "log10", "sin", "cos", "tan", "tanh"),
    *("sinh", "cosh", "asin", "acos", "atan", "asinh", "acosh", "atanh", "atan2", "hypot"),
    *("logaddexp", "power", "sigmoid", "silu", "gelu", "softplus"),
}


def values(dtype: Any, n: int = 48, seed: int = 0) -> np.ndarray:
    """Edge values first (nan, infinities, signed zeros, integer extremes), then random."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind == "f":
        special = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.5, -2.5, 3.0]
        special += [-3.0, 1e-30, 1e30, 7.0, 0.75, -1.5]
        rest = rng.standard_normal(n - len(special)) * 4
        return np.array(special + list(rest)).astype(dt)
    if dt.kind == "b":
        return rng.integers(0, 2, n).astype(bool)
    info = np.iinfo(dt)
    special = [0, 1, 2, 3, 7, 5, int(info.max), int(info.min), int(info.max) - 1]
    if dt.kind == "i":
        special += [-1, -2, -7, -3, int(info.min) + 1]
    rest = rng.integers(max(int(info.min), -100), min(int(info.max), 100), n - len(special))
    return np.array(special + list(rest), dtype=dt)


def eager(name: str, operands: list[Any], static: dict[str, Any]) -> np.ndarray:
    tensors = [ert.asarray(a) if isinstance(a, np.ndarray) else a for a in operands]
    with np.errstate(all="ignore"):
        return np.asarray(OPS[name](*tensors, **static).numpy())


def check_scalar_forms(cases: list[tuple[str, list[Any], dict[str, Any]]]) -> None:
    """One kernel computing every case elementwise (operands: 1-d arrays of one
    length, or Python scalars), each compared with the eager op."""
    emitter = ScalarEmitter()
    args: list[Any] = []
    body: list[str] = []
    wants = []
    for k, (name, operands, static) in enumerate(cases):
        want = eager(name, operands, static)
        ops = []
        for j, a in enumerate(operands):
            var = f"a{len(args)}"
            args.append(a)
            if isinstance(a, np.ndarray):
                body.append(f"x{k}_{j} = {var}[i]")
                ops.append(Operand(f"x{k}_{j}", a.dtype))
            else:
                ops.append(Operand(var, type(a), a))
        mark = len(emitter.lines)
        result = emitter.node(name, ops, static, want.dtype)
        assert result is not None, f"{name} has no scalar form for {[o.kind for o in ops]}"
        body += emitter.lines[mark:]
        body.append(f"o{k}[i] = {result.var}")
        wants.append(want)
    params = [f"a{j}" for j in range(len(args))] + [f"o{k}" for k in range(len(cases))]
    source = (
        HEADER
        + emitter.helpers_source()
        + f"\n\n{NJIT}\ndef check({', '.join(params)}):\n    for i in range(o0.shape[0]):\n"
        + "".join(f"        {line}\n" for line in body)
    )
    outs = [np.empty_like(w) for w in wants]
    load_source(source).check(*args, *outs)
    for (name, operands, static), got, want in zip(cases, outs, wants, strict=True):
        what = (
            f"{name}{static or ''} on {[getattr(a, 'dtype', type(a).__name__) for a in operands]}"
        )
        if want.dtype.kind == "f":
            # Transcendental functions: numba calls libm, numpy its own SIMD
            # loops; a few ulps apart. Everything else is exact.
            # (1 + tanh(x) for very negative x cancels: an absolute tolerance too.)
            exact = name not in TRANSCENDENTAL
            tol = 0 if exact else (4e-6 if want.dtype == np.float32 else 1e-13)
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol * 0.1, err_msg=what)
            zeros = (got == 0) & (want == 0)
            signs_equal = np.array_equal(np.signbit(got[zeros]), np.signbit(want[zeros]))
            assert signs_equal or not exact, f"{what}: signs of zeros differ"
        else:
            np.testing.assert_array_equal(got, want, err_msg=what)


def _ufunc_cases(x: Any, y: Any, names: list[str]) -> list[tuple[str, list[Any], dict[str, Any]]]:
    """The cases numpy accepts for these operands."""
    cases: list[tuple[str, list[Any], dict[str, Any]]] = []
    for name in names:
        operands = [x] if name in elementwise.UNARY_UFUNCS else [x, y]
        if name == "power" and getattr(y, "dtype", np.dtype(float)).kind in "iub":
            operands = [x, np.abs(y % 5).astype(y.dtype)]  # numpy refuses negative powers
        try:
            with np.errstate(all="ignore"):
                elementwise.UFUNC_OPS[name](*operands).numpy()
        except (ert.DTypeError, ert.KernelError, TypeError, ValueError):
            continue
        cases.append((name, operands, {}))
    return cases


INT_OPS = [
    *("add", "subtract", "multiply", "floor_divide", "remainder", "power", "maximum"),
    *("minimum", "less", "equal", "bitwise_and", "bitwise_or", "bitwise_xor"),
    *("bitwise_left_shift", "bitwise_right_shift", "abs", "negative", "sign", "square"),
    *("bitwise_invert", "logical_and", "logical_xor", "divide", "floor", "isnan"),
]
FLOAT_CORE = [
    *("add", "subtract", "multiply", "divide", "floor_divide", "remainder", "power"),
    *("maximum", "minimum", "logaddexp", "sign", "floor", "copysign", "greater_equal"),
]


@pytest.mark.parametrize(
    "dx, dy, names",
    [
        ("float32", "float32", UNARY + BINARY),
        ("float64", "float64", [*FLOAT_CORE, "exp", "tanh", "sqrt", "nextafter", "signbit"]),
        ("int8", "int8", INT_OPS),
        ("uint64", "uint64", INT_OPS),
        ("int64", "int32", INT_OPS[:8]),
        ("bool", "bool", [*BINARY[:3], "maximum", "logical_xor", "bitwise_invert", "less", "abs"]),
        ("int32", "float32", ["add", "floor_divide", "less", "maximum", "hypot"]),
        ("uint64", "int64", ["add", "multiply", "remainder"]),
    ],
)
def test_ufunc_scalar_forms_match_eager(dx: str, dy: str, names: list[str]) -> None:
    x, y = values(dx, seed=1), values(dy, seed=2)[::-1].copy()
    check_scalar_forms(_ufunc_cases(x, y, names))


def test_weak_scalars_and_activations_match_eager() -> None:
    f32, f64 = values("float32", seed=3), values("float64", seed=4)
    i8, u8 = values("int8", seed=5), values("uint8", seed=6)
    cond = values("bool", seed=7)
    cases: list[tuple[str, list[Any], dict[str, Any]]] = [
        ("multiply", [f32, 2.5], {}),  # a Python float stays float32 (NEP 50)
        ("add", [i8, 100], {}),  # wraps in int8
        ("multiply", [u8, 3], {}),
        ("floor_divide", [i8, -3], {}),
        ("subtract", [7, i8], {}),
        ("divide", [i8, 4], {}),  # int / int: float64
        ("multiply", [i8, 0.5], {}),  # int * float: float64
        ("less", [u8, 200], {}),
        ("add", [cond, True], {}),
        ("maximum", [f64, -np.inf], {}),
        ("relu", [f32], {}),
        ("relu", [i8], {}),
        ("sigmoid", [f32], {}),
        ("sigmoid", [f64], {}),
        ("silu", [f32], {}),
        ("gelu", [f32], {}),
        ("gelu", [f64], {"approximate": "tanh"}),
        ("softplus", [f32], {}),
        ("softplus", [f64], {"beta": 2, "threshold": 5.0}),
        ("where", [cond, f32, 0.0], {}),
        ("where", [f64 > 0, i8, f64], {}),
        ("clip", [f32, -1.0, 2.0], {}),
        ("clip", [f64, f64[::-1].copy(), 1.0], {}),  # nan bounds, lo > hi
        ("clip", [i8, -5, 5], {}),
        ("astype", [f64], {"dtype": np.dtype("float32")}),
        ("astype", [i8], {"dtype": np.dtype("uint8")}),
        ("astype", [u8], {"dtype": np.dtype("float32")}),
        ("astype", [f32], {"dtype": np.dtype(bool)}),
        ("astype", [cond], {"dtype": np.dtype("int32")}),
        ("reciprocal", [f32], {}),
        ("reciprocal", [i8], {}),
    ]
    check_scalar_forms(cases)


def test_what_has_no_exact_scalar_form_is_not_fused() -> None:
    emitter = ScalarEmitter()
    f32, i32 = np.dtype("float32"), np.dtype("int32")
    # Float to int casts of nan/inf are undefined; float16 and complex aren't numba's.
    assert emitter.node("astype", [Operand("x", f32)], {"dtype": i32}, i32) is None
    f16 = np.dtype("float16")
    assert emitter.node("add", [Operand("x", f16), Operand("y", f16)], {}, f16) is None
    c64 = np.dtype("complex64")
    assert emitter.node("exp", [Operand("x", c64)], {}, c64) is None
    # numpy compares by value where a cast to uint8 would wrap -1 to 255.
    u8 = np.dtype("uint8")
    assert (
        emitter.node("less", [Operand("x", u8), Operand("-1", int, -1)], {}, np.dtype(bool)) is None
    )
    # numpy 2 compares uint64 with int64 exactly, in a mixed loop of its own.
    u64, i64 = np.dtype("uint64"), np.dtype("int64")
    assert emitter.node("less", [Operand("x", u64), Operand("y", i64)], {}, np.dtype(bool)) is None


# -- graphs ---------------------------------------------------------------------------------
def fused_names(fn: Any, *args: Any) -> list[str]:
    return [n.name for n in fn.compiled_for(*args).graph.nodes]


def assert_same(got: Any, want: Any) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert (got.shape, got.dtype) == (want.shape, want.dtype)
    if want.dtype.kind == "f":
        tol = 1e-5 if want.dtype == np.float32 else 1e-12
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    else:
        np.testing.assert_array_equal(got, want)


def compare(fn: Any, *args: Any) -> None:
    """Compiled equals eager, on the first call and on recycled buffers."""
    with np.errstate(all="ignore"):
        want = fn.eager(*args)
    want = [t.numpy() for t in want] if isinstance(want, tuple) else [want.numpy()]
    for _ in range(2):
        got = fn(*args)
        got = [t.numpy() for t in got] if isinstance(got, tuple) else [got.numpy()]
        for g, w in zip(got, want, strict=True):
            assert_same(g, w)


def arr(data: Any, dtype: Any) -> Any:
    return ert.asarray(np.asarray(data, dtype=dtype))


rng = np.random.default_rng(0)
F32 = rng.standard_normal((8, 16)).astype(np.float32)


def test_broadcasting_chain_is_one_node() -> None:
    b = arr(rng.standard_normal(16), "float32")  # closed over: a constant of the graph

    @ert.function
    def f(x: Any, y: Any) -> Any:
        return ert.relu(x * 2.0 + b) - y / 3

    x, y = arr(F32, "float32"), arr(rng.standard_normal((8, 1)), "float32")
    # y / 3 has 8 elements, the rest 128: fused, it would be computed 16 times over.
    assert fused_names(f, x, y) == ["divide", "fused[multiply,add,relu,subtract]"]
    compare(f, x, y)
    node = f.compiled_for(x, y).graph.nodes[1]
    assert node.op.elementwise and node.op.out_form_for(node) is not None
    # The fused op runs eagerly too (its allocating kernel).
    by_value = {node.inputs[0].id: x, node.inputs[-1].id: y / 3}
    operands = [by_value.get(a.id, b) if hasattr(a, "id") else a for a in node.inputs]
    eager = node.op(*operands)
    assert_same(eager.numpy(), f(x, y).numpy())


@pytest.mark.anyio
async def test_async_function_with_nan_inf_and_scalar_tensor() -> None:
    @ert.function
    async def f(x: Any, s: Any) -> Any:
        return ert.where(ert.isnan(x), 1.0, ert.maximum(x, -1.0) * s) + 0.5

    x = arr([[np.nan, np.inf, -np.inf, 0.0], [-0.0, 2.0, -3.0, np.nan]], "float64")
    s = arr(2.0, "float64")  # a 0-d tensor: read at [()]
    want = await (await f.eager(x, s))
    assert_same(await (await f(x, s)), want)
    assert fused_names(f, x, s) == ["fused[isnan,maximum,multiply,where,add]"]


@pytest.mark.parametrize(
    "dtype, program",
    [
        ("int32", lambda x, y: (x // y + x % y) * 3 - (x << 2)),
        ("uint8", lambda x, y: (x + 250) * 3 // 7 - y),
        ("int8", lambda x, y: ert.logical_and(x > 0, y < 0) | (x == y)),
    ],
)
def test_integer_chains_wrap_like_numpy(dtype: str, program: Any) -> None:
    f = ert.function(program)
    x = ert.asarray(values(dtype, 16, seed=8).reshape(4, 4))
    y = ert.asarray(values(dtype, 16, seed=9).reshape(4, 4))
    assert [n for n in fused_names(f, x, y) if n.startswith("fused")]
    compare(f, x, y)


def test_mixed_dtypes_and_casts() -> None:
    @ert.function
    def f(i: Any, x: Any) -> Any:
        return ert.astype(ert.sqrt(ert.abs(i + x)) * 2, ert.float32) + 1

    i = arr(rng.integers(-50, 50, (3, 5)), "int32")
    x = arr(rng.standard_normal(5), "float32")
    assert fused_names(f, i, x) == ["fused[add,abs,sqrt,multiply,astype,add]"]
    compare(f, i, x)


def test_non_contiguous_operand() -> None:
    @ert.function
    def f(x: Any) -> Any:
        return ert.relu(x.T * 2.0 + 1.0)  # the transpose is a view: an 'A' layout array

    x = arr(F32, "float32")
    compare(f, x)
    assert fused_names(f, x)[-1] == "fused[multiply,add,relu]"


def test_groups_stop_at_values_read_elsewhere_and_at_outputs() -> None:
    @ert.function
    def f(x: Any) -> Any:
        a = ert.exp(x) * 2  # read by two groups: its own root
        shared = x * 3 + 1  # a graph output: its own root
        return ert.relu(a) - 1, a / 4 + 1, shared, ert.sin(shared) * 2

    x = arr(F32[:4, :4], "float32")
    assert fused_names(f, x) == [
        "fused[exp,multiply]",
        "fused[multiply,add]",
        "fused[relu,subtract]",
        "fused[divide,add]",
        "fused[sin,multiply]",
    ]
    compare(f, x)


def test_transcendentals_on_large_arrays_stay_numpy_loops() -> None:
    # numba's exp is a scalar libm call per element, numpy's a SIMD loop: only
    # worth fusing while the call overhead saved is larger.
    @ert.function
    def f(x: Any) -> Any:
        return ert.exp(x) * 2 + 1

    big = arr(np.ones((256, 256)), "float32")
    small = arr(np.ones((4, 4)), "float32")
    assert fused_names(f, big) == ["exp", "fused[multiply,add]"]
    assert fused_names(f, small) == ["fused[exp,multiply,add]"]


def test_power_with_negative_integer_exponent_fails_as_eagerly() -> None:
    @ert.function
    def f(x: Any, y: Any) -> Any:
        return x**y + 1

    x, y = arr([[2, 3], [4, 5]], "int64"), arr([[1, -1], [2, 0]], "int64")
    assert fused_names(f, x, y) == ["fused[power,add]"]
    with pytest.raises(ert.KernelError, match="negative integer powers"):
        f(x, y).numpy()
    with pytest.raises(ert.KernelError, match="negative integer powers"):
        f.eager(x, y).numpy()


# -- epilogues ------------------------------------------------------------------------------
W = rng.standard_normal((32, 64)).astype(np.float32)
B = rng.standard_normal(64).astype(np.float32)


def test_matmul_bias_relu_epilogue() -> None:
    w, b = ert.asarray(W), ert.asarray(B)

    @ert.function
    def layer(x: Any) -> Any:
        return ert.relu(x @ w + b)

    x = arr(rng.standard_normal((16, 32)), "float32")
    assert fused_names(layer, x) == ["fused[matmul,add,relu]"]
    compare(layer, x)
    plan = layer.compiled_for(x).plan
    assert len(plan.steps) == 1 and plan.memory.scratch_bytes == 0  # straight into the output


def test_linear_and_conv2d_epilogues() -> None:
    w, b = ert.asarray(W.T.copy()), ert.asarray(B)
    cw = ert.asarray(rng.standard_normal((8, 3, 3, 3)).astype(np.float32))
    cb = ert.asarray(rng.standard_normal(8).astype(np.float32))

    @ert.function
    def f(x: Any, img: Any) -> Any:
        return ert.relu(ert.linear(x, w, b)) * 2, ert.maximum(ert.conv2d(img, cw, cb, padding=1), 0)

    x = arr(rng.standard_normal((16, 32)), "float32")
    img = arr(rng.standard_normal((2, 3, 12, 12)), "float32")
    assert fused_names(f, x, img) == ["fused[linear,relu,multiply]", "fused[conv2d,maximum]"]
    compare(f, x, img)


@pytest.mark.parametrize("rows", [16, 700])  # one product, or rows shared by two threads
def test_linear_bias_is_added_in_the_epilogue_pass(rows: int) -> None:
    # The bias becomes an operand of the fused loop: the product is written without
    # it and the loop adds it as it reads each element (one pass, not two), also
    # where the epilogue reads the bias itself too.
    from eagerrt.backends.cpu import linear as cpu_linear

    w, b = ert.asarray(W.T.copy()), ert.asarray(B)

    def layers(x: Any, y: Any, skip: Any) -> Any:
        return ert.gelu(ert.linear(x, w, b)) + skip, ert.linear(y, w, b) * b

    x, y = (arr(rng.standard_normal((rows, 32)), "float32") for _ in range(2))
    skip = arr(rng.standard_normal((rows, 64)), "float32")
    biases: list[Any] = []
    real = cpu_linear.linear_into

    def spy(x: Any, weight: Any, bias: Any, out: Any, *rest: Any) -> None:
        biases.append(bias)
        real(x, weight, bias, out, *rest)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cpu_linear, "linear_into", spy)  # the plan's out forms bind it as they compile
        f = ert.function(layers)
        assert fused_names(f, x, y, skip) == ["fused[linear,gelu,add]", "fused[linear,multiply]"]
        for node in f.compiled_for(x, y, skip).graph.nodes:
            assert [a.shape for a in node.inputs[:2]] == [(rows, 32), (64, 32)]  # no bias
            assert any(a.shape == (64,) for a in node.inputs[2:])  # the bias, read by the loop
        compare(f, x, y, skip)
        biases.clear()  # the eager run's, with its bias
        for t in f(x, y, skip):
            t.numpy()
    assert len(biases) == 2 and all(bias is None for bias in biases)


@pytest.mark.parametrize("batch", [1, 3])
def test_conv2d_epilogue_runs_on_images_as_they_are_done(
    batch: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A residual block's tail: conv2d, a per-channel scale, the skip input added,
    # relu. The convolution writes into the plan's buffer and the fused loop runs
    # on each run of images it finishes (blocks of whole images, or an image's
    # last block of rows), not over the whole result afterwards.
    from eagerrt.backends.cpu import conv as cpu_conv

    monkeypatch.setattr(cpu_conv, "_WINOGRAD_BYTES", 0)
    monkeypatch.setattr(cpu_conv, "_WINOGRAD_MIN_COLS", 8)  # several blocks of rows an image
    monkeypatch.setattr(cpu_conv, "_SPLIT_FLOPS", 0)
    cw = ert.asarray(rng.standard_normal((8, 8, 3, 3)).astype(np.float32))
    scale = ert.asarray(rng.standard_normal((1, 8, 1, 1)).astype(np.float32))

    @ert.function
    def block(x: Any, skip: Any) -> Any:
        return ert.relu(ert.conv2d(x, cw, padding=1) * scale + skip)

    x = arr(rng.standard_normal((batch, 8, 12, 12)), "float32")
    skip = arr(rng.standard_normal((batch, 8, 12, 12)), "float32")
    assert fused_names(block, x, skip) == ["fused[conv2d,multiply,add,relu]"]
    runs: list[tuple[int, int]] = []
    real = cpu_conv._ImagesDone.__init__

    def recording(self: Any, epilogue: Any) -> None:
        def noted(first: int, end: int) -> None:
            runs.append((first, end))
            epilogue(first, end)

        real(self, noted if epilogue is not None else None)

    monkeypatch.setattr(cpu_conv._ImagesDone, "__init__", recording)
    for threads in (1, 2):
        with ert.config.override(num_threads=threads):
            compare(block, x, skip)
            runs.clear()
            block(x, skip).numpy()
        assert sorted(i for first, end in runs for i in range(first, end)) == [*range(batch)]
        assert len(runs) == batch  # each image as its last block of rows is done


def test_conv2d_epilogue_with_a_per_image_operand_runs_after() -> None:
    # An operand that is neither the result's shape nor one image's (one value
    # per image, a constant): the fused loop runs over the whole result once the
    # convolution is done. An unbatched image also runs that way.
    cw = ert.asarray(rng.standard_normal((4, 3, 3, 3)).astype(np.float32))
    per_image = ert.asarray(rng.standard_normal((2, 1, 1, 1)).astype(np.float32))

    @ert.function
    def f(x: Any, one: Any) -> Any:
        return ert.conv2d(x, cw, padding=1) * per_image, ert.relu(ert.conv2d(one, cw, padding=1))

    x = arr(rng.standard_normal((2, 3, 9, 9)), "float32")
    one = arr(rng.standard_normal((3, 9, 9)), "float32")
    assert fused_names(f, x, one) == ["fused[conv2d,multiply]", "fused[conv2d,relu]"]
    compare(f, x, one)


def test_constant_conv_weights_are_prepared_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A conv2d whose weight is a constant gets its Winograd weights when the plan
    is built (``Op.prepare``), not on every call; a weight that is an input (or an
    eager call) transforms per call, as before. Results stay equal."""
    from eagerrt.backends.cpu import conv as cpu_conv
    from eagerrt.ops.nn.conv import conv_geometry

    made = []
    transform = cpu_conv._winograd_u
    monkeypatch.setattr(
        cpu_conv, "_winograd_u", lambda w, g: made.append(w.shape) or transform(w, g)
    )
    cw = ert.asarray(rng.standard_normal((16, 8, 3, 3)).astype(np.float32))
    cb = ert.asarray(rng.standard_normal(16).astype(np.float32))

    @ert.function
    def f(x: Any, w: Any) -> Any:
        return ert.relu(ert.conv2d(x, cw, cb, padding=1)), ert.conv2d(x, w, padding=1)

    x = arr(rng.standard_normal((2, 8, 16, 16)), "float32")
    w = arr(rng.standard_normal((4, 8, 3, 3)), "float32")
    assert cpu_conv._winograd_fits(conv_geometry(x, cw, cb, 1, 1, 1, 1))
    compare(f, x, w)  # compiles (cw's transform), runs compiled and eagerly
    made.clear()
    for _ in range(3):
        f(x, w)[0].numpy()
    assert made == [(4, 8, 3, 3)] * 3  # the input weight only


def test_prepared_conv_weights_are_shared_by_traces(monkeypatch: pytest.MonkeyPatch) -> None:
    """Traces for other batch sizes reuse the Winograd weights made for the first
    (one copy per weight, not per trace); they go when the weight does."""
    import gc

    from eagerrt.backends.cpu import conv as cpu_conv

    made = []
    transform = cpu_conv._winograd_u
    monkeypatch.setattr(
        cpu_conv, "_winograd_u", lambda w, g: made.append(w.shape) or transform(w, g)
    )

    def model() -> Any:
        cw = ert.asarray(rng.standard_normal((16, 8, 3, 3)).astype(np.float32))
        return ert.function(lambda x: ert.conv2d(x, cw, padding=1))

    f = model()
    for batch in (2, 3, 4):
        compare(f, arr(rng.standard_normal((batch, 8, 16, 16)), "float32"))
    assert made == [(16, 8, 3, 3)] * 4  # once compiled, three times eagerly in compare
    entries = len(cpu_conv._prepared)
    del f  # and with it the weight
    gc.collect()
    assert len(cpu_conv._prepared) < entries
    assert all(ref() is not None for ref, _, _ in cpu_conv._prepared.values())


def test_product_read_elsewhere_keeps_its_node() -> None:
    w = ert.asarray(W)

    @ert.function
    def f(x: Any) -> Any:
        h = x @ w
        return ert.relu(h) + 1, h

    x = arr(rng.standard_normal((16, 32)), "float32")
    assert fused_names(f, x) == ["matmul", "fused[relu,add]"]
    compare(f, x)


# -- small-op regions -------------------------------------------------------------------------
def test_tiny_model_is_one_region() -> None:
    w = ert.asarray((rng.standard_normal((4, 4)) * 0.5).astype(np.float32))

    @ert.function
    def model(x: Any) -> Any:
        for _ in range(100):
            x = x @ w
        return x

    x = arr(rng.standard_normal((4, 4)), "float32")
    graph = model.compiled_for(x).graph
    assert [n.name for n in graph.nodes] == ["region[(matmul)x100]"]
    got, want = model(x).numpy(), model.eager(x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-30)
    np.testing.assert_allclose(model(x).numpy(), want, rtol=1e-4, atol=1e-30)


def test_repeated_layers_loop_over_stacked_weights() -> None:
    ws = [ert.asarray(rng.standard_normal((6, 6)) * 0.4) for _ in range(5)]
    bs = [ert.asarray(rng.standard_normal(6) * 0.1) for _ in range(5)]
    w_out = ert.asarray(rng.standard_normal((6, 3)))

    @ert.function
    def net(x: Any) -> Any:
        x = ert.tanh(x)
        for w, b in zip(ws, bs, strict=True):
            x = ert.relu(x @ w + b)
        return x @ w_out

    x = arr(rng.standard_normal((2, 6)), "float64")
    graph = net.compiled_for(x).graph
    assert [n.name for n in graph.nodes] == ["region[tanh,(matmul,add,relu)x5,matmul]"]
    # Weights and biases enter as two stacked constants.
    shapes = sorted(c.shape for c in graph.constants())
    assert shapes == [(5, 6), (5, 6, 6), (6, 3)]
    compare(net, x)


def test_irregular_region_and_its_limits() -> None:
    w1 = ert.asarray(rng.standard_normal((4, 8)).astype(np.float32))
    w2 = ert.asarray(rng.standard_normal((8, 2)).astype(np.float32))
    big = ert.asarray(rng.standard_normal((64, 64)).astype(np.float32))

    @ert.function
    def f(x: Any, y: Any) -> Any:
        h = ert.relu(x @ w1 + 1.0)
        return ert.sigmoid(h @ w2) * 2, y @ big  # 64x64x64 is no tiny matmul

    x, y = arr(rng.standard_normal((3, 4)), "float32"), arr(rng.standard_normal((2, 64)), "float32")
    names = fused_names(f, x, y)
    assert "region[matmul,add,relu,matmul,sigmoid,multiply]" in names and "matmul" in names
    compare(f, x, y)


def test_long_irregular_region_calls_shared_step_functions() -> None:
    # Past INLINE_STEPS the loops move into helper functions, one per distinct
    # step: numba's compile time would otherwise grow faster than the region.
    w = ert.asarray((rng.standard_normal((4, 4)) * 0.5).astype(np.float32))
    acts = [ert.relu, ert.tanh, ert.negative, ert.abs, ert.relu, ert.negative, ert.tanh]

    @ert.function
    def f(x: Any) -> Any:
        for act in acts:
            x = act(x @ w)
        return x

    x = arr(rng.standard_normal((4, 4)), "float32")
    (node,) = f.compiled_for(x).graph.nodes
    assert node.name.startswith("region[matmul,relu,matmul,tanh")
    assert node.op.source.count("def _step") == 5  # matmul and four activations
    compare(f, x)


# -- the kernel cache -------------------------------------------------------------------------
def test_sources_load_once_per_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EAGERRT_CACHE_DIR", str(tmp_path))
    source = HEADER + "VALUE = 42\n"
    module = load_source(source)
    assert load_source(source) is module and module.VALUE == 42
    (path,) = (tmp_path / "kernels").glob("k*.py")
    assert path.read_text() == source


_CHILD = textwrap.dedent(
    """
    import json, numpy as np, eagerrt as ert
    @ert.function
    def f(x):
        return ert.relu(x * 0.5 + 1.0) - 2.0
    x = ert.asarray(np.ones((3, 3), np.float32))
    y = f(x).numpy()
    node = f.compiled_for(x).graph.nodes[0]
    kernel = node.op.out_form_for(node)
    stats = kernel.stats
    print(json.dumps({"hits": sum(stats.cache_hits.values()),
                      "misses": sum(stats.cache_misses.values()), "y": y.tolist()}))
    """
)


def test_compiled_kernels_are_reused_across_processes(tmp_path: Path) -> None:
    # numba keeps its cache beside the source unless NUMBA_CACHE_DIR moves it.
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["EAGERRT_CACHE_DIR"] = str(tmp_path)
    runs = []
    for _ in range(2):
        out = subprocess.run(
            [sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, check=True
        )
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    assert runs[0]["misses"] >= 1 and runs[0]["hits"] == 0
    assert runs[1]["hits"] >= 1 and runs[1]["misses"] == 0  # numba's cache, beside the source
    assert runs[0]["y"] == runs[1]["y"] == [[-0.5] * 3] * 3
    sources = list((tmp_path / "kernels").glob("k*.py"))
    assert len(sources) == 1 and list((tmp_path / "kernels" / "__pycache__").glob("*.nbi"))


def test_fusion_reports_its_rewrites() -> None:
    @ert.function
    def f(x: Any) -> Any:
        return ert.relu(x + 1) * 2

    x = arr(F32, "float32")
    log = dict(f.compiled_for(x).graph.log)
    assert log["elementwise fusion"] == "1 rewrite"
    assert "fused[add,relu,multiply]" in f.explain(x)
    assert fusion.fusible(f.compiled_for(x).graph.nodes[0]) is False  # fused nodes are final


def test_a_fused_kernel_takes_numpy_scalars_for_0d_operands() -> None:
    # Found by the random DAG fuzzer: x[2] (and np.take, a 1-d @) give numpy
    # scalars, not 0-d arrays; a fused kernel compiled for arrays refused them.
    @ert.function
    def f(x: Any, s: Any) -> Any:
        return ert.exp(ert.tanh(x * s + 1)), ert.exp(ert.tanh(x[2]))

    x = ert.asarray(np.arange(4.0))
    y, z = f(x, x[1] + x[1])  # an eager 0-d result, held as a numpy scalar
    np.testing.assert_allclose(y.numpy(), np.exp(np.tanh(np.arange(4.0) * 2 + 1)))
    np.testing.assert_allclose(z.numpy(), np.exp(np.tanh(2.0)))
    assert "fused[" in f.explain(x, x[1] + x[1])
