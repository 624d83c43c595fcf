"""Random DAG fuzzing: random programs over the op set, run every way eagerrt runs
them, compared with numpy running the same program one statement at a time.

A program (:class:`Dag`) is a list of statements over variables: inputs of random
shapes, elementwise unary and binary ops (with broadcasting and weak Python
scalars), reductions, matmul, reshape, transpose, concat, where, basic and integer
indexing, writes (``t[key] = v``, ``t += v``), and injected faults: ``fuzz_fail``
(a kernel that raises, naming its node) and ``fuzz_slow`` (a kernel that sleeps on
a worker thread). Statements are drawn by a :class:`Chooser`, so the same
generator serves hypothesis (which shrinks a failing program) and a seeded
``random.Random`` (:func:`run_fuzz`, for the figures script).

A case runs the program in one *mode* (``eager``, ``sync``: ``ert.sync_mode()``,
``deterministic``: ``ert.deterministic(seed)``, ``compiled``: ``ert.function``) on
one *loop* (``none``: plain sync code reading with ``t.numpy()``; ``asyncio``,
``uvloop``, ``trio``: one task per output awaiting it), under a timeout. Then:

* every output's shape and dtype, known at the call, are numpy's;
* an output that depends on no failing node equals numpy's value;
* an output that depends on one raises a ``KernelError`` naming ``fuzz_fail`` whose
  cause names one of the failing nodes it depends on, in every mode (a compiled call
  that fails is replayed op by op, so its outputs fail alone, as eagerly).

>>> summary = run_fuzz(cases=3, seed=1, check_leaks=False)
>>> summary["cases"], summary["mismatches"]
(3, [])
"""

from __future__ import annotations

import contextlib
import math
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import anyio
import numpy as np

import eagerrt as ert

from .leaks import no_leaks

__all__ = [
    "LOOPS",
    "MODES",
    "Chooser",
    "Dag",
    "InjectedFault",
    "Outcome",
    "RandomChooser",
    "generate",
    "reference",
    "run_case",
    "run_fuzz",
    "warm_up",
]

MODES = ("eager", "sync", "deterministic", "compiled")
LOOPS = ("none", "asyncio", "uvloop", "trio")

T = TypeVar("T")


# -- injected faults ----------------------------------------------------------------------
class InjectedFault(RuntimeError):
    """Raised by ``fuzz_fail``'s kernel; ``node`` is the statement that failed."""

    def __init__(self, node: int) -> None:
        super().__init__(f"injected fault at node {node}")
        self.node = node


def _identity_rule(x: Any, **static: Any) -> tuple[tuple[int, ...], Any]:
    return x.shape, x.dtype


def _static_cost(shape: Any, dtype: Any, *args: Any, cost: float = 0.0, **static: Any) -> float:
    return cost  # chosen per node: some run inline, some on workers


fuzz_fail = ert.define_op(
    "fuzz_fail", rule=_identity_rule, cost=_static_cost, doc="Raises InjectedFault(node)."
)
fuzz_slow = ert.define_op(
    "fuzz_slow", rule=_identity_rule, cost=_static_cost, doc="Sleeps, then returns its input."
)


@fuzz_fail.kernel()
def _fail(x: np.ndarray, *, node: int, cost: float) -> np.ndarray:
    raise InjectedFault(node)


@fuzz_slow.kernel()
def _slow(x: np.ndarray, *, delay: float, cost: float) -> np.ndarray:
    time.sleep(delay)
    return x


# -- choosing -------------------------------------------------------------------------------
class Chooser(Protocol):
    """Where the generator's decisions come from."""

    def integer(self, lo: int, hi: int) -> int:
        """An int in [lo, hi] (both ends included)."""
        ...

    def choice(self, options: Sequence[T]) -> T: ...

    def chance(self, percent: int) -> bool: ...


