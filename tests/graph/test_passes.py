"""Graph passes: each pass's rewrite (the graph before and after it) and the
compiled function against the eager one, including rewrites that must not fire.

A pass is tested alone on a freshly traced graph (``_traced`` + ``run``); the
whole pipeline through ``ert.function`` (``compiled_for(...).graph``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import eagerrt as ert
from eagerrt.graph import passes
from eagerrt.graph.ir import Graph, Node, Value
from eagerrt.graph.passes import (
    algebraic,
    constant_folding,
    cse,
    dce,
    fold_batch_norm,
    hoist_concat,
)
from eagerrt.graph.passes.rewrite import make_const, make_node
from eagerrt.graph.tracing import trace_sync
from eagerrt.ops.registry import define_op, get_op

rng = np.random.default_rng(11)

#: Values every exactness test runs on: signed zeros, nan, infinities, subnormals.
SPECIAL = np.array([-0.0, 0.0, np.nan, np.inf, -np.inf, 1.5, -2.25, 1e-40, 3e38], "float32")


def data(*shape: int, dtype: str = "float32") -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


def const(*shape: int) -> ert.Tensor:
    return ert.asarray(data(*shape))


def positive(*shape: int) -> ert.Tensor:
    return ert.asarray((rng.random(shape) + 0.5).astype("float32"))


def _traced(fn: Callable[..., Any], *args: Any) -> Graph:
    """``fn`` traced, constants as numpy arrays (as ert.function has them)."""
    graph, _, _ = trace_sync(fn, fn.__name__, args, {})
    for c in graph.constants():
        if isinstance(c.const, ert.Tensor):
            c.const = c.const.numpy()
    return graph


def names(graph: Graph) -> list[str]:
    return [n.name for n in graph.nodes]


def run_pass(run: Callable[[Graph], int], fn: Callable[..., Any], *args: Any) -> tuple[Graph, int]:
    """``fn`` traced, then rewritten by one pass; the graph still verifies."""
    graph = _traced(fn, *args)
    changed = run(graph)
    graph.verify()
    return graph, changed


#: The pipeline's passes tested here; fusion's regions, which come after them,
#: would hide the structure these tests check.
_TESTED = {dce.run, cse.run, algebraic.run, constant_folding.run, fold_batch_norm.run}
_TESTED.add(hoist_concat.run)


def optimized(fn: Callable[..., Any], *args: Any) -> Graph:
    """``fn`` traced and optimized by the pipeline, fusion left out."""
    graph = _traced(fn, *args)
    for _, run in passes.PIPELINE:
        if run in _TESTED:
            run(graph)
            graph.verify()
    return graph


def _arrays(result: Any) -> list[np.ndarray]:
    results = result if isinstance(result, (tuple, list)) else [result]
    return [r.numpy() if isinstance(r, ert.Tensor) else np.asarray(r) for r in results]


def same_as_eager(fn: Callable[..., Any], *args: Any, exact: bool = False) -> None:
    """The compiled function gives the eager results: bit for bit (``exact``),
    or to float tolerance."""
    compiled = ert.function(fn)
    with np.errstate(all="ignore"):  # inf * 0 and friends warn, in both alike
        results = _arrays(compiled(*args)), _arrays(compiled.eager(*args))
    for got, want in zip(*results, strict=True):
        assert (got.shape, got.dtype) == (want.shape, want.dtype)
        if exact:
            assert got.tobytes() == want.tobytes(), (got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# -- dead code elimination -----------------------------------------------------------------
def test_dce_drops_what_no_output_reads() -> None:
    def f(x: Any) -> Any:
        ert.exp(x)  # never read
        unused = ert.sin(x) * 2  # a dead chain
        del unused
        return x + 1

    x = data(3)
    graph, changed = run_pass(dce.run, f, x)
    assert (changed, names(graph)) == (3, ["add"])
    same_as_eager(f, x, exact=True)


def test_dce_keeps_everything_an_output_reaches() -> None:
    def f(x: Any) -> Any:
        y = ert.exp(x)
        return y + 1, y * 2

    graph, changed = run_pass(dce.run, f, data(3))
    assert (changed, names(graph)) == (0, ["exp", "add", "multiply"])


# -- common subexpressions ------------------------------------------------------------------
def test_cse_merges_repeated_computations() -> None:
    def f(x: Any) -> Any:
        a = ert.abs(x) * 2
        b = ert.abs(x) * 2
        return a + b

    x = data(4)
    graph, changed = run_pass(cse.run, f, x)
    assert (changed, names(graph)) == (2, ["abs", "multiply", "add"])
    add = graph.nodes[-1]
    assert add.inputs[0] is add.inputs[1]
    same_as_eager(f, x, exact=True)


def test_cse_keeps_calls_that_differ_in_scalar_type_or_static_arguments() -> None:
    def f(x: Any) -> Any:
        return x * 2, x * 2.0, ert.sum(x, axis=0), ert.sum(x, axis=1)

    x = data(2, 3)
    graph, changed = run_pass(cse.run, f, x)
    assert changed == 0
    assert names(graph) == ["multiply", "multiply", "sum", "sum"]
    same_as_eager(f, x, exact=True)


def test_cse_merges_duplicate_outputs_into_one_value() -> None:
    def f(x: Any) -> Any:
        return x + 1, x + 1

    graph, changed = run_pass(cse.run, f, data(2))
    assert changed == 1 and graph.outputs[0] is graph.outputs[1]


# -- constant folding ----------------------------------------------------------------------
def _graph_with_constant_nodes(shape: tuple[int, ...] = (3,)) -> tuple[Graph, Value, Value]:
    """in + (c1 * c2 + 1): the constant part as nodes, as passes leave it."""
    device = ert.asarray(np.zeros(1)).device
    x = Value(shape, np.dtype("float64"), device, name="%in0")
    graph = Graph("g", [x])
    c1 = make_const(np.full(shape, 2.0), device)
    c2 = make_const(np.full(shape, 3.0), device)
    prod = make_node(get_op("multiply"), [c1, c2], {})
    plus = make_node(get_op("add"), [prod.out, 1], {})  # type: ignore[union-attr]
    out = make_node(get_op("add"), [x, plus.out], {})  # type: ignore[union-attr]
    graph.nodes = [prod, plus, out]  # type: ignore[list-item]
    graph.outputs = [out.out]  # type: ignore[union-attr]
    graph.verify()
    return graph, x, out.out  # type: ignore[union-attr]


def test_constant_folding_computes_constant_subgraphs_once() -> None:
    graph, _, _ = _graph_with_constant_nodes()
    assert constant_folding.run(graph) == 2
    graph.verify()
    assert names(graph) == ["add"]
    folded = graph.nodes[0].inputs[1]
    assert folded.is_const and folded.node is None
    np.testing.assert_array_equal(folded.const, [7.0, 7.0, 7.0])


def test_constant_folding_leaves_results_over_the_size_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(constant_folding, "MAX_FOLD_BYTES", 16)
    graph, _, _ = _graph_with_constant_nodes((3,))  # 24-byte results
    assert constant_folding.run(graph) == 0
    assert names(graph) == ["multiply", "add", "add"]


def _raises(x: Any) -> Any:
    raise FloatingPointError("boom")


_fold_fails = define_op("test_passes_fold_fails", lambda x: (x.shape, x.dtype))
_fold_fails.register_kernel("generic", _raises)
_stateful = define_op("test_passes_stateful", lambda x: (x.shape, x.dtype))
_stateful.register_kernel("generic", lambda x: x + 1)
_stateful.stateful = True  # type: ignore[attr-defined]


@pytest.mark.parametrize("op", [_fold_fails, _stateful], ids=["kernel-raises", "stateful"])
def test_constant_folding_leaves_failing_and_stateful_nodes_to_run_time(op: Any) -> None:
    device = ert.asarray(np.zeros(1)).device
    graph = Graph("g", [])
    node = make_node(op, [make_const(np.ones(2), device)], {})
    assert node is not None
    graph.nodes = [node]
    graph.outputs = [node.out]
    assert constant_folding.run(graph) == 0
    assert names(graph) == [op.name]


# -- algebraic simplification ------------------------------------------------------------
IDENTITIES: dict[str, Callable[[Any], Any]] = {
    "x - 0": lambda x: x - 0,
    "x - 0.0": lambda x: x - 0.0,
    "x + -0.0": lambda x: x + -0.0,
    "-0.0 + x": lambda x: -0.0 + x,
    "x * 1": lambda x: x * 1,
    "1.0 * x": lambda x: 1.0 * x,
    "x / 1": lambda x: x / 1,
    "x ** 1": lambda x: x**1,
    "x * ones": lambda x: x * ert.ones(x.shape, dtype=x.dtype),
    "x - zeros(1)": lambda x: x - ert.zeros((1,), dtype=x.dtype),
    "--x": lambda x: ert.negative(ert.negative(x)),
    "+x": lambda x: ert.positive(x),
    "conj(real x)": lambda x: ert.conj(x),
    "astype same": lambda x: ert.astype(x, x.dtype),
    "x.T.T": lambda x: x.T.T,
    "reshape back": lambda x: ert.reshape(ert.reshape(x, (-1,)), x.shape),
    "expand then squeeze": lambda x: ert.squeeze(ert.expand_dims(x, axis=0), axis=0),
    "broadcast_to same": lambda x: ert.broadcast_to(x, x.shape),
    "x[...]": lambda x: x[...],
    "x[:]": lambda x: x[:],
    "maximum(x, x)": lambda x: ert.maximum(x, x),
    "where(c, x, x)": lambda x: ert.where(x > 0, x, x),
    "concat([x])": lambda x: ert.concat([x]),
}


@pytest.mark.parametrize("fn", IDENTITIES.values(), ids=IDENTITIES.keys())
def test_algebraic_identities_vanish_exactly(fn: Callable[[Any], Any]) -> None:
    x = SPECIAL.copy()
    graph, changed = run_pass(algebraic.run, fn, x)
    assert changed >= 1
    assert graph.outputs == graph.inputs  # the function returns its input
    assert names(graph) == []  # and what fed the rewritten nodes went too
    assert names(optimized(fn, x)) == []
    same_as_eager(fn, x, exact=True)


INTEGER_IDENTITIES: dict[str, Callable[[Any], Any]] = {
    "x + 0": lambda x: x + 0,
    "0 + x": lambda x: 0 + x,
    "x * 1": lambda x: x * 1,
    "x ** 1": lambda x: x**1,
    "~~x": lambda x: ~(~x),
    "--x": lambda x: ert.negative(ert.negative(x)),
}


@pytest.mark.parametrize("fn", INTEGER_IDENTITIES.values(), ids=INTEGER_IDENTITIES.keys())
@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_algebraic_integer_identities(fn: Callable[[Any], Any], dtype: str) -> None:
    x = np.array([0, 1, 127, 5], dtype)
    assert names(optimized(fn, x)) == []
    same_as_eager(fn, x, exact=True)


def test_algebraic_boolean_identities() -> None:
    def f(x: Any) -> Any:
        return ert.logical_not(ert.logical_not(x)), x * True, x + False

    x = np.array([True, False])
    graph = optimized(f, x)
    assert names(graph) == [] and all(v is graph.inputs[0] for v in graph.outputs)
    same_as_eager(f, x, exact=True)


REFUSED: dict[str, tuple[Callable[[Any], Any], list[str]]] = {
    # -0.0 + 0.0 is +0.0: not an identity for floats.
    "x + 0": (lambda x: x + 0, ["add"]),
    "0.0 + x": (lambda x: 0.0 + x, ["add"]),
    "x - -0.0": (lambda x: x - -0.0, ["subtract"]),
    "0 - x": (lambda x: 0 - x, ["subtract"]),
    "x * 0": (lambda x: x * 0, ["multiply"]),  # nan, inf
    "x - x": (lambda x: x - x, ["subtract"]),
    "x * 1.5": (lambda x: x * 1.5, ["multiply"]),
    # Broadcasting: x (9,) * ones (2, 9) is a (2, 9) result.
    "x * ones(2, 9)": (lambda x: x * ert.ones((2, 9), dtype=x.dtype), ["multiply"]),
    # Promotion: float32 * float64 ones is float64.
    "x * ones float64": (lambda x: x * ert.ones((9,), dtype="float64"), ["multiply"]),
    "astype other": (lambda x: ert.astype(x, "float64"), ["astype"]),
    "abs(-x)": (lambda x: ert.abs(-x), ["negative", "abs"]),
    "reshape": (lambda x: ert.reshape(x, (3, 3)), ["reshape"]),
    "x[1:]": (lambda x: x[1:], ["getitem"]),
}


@pytest.mark.parametrize("case", REFUSED.values(), ids=REFUSED.keys())
def test_algebraic_refuses_inexact_or_type_changing_rewrites(
    case: tuple[Callable[[Any], Any], list[str]],
) -> None:
    fn, kept = case
    x = SPECIAL.copy()
    graph, changed = run_pass(algebraic.run, fn, x)
    assert changed == 0 and names(graph) == kept
    same_as_eager(fn, x, exact=True)


def test_algebraic_refuses_dtype_changes_on_integers_and_complex() -> None:
    def f(x: Any, b: Any, z: Any) -> Any:
        # int8 / 1 is float64, bool + 0 is int64, complex * 1 isn't exact.
        return x / 1, b + 0, z * 1, z / 1

    args = (np.array([1, -3], "int8"), np.array([True, False]), np.array([complex(np.inf, -0.0)]))
    graph, changed = run_pass(algebraic.run, f, *args)
    assert changed == 0 and names(graph) == ["divide", "add", "multiply", "divide"]
    same_as_eager(f, *args, exact=True)


def test_algebraic_keeps_adding_a_negation() -> None:
    # x + (-y) equals x - y, except that a nan y keeps its sign bit in one only.
    def f(x: Any, y: Any) -> Any:
        return x + (-y), x - (-y)

    args = (SPECIAL.copy(), SPECIAL[::-1].copy())
    _, changed = run_pass(algebraic.run, f, *args)
    assert changed == 0
    same_as_eager(f, *args, exact=True)


def test_algebraic_collapses_chains() -> None:
    def f(x: Any) -> Any:
        return ert.negative(ert.negative(-x)), ert.abs(ert.abs(ert.abs(x))), ert.relu(ert.relu(x))

    x = SPECIAL.copy()
    graph = optimized(f, x)
    assert names(graph) == ["negative", "abs", "relu"]
    same_as_eager(f, x, exact=True)


def test_algebraic_composes_permutations() -> None:
    def f(x: Any) -> Any:
        once = ert.permute_dims(ert.permute_dims(x, (1, 2, 0)), (2, 0, 1))  # cancels
        twice = ert.permute_dims(ert.permute_dims(x, (1, 2, 0)), (1, 0, 2))
        moved = ert.moveaxis(ert.matrix_transpose(x), 0, -1)
        return once, twice, moved

    x = data(2, 3, 4)
    graph = optimized(f, x)
    assert graph.outputs[0] is graph.inputs[0]
    # Both compose to axes (2, 1, 0): one node once CSE sees them.
    assert names(graph) == ["transpose"] and graph.nodes[0].static["axes"] == (2, 1, 0)
    assert graph.outputs[1] is graph.outputs[2]
    same_as_eager(f, x, exact=True)


def test_algebraic_merges_reshape_chains() -> None:
    def f(x: Any) -> Any:
        return ert.reshape(ert.expand_dims(ert.reshape(x, (6, 4)), axis=0), (4, 6))

    x = data(2, 3, 4)
    graph = optimized(f, x)
    assert names(graph) == ["reshape"] and graph.nodes[0].inputs[0] is graph.inputs[0]
    same_as_eager(f, x, exact=True)


def test_algebraic_joins_adjacent_slices() -> None:
    def f(x: Any) -> Any:
        whole = ert.concat([x[:, 0:2], x[:, 2:3], x[:, 3:]], axis=1)
        part = ert.concat([x[1:, 0:1], x[1:, 1:3]], axis=-1)
        gap = ert.concat([x[:, 0:1], x[:, 2:3]], axis=1)  # not adjacent: kept
        return whole, part, gap

    x = data(3, 5)
    graph = optimized(f, x)
    assert graph.outputs[0] is graph.inputs[0]
    assert names(graph) == ["getitem", "getitem", "getitem", "concat"]
    same_as_eager(f, x, exact=True)


# -- batch norm folding -------------------------------------------------------------------
CH = 6
MEAN, VAR, GAMMA, BETA = const(CH), positive(CH), const(CH), const(CH)
CONV_W, CONV_B = const(CH, 4, 3, 3), const(CH)
LIN_W, LIN_B = const(CH, 5), const(CH)
SQUARE_W, ROW_B = const(5, 5), const(CH, 1)


def _bn(y: Any, affine: bool = True, eps: float = 1e-5) -> Any:
    if affine:
        return ert.batch_norm(y, MEAN, VAR, GAMMA, BETA, eps=eps)
    return ert.batch_norm(y, MEAN, VAR, eps=eps)


FOLDED: dict[str, tuple[Callable[[Any], Any], tuple[int, ...], list[str]]] = {
    "conv": (lambda x: _bn(ert.conv2d(x, CONV_W, padding=1)), (2, 4, 7, 7), ["conv2d"]),
    "conv+bias": (
        lambda x: _bn(ert.conv2d(x, CONV_W, CONV_B, stride=2), affine=False, eps=1e-3),
        (2, 4, 9, 9),
        ["conv2d"],
    ),
    "linear": (lambda x: _bn(ert.linear(x, LIN_W)), (3, 5), ["linear"]),
    "linear+bias": (lambda x: _bn(ert.linear(x, LIN_W, LIN_B)), (3, 5), ["linear"]),
    "matmul": (lambda x: _bn(x @ LIN_W.T), (3, 5), ["matmul", "add"]),
    "matmul+bias": (lambda x: _bn(x @ LIN_W.T + LIN_B), (3, 5), ["matmul", "add"]),
    "bias+matmul": (lambda x: _bn(LIN_B + x @ LIN_W.T), (3, 5), ["matmul", "add"]),
}


@pytest.mark.parametrize("case", FOLDED.values(), ids=FOLDED.keys())
def test_batch_norm_folds_into_the_layer_before(
    case: tuple[Callable[[Any], Any], tuple[int, ...], list[str]],
) -> None:
    fn, shape, after = case
    x = data(*shape)
    graph, changed = run_pass(fold_batch_norm.run, fn, x)
    assert changed == 1
    assert names(graph) == after
    layer = graph.nodes[0]
    assert all(v.is_const for v in layer.value_inputs() if v is not graph.inputs[0])
    assert graph.outputs[0].node is graph.nodes[-1]
    assert names(optimized(fn, x)) == after
    same_as_eager(fn, x)


def test_batch_norm_fold_works_on_float64() -> None:
    w = ert.asarray(data(4, 3, 1, 1, dtype="float64"))
    stats = [
        ert.asarray(a)
        for a in (
            data(4, dtype="float64"),
            np.full(4, 2.0),
            data(4, dtype="float64"),
            data(4, dtype="float64"),
        )
    ]

    def f(x: Any) -> Any:
        return ert.batch_norm(ert.conv2d(x, w), *stats)

    x = data(1, 3, 4, 4, dtype="float64")
    assert names(optimized(f, x)) == ["conv2d"]
    same_as_eager(f, x)


NOT_FOLDED: dict[str, tuple[Callable[..., Any], tuple[Any, ...], list[str]]] = {
    # The conv's own output is returned too: folding would run the conv twice.
    "layer read twice": (
        lambda x: (lambda y: (_bn(y), y))(ert.conv2d(x, CONV_W)),
        (data(1, 4, 5, 5),),
        ["conv2d", "batch_norm"],
    ),
    "weight at run time": (
        lambda x, w: _bn(ert.conv2d(x, w)),
        (data(1, 4, 5, 5), data(CH, 4, 3, 3)),
        ["conv2d", "batch_norm"],
    ),
    "statistics at run time": (
        lambda x, m: ert.batch_norm(ert.linear(x, LIN_W), m, VAR),
        (data(3, 5), data(CH)),
        ["linear", "batch_norm"],
    ),
    # (C, H, W): batch norm's channel axis 1 is H, not the conv's channels.
    "unbatched conv": (
        lambda x: ert.batch_norm(ert.conv2d(x, CONV_W[:, :, :1, :1]), MEAN[:1], VAR[:1]),
        (data(4, 1, 3),),
        ["conv2d", "batch_norm"],
    ),
    # (N, L, F): axis 1 is L.
    "3-d linear": (
        lambda x: _bn(ert.linear(x, SQUARE_W)),
        (data(2, CH, 5),),
        ["linear", "batch_norm"],
    ),
    "relu between": (
        lambda x: _bn(ert.relu(ert.linear(x, LIN_W))),
        (data(3, 5),),
        ["linear", "relu", "batch_norm"],
    ),
    # A per-row (N, 1) bias is no per-feature bias.
    "row bias": (
        lambda x: _bn(x @ LIN_W.T + ROW_B),
        (data(CH, 5),),
        ["matmul", "add", "batch_norm"],
    ),
}


@pytest.mark.parametrize("case", NOT_FOLDED.values(), ids=NOT_FOLDED.keys())
def test_batch_norm_fold_refuses(
    case: tuple[Callable[..., Any], tuple[Any, ...], list[str]],
) -> None:
    fn, args, kept = case
    graph, changed = run_pass(fold_batch_norm.run, fn, *args)
    assert changed == 0 and names(graph) == kept
    same_as_eager(fn, *args)


# -- hoisting through concat -------------------------------------------------------------
FEATURES = 18
MEANS = [float(v) for v in rng.standard_normal(FEATURES)]
STDS = [float(v) for v in rng.random(FEATURES) + 0.5]


def normalize_features(*features: Any, means: list[float] = MEANS, stds: list[float] = STDS) -> Any:
    return ert.concat([(f - m) / s for f, m, s in zip(features, means, stds, strict=True)], axis=1)


def test_normalize_then_concat_becomes_one_vectorized_chain() -> None:
    xs = [data(32, 1) for _ in range(FEATURES)]
    graph, changed = run_pass(hoist_concat.run, normalize_features, *xs)
    assert changed == 2  # the divides, then the subtracts
    assert names(graph) == ["concat", "subtract", "divide"]
    concat, sub, div = graph.nodes
    assert concat.inputs == graph.inputs
    assert sub.inputs[1].const.shape == div.inputs[1].const.shape == (1, FEATURES)
    np.testing.assert_array_equal(sub.inputs[1].const[0], np.float32(MEANS))
    assert names(optimized(normalize_features, *xs)) == ["concat", "subtract", "divide"]
    # Each element sees the same float32 operations: bit for bit the eager result.
    same_as_eager(normalize_features, *xs, exact=True)


def test_normalizing_slices_of_one_input_leaves_just_the_chain() -> None:
    # Feature 3's (x - 0.0) / 1.0 is simplified away first; it joins as x - 0, x / 1.
    means, stds = [*MEANS], [*STDS]
    means[3], stds[3] = 0.0, 1.0

    def f(x: Any) -> Any:
        features = [x[:, i : i + 1] for i in range(FEATURES)]
        return normalize_features(*features, means=means, stds=stds)

    x = data(16, FEATURES)
    graph = optimized(f, x)
    # The joined slices are x itself.
    assert names(graph) == ["subtract", "divide"]
    assert graph.nodes[0].inputs[0] is graph.inputs[0]
    same_as_eager(f, x, exact=True)


def test_hoisting_with_constant_tensors_stack_and_broadcasts() -> None:
    scales = [const(3) for _ in range(4)]
    shifts = [const(1) for _ in range(4)]

    def f(*xs: Any) -> Any:
        stacked = ert.stack([x * s + b for x, s, b in zip(xs, scales, shifts, strict=True)], axis=1)
        rows = ert.concat([x - s for x, s in zip(xs, scales, strict=True)], axis=0)
        return stacked, rows

    xs = [data(5, 3) for _ in range(4)]
    graph = optimized(f, *xs)
    assert names(graph) == ["stack", "multiply", "add", "concat", "subtract"]
    assert graph.nodes[1].inputs[1].const.shape == (1, 4, 3)
    assert graph.nodes[2].inputs[1].const.shape == (1, 4, 1)
    assert graph.nodes[4].inputs[1].const.shape == (20, 3)
    same_as_eager(f, *xs, exact=True)


def test_hoisting_keeps_shared_weak_scalars_and_swaps_commutative_operands() -> None:
    def f(a: Any, b: Any, c: Any) -> Any:
        return ert.concat([ert.exp(a * 2), ert.exp(2 * b), ert.exp(c * 2)])

    args = [data(3) for _ in range(3)]
    graph = optimized(f, *args)
    assert names(graph) == ["concat", "multiply", "exp"]
    assert graph.nodes[1].inputs[1] == 2 and type(graph.nodes[1].inputs[1]) is int
    same_as_eager(f, *args)  # exp isn't correctly rounded: kernels may differ by an ulp


def test_hoisting_int_and_flattened_concat() -> None:
    def f(a: Any, b: Any) -> Any:
        return ert.concat([a + 3, b + 4], axis=None)

    args = (np.arange(6, dtype="int16").reshape(2, 3), np.arange(4, dtype="int16").reshape(4, 1))
    graph = optimized(f, *args)
    assert names(graph) == ["concat", "add"]
    assert graph.nodes[1].inputs[1].const.tolist() == [3] * 6 + [4] * 4
    same_as_eager(f, *args, exact=True)


def test_identity_padding_joins_branches_without_the_op() -> None:
    def f(a: Any, b: Any, c: Any) -> Any:
        return ert.concat([a - 1.0, b, c - 3.0], axis=0)

    args = [SPECIAL.copy() for _ in range(3)]
    graph = optimized(f, *args)
    assert names(graph) == ["concat", "subtract"]
    same_as_eager(f, *args, exact=True)


def test_padding_an_add_uses_negative_zero() -> None:
    def f(a: Any, b: Any, c: Any) -> Any:
        return ert.concat([a + 1.0, b, c + 3.0])

    args = [SPECIAL.copy() for _ in range(3)]
    graph = optimized(f, *args)
    assert names(graph) == ["concat", "add"]
    assert np.signbit(graph.nodes[1].inputs[1].const[len(SPECIAL)])
    same_as_eager(f, *args, exact=True)  # b's -0.0 stays -0.0


ROW_C = const(1, 2)
NOT_HOISTED: dict[str, tuple[Callable[..., Any], list[np.ndarray], list[str]]] = {
    "branch read twice": (
        lambda a, b: (lambda a2: (ert.concat([a2, b * 3.0]), a2))(a * 2.0),
        [data(3), data(3)],
        ["multiply", "multiply", "concat"],
    ),
    # float32 and float64 branches compute in different precisions.
    "mixed dtypes": (
        lambda a, b: ert.concat([a * 2.0, b * 3.0]),
        [data(3), data(3, dtype="float64")],
        ["multiply", "multiply", "concat"],
    ),
    # int32 < 2 and int32 < 2.5 run different loops (int32 vs float64).
    "different loops": (
        lambda a, b: ert.concat([a < 2, b < 2.5]),
        [np.arange(3, dtype="int32"), np.arange(3, dtype="int32")],
        ["less", "less", "concat"],
    ),
    # x (3, 1) broadcast by the constant to (3, 2): concat(x) isn't the right shape.
    "broadcast operand": (
        lambda a, b: ert.concat([a + ROW_C, b + ROW_C * 2]),
        [data(3, 1), data(3, 1)],
        ["add", "add", "concat"],
    ),
    "c - x and x - c": (
        lambda a, b: ert.concat([1.0 - a, b - 2.0]),
        [data(3), data(3)],
        ["subtract", "subtract", "concat"],
    ),
    "different ops": (
        lambda a, b: ert.concat([ert.exp(a), ert.sin(b)]),
        [data(3), data(3)],
        ["exp", "sin", "concat"],
    ),
    # exp has no identity to pad b with.
    "no identity": (
        lambda a, b, c: ert.concat([ert.exp(a), b, ert.exp(c)]),
        [data(3), data(3), data(3)],
        ["exp", "exp", "concat"],
    ),
    # maximum(-0.0, 0.0) is its first operand: no swapping.
    "maximum swapped": (
        lambda a, b: ert.concat([ert.maximum(a, 0.0), ert.maximum(0.0, b)]),
        [SPECIAL.copy(), SPECIAL.copy()],
        ["maximum", "maximum", "concat"],
    ),
    # nan + nan is one of them, which one depends on numpy's loop.
    "nan constant": (
        lambda a, b: ert.concat([a + float("nan"), b + 1.0]),
        [SPECIAL.copy(), SPECIAL.copy()],
        ["add", "add", "concat"],
    ),
    # b - 0 would be exact, but 0 - b isn't b.
    "no identity on the right": (
        lambda a, b, c: ert.concat([1.0 - a, b, 2.0 - c]),
        [data(3), data(3), data(3)],
        ["subtract", "subtract", "concat"],
    ),
}


@pytest.mark.parametrize("case", NOT_HOISTED.values(), ids=NOT_HOISTED.keys())
def test_hoisting_refuses(case: tuple[Callable[..., Any], list[np.ndarray], list[str]]) -> None:
    fn, args, kept = case
    graph, changed = run_pass(hoist_concat.run, fn, *args)
    assert changed == 0 and names(graph) == kept
    same_as_eager(fn, *args, exact=True)


# -- the pipeline ----------------------------------------------------------------------------
def test_pipeline_order_and_explain() -> None:
    order = [name for name, _ in passes.PIPELINE]
    for earlier, later in [
        ("algebraic simplification", "constant folding"),
        ("batch norm folding", "hoisting through concat"),
    ]:
        assert order.index(earlier) < order.index(later)
    assert order[0] == "dead code elimination"

    def f(x: Any) -> Any:
        return _bn(ert.conv2d(x * 1, CONV_W, padding=1))

    x = data(1, 4, 5, 5)
    text = ert.function(f).explain(x)
    assert "algebraic simplification: 1 rewrite" in text
    assert "batch norm folding: 1 rewrite" in text


@pytest.mark.anyio
async def test_async_model_with_every_pass() -> None:
    @ert.function
    async def model(x: Any, *features: Any) -> Any:
        y = _bn(ert.conv2d(x, CONV_W, padding=1)) * 1
        pooled = ert.reshape(ert.mean(y, axis=(2, 3)), (x.shape[0], CH))
        return ert.concat([pooled, normalize_features(*features)], axis=1)

    x = data(2, 4, 6, 6)
    features = [data(2, 1) for _ in range(FEATURES)]
    got = await (await model(x, *features))
    want = await model.eager(x, *features)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    graph = optimized(model, x, *features)
    # The batch norm folded, "* 1" and the reshape to its own shape gone, the
    # features normalized in one vectorized chain.
    assert names(graph) == ["conv2d", "mean", "concat", "subtract", "divide", "concat"]
    assert not any(isinstance(n, Node) and n.name == "batch_norm" for n in graph.nodes)


# -- attention heads merged ------------------------------------------------------------------
def _attention_block(split: tuple[int, ...] = (0, 2, 1, 3), merge: tuple[int, ...] = (0, 2, 1, 3)):
    """A transformer's attention: heads split out of x, attended, merged back."""

    def block(x: Any, keys: Any) -> Any:
        b, length, hidden = x.shape
        heads = ert.permute_dims(ert.reshape(x, (b, length, 4, hidden // 4)), split)
        context = ert.scaled_dot_product_attention(heads, heads * 0.5, heads, keys)
        return ert.reshape(ert.permute_dims(context, merge), (b, length, hidden)) * 2

    return block


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("batch", [1, 3])
def test_attention_writes_its_heads_merged(dtype: str, batch: int) -> None:
    # The transpose that merges the heads goes: attention writes (B, L, H, E)
    # itself, and the reshape after it is a view of that buffer, not a copy.
    from eagerrt.backends.cpu.passes import merge_heads

    block = _attention_block()
    x = data(batch, 6, 16, dtype=dtype)
    keys = rng.random((batch, 1, 1, 6)) > 0.3
    keys[:, ..., 0] = True
    graph, changed = run_pass(merge_heads.run, block, x, keys)
    assert changed == 1
    assert names(graph) == [
        "reshape", "transpose", "multiply", "attention[merged heads]", "reshape", "multiply"
    ]  # fmt: skip
    merged = graph.nodes[3]
    assert merged.outputs[0].shape == (batch, 6, 4, 4)
    same_as_eager(block, x, keys)
    same_as_eager(block, x, np.ones_like(keys))  # a mask allowing every key
    plan = ert.function(block).compiled_for(x, keys).plan
    assert [s.node.name for s in plan.steps].count("transpose") == 1  # the split only


def test_attention_heads_stay_apart_where_something_else_reads_them() -> None:
    from eagerrt.backends.cpu.passes import merge_heads

    x, keys = data(2, 6, 16), rng.random((2, 1, 1, 6)) > 0.3

    def also_returned(x: Any, keys: Any) -> Any:
        heads = ert.permute_dims(ert.reshape(x, (2, 6, 4, 4)), (0, 2, 1, 3))
        context = ert.scaled_dot_product_attention(heads, heads, heads, keys)
        return ert.permute_dims(context, (0, 2, 1, 3)), context  # the heads read apart too

    for fn in (also_returned, _attention_block(merge=(0, 2, 3, 1))):  # not the merge
        graph, changed = run_pass(merge_heads.run, fn, x, keys)
        assert changed == 0 and "scaled_dot_product_attention" in names(graph)
        same_as_eager(fn, x, keys)