class RandomChooser:
    """Decisions from ``random.Random(seed)``."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def choice(self, options: Sequence[T]) -> T:
        return options[self.rng.randrange(len(options))]

    def chance(self, percent: int) -> bool:
        return self.rng.randrange(100) < percent


# -- programs -------------------------------------------------------------------------------
Shape = tuple[int, ...]
UNARY = ("negative", "abs", "tanh", "sin", "sqrt_abs", "exp_tanh")
BINARY = ("add", "subtract", "multiply", "maximum", "minimum")
REDUCE = ("sum", "mean", "max", "min")


@dataclass(frozen=True)
class Stmt:
    """``out = kind(*args, **params)``; for writes ``out`` is the target (args[0])."""

    kind: str
    out: int
    args: tuple[int, ...]
    params: tuple[Any, ...] = ()


@dataclass
class Dag:
    """A random program: statements over variables, and its inputs' data."""

    stmts: list[Stmt] = field(default_factory=list)
    shapes: list[Shape] = field(default_factory=list)
    inputs: list[np.ndarray] = field(default_factory=list)
    #: The variables a compiled run returns (eager runs read every variable).
    outputs: list[int] = field(default_factory=list)

    @property
    def faults(self) -> int:
        return sum(s.kind in ("fail", "slow") for s in self.stmts)

    def __str__(self) -> str:
        lines = [f"{self._render(s)}  # {self.shapes[s.out]}" for s in self.stmts]
        return "\n".join([*lines, f"outputs (compiled): {self.outputs}"])

    def _render(self, s: Stmt) -> str:
        a = [f"v{i}" for i in s.args]
        if s.kind == "leaf":
            return f"v{s.out} = input{s.params[0]}"
        if s.kind in ("setitem", "iadd"):
            what = f"[{s.params[0]!r}] =" if s.kind == "setitem" else " +="
            rhs = a[1] if len(a) > 1 else repr(s.params[1])
            return f"v{s.out}{what} {rhs}"
        return f"v{s.out} = {s.kind}({', '.join(a + [repr(p) for p in s.params])})"


class _Builder:
    def __init__(self, ch: Chooser) -> None:
        self.ch = ch
        self.dag = Dag()

    def var(self, shape: Shape) -> int:
        self.dag.shapes.append(shape)
        return len(self.dag.shapes) - 1

    def leaf(self, shape: Shape) -> int:
        seed = self.ch.integer(0, 2**31 - 1)
        data = np.random.default_rng(seed).standard_normal(shape)
        self.dag.inputs.append(data)
        out = self.var(shape)
        self.add(Stmt("leaf", out, (), (len(self.dag.inputs) - 1,)))
        return out

    def add(self, stmt: Stmt) -> None:
        self.dag.stmts.append(stmt)

    def random_shape(self) -> Shape:
        return tuple(self.ch.integer(1, 4) for _ in range(self.ch.integer(0, 3)))

    def pick(self, fits: Callable[[Shape], bool] = lambda s: True) -> int | None:
        found = [i for i, s in enumerate(self.dag.shapes) if fits(s)]
        return self.ch.choice(found) if found else None

    def operand(self, shape: Shape, *, grow: bool = True) -> int:
        """A variable whose shape broadcasts with ``shape`` (an existing one, or a
        new input): without ``grow``, the broadcast result must be ``shape``."""

        def fits(s: Shape) -> bool:
            try:
                result = np.broadcast_shapes(shape, s)
            except ValueError:
                return False
            return grow or result == shape

        if self.ch.chance(60):
            found = self.pick(fits)
            if found is not None:
                return found
        dims = [
            d if self.ch.chance(70) else 1
            for d in shape[len(shape) - self.ch.integer(0, len(shape)) :]
        ]
        if grow and len(dims) == len(shape) and self.ch.chance(15):
            dims = [self.ch.integer(1, 3), *dims]
        return self.leaf(tuple(dims))

    def exact(self, shape: Shape) -> int:
        """A variable of exactly ``shape``."""
        if self.ch.chance(50):
            found = self.pick(lambda s: s == shape)
            if found is not None:
                return found
        return self.leaf(shape)


def _reshape_target(ch: Chooser, shape: Shape) -> Shape:
    size = math.prod(shape)
    factors = []
    n, p = size, 2
    while n > 1:
        while n % p == 0:
            factors.append(p)
            n //= p
        p += 1
    buckets = [1] * ch.integer(1, 3)
    for f in factors:
        buckets[ch.integer(0, len(buckets) - 1)] *= f
    return tuple(buckets)


def _basic_key(ch: Chooser, shape: Shape) -> tuple[Any, ...]:
    """A non-empty basic index: an int or a slice per leading axis."""
    key: list[Any] = []
    for d in shape[: ch.integer(1, len(shape))]:
        if ch.chance(30):
            key.append(ch.integer(-d, d - 1))
        else:
            start = ch.integer(0, d - 1)
            step = ch.choice((1, 1, 2, -1))
            if step > 0:
                key.append(slice(start, ch.integer(start + 1, d), step))
            else:
                stop = None if start == 0 or ch.chance(50) else ch.integer(0, start - 1)
                key.append(slice(start, stop, -1))
    return tuple(key)


def generate(ch: Chooser, *, max_stmts: int = 10, fault_percent: int = 15) -> Dag:
    """A random program of at most ``max_stmts`` op statements (inputs aside)."""
    b = _Builder(ch)
    b.leaf(b.random_shape())
    kinds = (
        "unary", "binary", "scalar", "reduce", "matmul", "reshape", "permute",
        "concat", "where", "index", "take", "setitem", "iadd", "fault",
    )  # fmt: skip
    for _ in range(ch.integer(1, max_stmts)):
        kind = ch.choice(kinds)
        if kind == "fault" and not ch.chance(fault_percent * 4):
            kind = "unary"
        x = b.pick()
        assert x is not None
        shape = b.dag.shapes[x]
        nd = len(shape)
        if kind == "unary":
            b.add(Stmt("unary", b.var(shape), (x,), (ch.choice(UNARY),)))
        elif kind == "binary":
            y = b.operand(shape)
            out = np.broadcast_shapes(shape, b.dag.shapes[y])
            if ch.chance(50):
                x, y = y, x
            b.add(Stmt("binary", b.var(out), (x, y), (ch.choice(BINARY),)))
        elif kind == "scalar":
            value = ch.choice((0.5, -2.0, 3, 1.0))
            b.add(Stmt("scalar", b.var(shape), (x,), (ch.choice(BINARY), value, ch.chance(50))))
        elif kind == "reduce":
            axis = None if nd == 0 or ch.chance(30) else ch.integer(-nd, nd - 1)
            keep = ch.chance(40)
            out = np.sum(np.empty(shape), axis=axis, keepdims=keep).shape
            b.add(Stmt("reduce", b.var(out), (x,), (ch.choice(REDUCE), axis, keep)))
        elif kind == "matmul" and nd >= 1:
            n = ch.integer(1, 4)
            y = b.exact((shape[-1], n))
            b.add(Stmt("matmul", b.var((*shape[:-1], n)), (x, y)))
        elif kind == "reshape":
            target = _reshape_target(ch, shape)
            b.add(Stmt("reshape", b.var(target), (x,), (target,)))
        elif kind == "permute" and nd >= 2:
            perm = list(range(nd))
            for i in range(nd - 1, 0, -1):  # Fisher-Yates, from the chooser
                j = ch.integer(0, i)
                perm[i], perm[j] = perm[j], perm[i]
            out = tuple(shape[p] for p in perm)
            b.add(Stmt("permute", b.var(out), (x,), (tuple(perm),)))
        elif kind == "concat" and nd >= 1:
            axis = ch.integer(0, nd - 1)
            other = list(shape)
            other[axis] = ch.integer(1, 3)
            y = b.exact(tuple(other))
            out = list(shape)
            out[axis] += other[axis]
            b.add(Stmt("concat", b.var(tuple(out)), (x, y), (axis,)))
        elif kind == "where":
            c = b.operand(shape)
            y = b.operand(np.broadcast_shapes(shape, b.dag.shapes[c]))
            out = np.broadcast_shapes(shape, b.dag.shapes[c], b.dag.shapes[y])
            b.add(Stmt("where", b.var(out), (c, x, y)))
        elif kind == "index" and nd >= 1:
            key = _basic_key(ch, shape)
            b.add(Stmt("index", b.var(np.empty(shape)[key].shape), (x,), (key,)))
        elif kind == "take" and nd >= 1:
            axis = ch.integer(0, nd - 1)
            picks = tuple(
                ch.integer(-shape[axis], shape[axis] - 1) for _ in range(ch.integer(1, 4))
            )
            out = np.take(np.empty(shape), picks, axis=axis).shape
            b.add(Stmt("take", b.var(out), (x,), (axis, picks)))
        elif kind == "setitem" and nd >= 1:
            key = _basic_key(ch, shape)
            region = np.empty(shape)[key].shape
            if ch.chance(25):
                b.add(Stmt("setitem", x, (x,), (key, ch.choice((0.0, -1.5, 7.0)))))
            else:
                b.add(Stmt("setitem", x, (x, b.operand(region, grow=False)), (key,)))
        elif kind == "iadd":
            b.add(Stmt("iadd", x, (x, b.operand(shape, grow=False))))
        elif kind == "fault":
            cost = ch.choice((0.0, 1e12))  # inline at the call, or on a worker
            if ch.chance(50):
                b.add(Stmt("fail", b.var(shape), (x,), (len(b.dag.stmts), cost)))
            else:
                delay = ch.choice((0.0005, 0.002))
                b.add(Stmt("slow", b.var(shape), (x,), (delay, cost)))
        else:  # the kind needs more dimensions than x has
            b.add(Stmt("unary", b.var(shape), (x,), (ch.choice(UNARY),)))
    variables = range(len(b.dag.shapes))
    b.dag.outputs = (
        list(variables)
        if ch.chance(40)
        else sorted({ch.choice(list(variables)) for _ in range(ch.integer(1, 4))})
    )
    return b.dag


# -- evaluation: numpy (the reference) and eagerrt, over one table of ops --------------------
_NP_UNARY: dict[str, Callable[[Any], Any]] = {
    "negative": np.negative,
    "abs": np.abs,
    "tanh": np.tanh,
    "sin": np.sin,
    "sqrt_abs": lambda x: np.sqrt(np.abs(x)),
    "exp_tanh": lambda x: np.exp(np.tanh(x)),
}
_ERT_UNARY: dict[str, Callable[[Any], Any]] = {
    "negative": lambda x: -x,
    "abs": ert.abs,
    "tanh": ert.tanh,
    "sin": ert.sin,
    "sqrt_abs": lambda x: ert.sqrt(abs(x)),
    "exp_tanh": lambda x: ert.exp(ert.tanh(x)),
}
_OPERATORS: dict[str, Callable[[Any, Any], Any]] = {
    "add": lambda a, b: a + b,
    "subtract": lambda a, b: a - b,
    "multiply": lambda a, b: a * b,
    "maximum": ert.maximum,
    "minimum": ert.minimum,
}


def _np_step(s: Stmt, v: list[Any]) -> Any:
    a = [v[i] for i in s.args]
    k, p = s.kind, s.params
    if k == "unary":
        return _NP_UNARY[p[0]](a[0])
    if k == "binary":
        return getattr(np, p[0])(a[0], a[1])
    if k == "scalar":
        return getattr(np, p[0])(a[0], p[1]) if p[2] else getattr(np, p[0])(p[1], a[0])
    if k == "reduce":
        return np.asarray(getattr(np, p[0])(a[0], axis=p[1], keepdims=p[2]))
    if k == "matmul":
        return a[0] @ a[1]
    if k == "reshape":
        return a[0].reshape(p[0])
    if k == "permute":
        return np.transpose(a[0], p[0])
    if k == "concat":
        return np.concatenate([a[0], a[1]], axis=p[0])
    if k == "where":
        return np.where(a[0] > 0, a[1], a[2])
    if k == "index":
        return np.asarray(a[0][p[0]])
    if k == "take":
        return np.take(a[0], np.asarray(p[1]), axis=p[0])
    if k == "setitem":
        new = a[0].copy()
        new[p[0]] = a[1] if len(a) > 1 else p[1]
        return new
    if k == "iadd":
        return a[0] + a[1]
    if k in ("fail", "slow"):
        return a[0]
    raise AssertionError(f"unknown statement {k}")


def _ert_step(s: Stmt, v: list[Any]) -> Any:
    a = [v[i] for i in s.args]
    k, p = s.kind, s.params
    if k == "unary":
        return _ERT_UNARY[p[0]](a[0])
    if k == "binary":
        return _OPERATORS[p[0]](a[0], a[1])
    if k == "scalar":
        return _OPERATORS[p[0]](a[0], p[1]) if p[2] else _OPERATORS[p[0]](p[1], a[0])
    if k == "reduce":
        return getattr(ert, p[0])(a[0], axis=p[1], keepdims=p[2])
    if k == "matmul":
        return a[0] @ a[1]
    if k == "reshape":
        return ert.reshape(a[0], p[0])
    if k == "permute":
        return ert.permute_dims(a[0], p[0])
    if k == "concat":
        return ert.concat([a[0], a[1]], axis=p[0])
    if k == "where":
        return ert.where(a[0] > 0, a[1], a[2])
    if k == "index":
        return a[0][p[0]]
    if k == "take":
        return ert.take(a[0], ert.asarray(np.asarray(p[1])), axis=p[0])
    if k == "setitem":
        a[0][p[0]] = a[1] if len(a) > 1 else p[1]
        return a[0]
    if k == "iadd":
        t = a[0]
        t += a[1]
        return t
    if k == "fail":
        return fuzz_fail(a[0], node=p[0], cost=p[1])
    if k == "slow":
        return fuzz_slow(a[0], delay=p[0], cost=p[1])
    raise AssertionError(f"unknown statement {k}")


def reference(dag: Dag) -> tuple[list[np.ndarray], list[frozenset[int]]]:
    """numpy's value of every variable after the program, and the failing
    nodes each depends on (writes merge the written value's into the target's)."""
    values: list[Any] = [None] * len(dag.shapes)
    taints: list[frozenset[int]] = [frozenset()] * len(dag.shapes)
    # eagerrt's views: an index result remembers its base, the key and the base's
    # write count; a write through it first takes the base's region if the base
    # was written since, then writes the base at the key (its taint too).
    view_of: dict[int, tuple[int, Any, int]] = {}
    writes = [0] * len(dag.shapes)

    def write(var: int, new: Callable[[np.ndarray], np.ndarray], taint: frozenset[int]) -> None:
        view = view_of.get(var)
        if view is not None:
            base, key, seen = view
            if writes[base] != seen:  # the view takes the base's current region
                values[var] = np.asarray(values[base][key]).copy()
                taints[var] = taints[var] | taints[base]
        values[var] = new(values[var])
        taints[var] = taints[var] | taint
        if view is not None:
            base, key, _ = view

            def assign(old: np.ndarray, key: Any = key, part: Any = values[var]) -> Any:
                out = old.copy()
                out[key] = part
                return out

            write(base, assign, taints[var])
            view_of[var] = (base, key, writes[base])
        writes[var] += 1

    with np.errstate(all="ignore"):
        for s in dag.stmts:
            if s.kind == "leaf":
                values[s.out] = dag.inputs[s.params[0]]
                continue
            taint = frozenset().union(*(taints[i] for i in s.args))
            if s.kind in ("setitem", "iadd"):  # s.out is s.args[0], written
                write(
                    s.out,
                    lambda old, s=s: _np_step(s, [*values[: s.out], old, *values[s.out + 1 :]]),
                    taint,
                )
                continue
            values[s.out] = _np_step(s, values)
            if s.kind == "fail":
                taint |= {s.params[0]}
            taints[s.out] = taint
            if s.kind == "index" and not _one_element(s.params[0], dag.shapes[s.args[0]]):
                view_of[s.out] = (s.args[0], s.params[0], writes[s.args[0]])
    return values, taints


def _one_element(key: Any, shape: Shape) -> bool:
    """An int for every axis: numpy's scalar, a copy (eagerrt's too), not a view."""
    parts = key if isinstance(key, tuple) else (key,)
    return len(parts) == len(shape) and all(
        isinstance(p, (int, np.integer)) and not isinstance(p, bool) for p in parts
    )


def build(dag: Dag, inputs: Sequence[ert.Tensor]) -> list[ert.Tensor]:
    """Run the program on eagerrt; every variable's tensor (after the writes)."""
    env: list[Any] = [None] * len(dag.shapes)
    for s in dag.stmts:
        env[s.out] = inputs[s.params[0]] if s.kind == "leaf" else _ert_step(s, env)
    return env


# -- running a case ---------------------------------------------------------------------------
@dataclass
class Outcome:
    """What one case did: its faults, the errors delivered, what went wrong."""

    faults: int = 0
    errors: int = 0
    latency: float = 0.0
    mismatches: list[str] = field(default_factory=list)


def _mode_block(mode: str, seed: int) -> contextlib.AbstractContextManager[Any]:
    if mode == "sync":
        return ert.sync_mode()
    if mode == "deterministic":
        return ert.deterministic(seed=seed)
    return contextlib.nullcontext()


def _launch(dag: Dag, mode: str) -> tuple[list[int], list[ert.Tensor]]:
    """Start the program: the variables to read, and their tensors."""
    inputs = [ert.asarray(x) for x in dag.inputs]
    if mode == "compiled":
        outputs = dag.outputs

        def program(*xs: ert.Tensor) -> tuple[ert.Tensor, ...]:
            env = build(dag, xs)
            return tuple(env[i] for i in outputs)

        f = ert.function(program)
        return outputs, list(f(*inputs))
    return list(range(len(dag.shapes))), build(dag, inputs)


def _check(
    dag: Dag, mode: str, names: list[int], tensors: list[ert.Tensor], results: list[Any]
) -> Outcome:
    values, taints = reference(dag)
    outcome = Outcome(faults=dag.faults)
    for i, t, got in zip(names, tensors, results, strict=True):
        want = values[i]
        if t.shape != want.shape or t.dtype != want.dtype:
            outcome.mismatches.append(
                f"v{i}: metadata {t.dtype}{t.shape}, numpy {want.dtype}{want.shape}"
            )
            continue
        expected = taints[i]
        if isinstance(got, ert.KernelError):
            outcome.errors += 1
            cause = got.__cause__
            if not expected:
                outcome.mismatches.append(f"v{i}: unexpected {got!r}")
            elif not isinstance(cause, InjectedFault) or cause.node not in expected:
                outcome.mismatches.append(f"v{i}: error {got!r} not from nodes {sorted(expected)}")
            elif "'fuzz_fail'" not in str(got):
                outcome.mismatches.append(f"v{i}: error doesn't name its op: {got}")
        elif isinstance(got, BaseException):
            outcome.mismatches.append(f"v{i}: {got!r}")
        elif expected:
            outcome.mismatches.append(
                f"v{i}: a value, but it depends on failing nodes {sorted(expected)}"
            )
        elif (
            not np.allclose(got, want, rtol=1e-9, atol=1e-12, equal_nan=True)
            or got.shape != want.shape
        ):
            outcome.mismatches.append(f"v{i}: {got!r} != numpy's {want!r}")
    return outcome


def _read_sync(t: ert.Tensor, timeout: float) -> Any:
    try:
        return t.numpy(timeout=timeout)
    except ert.KernelError as exc:
        return exc
    except ert.WaitTimeoutError as exc:
        return exc


async def _read_all_async(tensors: list[ert.Tensor], results: list[Any]) -> None:
    async def read(k: int, t: ert.Tensor) -> None:
        try:
            results[k] = await t
        except ert.KernelError as exc:
            results[k] = exc

    async with anyio.create_task_group() as tg:
        for k, t in enumerate(tensors):
            tg.start_soon(read, k, t)


def run_case(dag: Dag, mode: str, loop: str, seed: int = 0, timeout: float = 30.0) -> Outcome:
    """Run ``dag`` in ``mode`` on ``loop`` and compare it with numpy."""
    start = time.perf_counter()
    if loop == "none":
        deadline = start + timeout
        with _mode_block(mode, seed):
            names, tensors = _launch(dag, mode)
            results = [_read_sync(t, max(0.0, deadline - time.perf_counter())) for t in tensors]
    else:

        async def main() -> tuple[list[int], list[ert.Tensor], list[Any]]:
            with anyio.fail_after(timeout), _mode_block(mode, seed):
                names, tensors = _launch(dag, mode)
                results: list[Any] = [None] * len(tensors)
                await _read_all_async(tensors, results)
            return names, tensors, results

        backend = "trio" if loop == "trio" else "asyncio"
        options = {"use_uvloop": True} if loop == "uvloop" else {}
        try:
            names, tensors, results = anyio.run(main, backend=backend, backend_options=options)
        except TimeoutError:
            return Outcome(dag.faults, mismatches=[f"no result within {timeout} s (deadlock?)"])
    latency = time.perf_counter() - start
    outcome = _check(dag, mode, names, tensors, results)
    outcome.latency = latency
    return outcome


def warm_up(modes: Sequence[str] = MODES, loops: Sequence[str] = LOOPS) -> None:
    """Run one small program per mode and loop, so that the first leak-checked
    case doesn't count modules imported on first use as its own memory."""
    for mode in modes:
        for loop in loops:
            run_case(generate(RandomChooser(len(mode) + len(loop)), max_stmts=4), mode, loop)
    # The first fused kernel loads numba's compiler: a cache, not a case's memory.
    fused = ert.function(lambda x: ert.tanh(x + 1) * 2)(ert.asarray(np.ones(3)))
    fused.numpy()


@contextlib.contextmanager
def _leak_checked(enabled: bool, outcome_sink: list[str]) -> Iterator[None]:
    if not enabled:
        yield
        return
    try:
        with no_leaks():
            yield
    except AssertionError as exc:
        outcome_sink.append(f"leak: {exc}")


def run_fuzz(
    cases: int,
    seed: int,
    *,
    max_stmts: int = 12,
    fault_percent: int = 15,
    check_leaks: bool = True,
    modes: Sequence[str] = MODES,
    loops: Sequence[str] = LOOPS,
) -> dict[str, Any]:
    """Run ``cases`` random programs (seeded), each in a random mode and loop.

    Returns the figures: ``cases``, ``faults_injected``, ``errors_delivered``
    (KernelErrors read where a fault's dependents should raise), ``failures``
    (cases whose results, errors, timing or leak checks were wrong),
    ``worst_latency_s`` (the slowest case from launch to its last read), and the
    first ``mismatches`` (with the program that produced them).
    """
    ch = RandomChooser(seed)
    if check_leaks:
        warm_up(modes, loops)
    summary: dict[str, Any] = {
        "cases": 0,
        "faults_injected": 0,
        "errors_delivered": 0,
        "failures": 0,
        "worst_latency_s": 0.0,
        "by_mode": {f"{m}/{lp}": 0 for m in modes for lp in loops},
        "mismatches": [],
    }
    for _ in range(cases):
        dag = generate(ch, max_stmts=max_stmts, fault_percent=fault_percent)
        mode, loop = ch.choice(list(modes)), ch.choice(list(loops))
        det_seed = ch.integer(0, 2**16)
        problems: list[str] = []
        with _leak_checked(check_leaks, problems):
            outcome = run_case(dag, mode, loop, det_seed)
        problems = outcome.mismatches + problems
        summary["cases"] += 1
        summary["by_mode"][f"{mode}/{loop}"] += 1
        summary["faults_injected"] += outcome.faults
        summary["errors_delivered"] += outcome.errors
        summary["worst_latency_s"] = max(summary["worst_latency_s"], outcome.latency)
        if problems:
            summary["failures"] += 1
            if len(summary["mismatches"]) < 5:
                summary["mismatches"].append(
                    f"mode={mode} loop={loop} seed={det_seed}: {problems}\n{dag}"
                )
    return summary
