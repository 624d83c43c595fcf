"""Control flow on tensor values: :func:`cond` and :func:`while_loop`.

Python's ``if`` and ``while`` need a tensor's value at the call, which an eager
tensor may not have yet and a traced one never has. These take the branches
as functions instead, as JAX's ``lax.cond`` and ``lax.while_loop`` do. Each
function is traced once, on symbolic stand-ins for its operands, into a
sub-graph that is optimized and lowered to a :class:`~eagerrt.graph.plan.Plan`;
then one op, whose kernel runs the chosen sub-plan, is called on the operands.
So the results come back at once, with known shapes and dtypes, and are
computed once the predicate and operands are ready, without blocking the
caller.

* Eagerly, the op runs like an eager op with several results: inline when its
  operands are ready and it is cheap, otherwise as a task parked on them (on
  the workers if costly). Only the branch taken is lowered.
* Inside ``ert.function``, it is a ``cond`` / ``while_loop`` node of the traced
  graph (its sub-plans made when the function compiles); the node's kernel
  runs them on the arrays of the enclosing plan.

Tensors a function closes over (a weight, or a value the enclosing
``ert.function`` traced) become extra operands of the op, so it waits for them
like for its operands (including those only the branch not taken reads).
Ops in a function that read none of its operands or traced values run once,
while it is traced, whichever branch is taken (as ``ert.function`` computes
its constants); so does a write of concrete data into a closed-over tensor.
Writing a traced value into a tensor from around the function is an error:
return the new value instead.

>>> import numpy as np, eagerrt as ert
>>> x = ert.asarray(np.array([1.0, -2.0, 3.0]))
>>> ert.cond(x.sum() > 0, lambda v: v * 2, lambda v: -v, x).tolist()
[2.0, -4.0, 6.0]
>>> n, y = ert.while_loop(lambda c: c[0] < 5, lambda c: (c[0] + 1, c[1] * 2), (0, x))
>>> int(n), y.tolist()
(5, [32.0, -64.0, 96.0])
"""

from __future__ import annotations

import inspect
import itertools
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from .._core import (
    ERROR,
    PENDING,
    READY,
    ArgumentError,
    DTypeError,
    Failure,
    ShapeError,
    SourceLine,
    Task,
    TracingError,
    UsageError,
    config,
    count_inline,
    profiling,
    schedule,
    schedule_read,
    user_line,
)
from ..devices import cpu
from ..ops.creation import asarray
from ..tensor import TRACED, Tensor
from . import pytree, recorded_control_flow, tracing
from .backend import backend_for, graph_device
from .cost_model import node_cost
from .ir import Graph, Value
from .passes import optimize
from .plan import Plan, StepFailed, lower
from .tracing import Trace, traced_tensor

__all__ = ["cond", "while_loop"]

#: A while loop's trip count is unknown until it runs; its cost estimate (which
#: decides inline vs. the workers) assumes this many trips.
ASSUMED_TRIPS = 16

_SCALARS = (bool, int, float, complex, np.generic)
_serials = itertools.count()


# -- tracing a function into a sub-plan -------------------------------------------------
def _capture_key(t: Tensor) -> tuple[str, int]:
    # A traced tensor is its graph value; a concrete one is itself.
    return ("v", t._value.id) if t._state == TRACED else ("t", id(t))


def _knows(trace: Trace | None, value: Value) -> bool:
    """Whether ``value`` belongs to ``trace`` or one of the traces enclosing it."""
    while trace is not None:
        if value.id in trace.values:
            return True
        trace = getattr(trace, "parent", None)
    return False


class _SubTrace(Trace):
    """The trace of a branch, loop condition or loop body.

    Any tensor it reads that is not its own (a concrete tensor, or a value of an
    enclosing trace) becomes an extra graph input, and the tensor is kept in
    ``captured``: the op passes it in as an operand. That keeps sub-graphs free
    of pending constants (an eager call must not wait for them) and lets an
    enclosing trace record the read as its own (capturing it in turn if it is a
    sub-trace too).
    """

    def __init__(self, graph: Graph, parent: Trace | None) -> None:
        super().__init__(graph)
        self.parent = parent
        self.captured: list[Tensor] = []
        #: For each captured traced tensor, the value it stood for (a write in
        #: the function would re-point it; see _check_no_writes_out).
        self.captured_values: list[Value | None] = []
        self._inputs_by_key: dict[tuple[str, int], Value] = {}

    def operand(self, arg: Any) -> Any:
        if type(arg) is not Tensor:
            return arg
        if arg._state == TRACED:
            value: Value = arg._value
            if value.id in self.values:
                return value
            if not _knows(self.parent, value):
                return super().operand(arg)  # raises: it belongs to another trace
        key = _capture_key(arg)
        known = self._inputs_by_key.get(key)
        if known is None:
            known = Value(arg.shape, arg.dtype, arg.device, name=f"%cap{len(self.captured)}")
            self.graph.inputs.append(known)
            self.values.add(known.id)
            self.captured.append(arg)
            self.captured_values.append(arg._value if arg._state == TRACED else None)
            self._inputs_by_key[key] = known
        return known


class _Sub:
    """A traced function (a branch, a loop's condition or body) and its plan,
    which takes the operands, then the captured tensors.

    The plan is made on first use: an eager ``cond`` lowers only the branch it
    takes; a graph node's are made when the enclosing function compiles.
    """

    def __init__(
        self, name: str, graph: Graph, tree: Any, types: list[Value], captured: list[Tensor]
    ) -> None:
        self.name = name
        self.graph = graph
        self.tree = tree  # the result's structure (pytree)
        self.types = types  # the result leaves (shape, dtype, device as traced)
        self.captured = captured
        #: Where its captured tensors are among the op's operands (set by _operands).
        self.captures: list[int] = []
        self._estimate = sum(node_cost(node) for node in graph.nodes)
        self._plan: Plan | None = None
        self._lock = threading.Lock()

    @property
    def plan(self) -> Plan:
        plan = self._plan
        if plan is None:
            with self._lock:  # two first runs at once must not both rewrite the graph
                if self._plan is None:
                    # The branch runs as a plan inside its op's kernel, on native
                    # arrays: the neutral passes and its device backend's own.
                    device = graph_device(self.graph) or cpu
                    optimize(self.graph, backend_for(device).passes)
                    self._plan = lower(self.graph)
                plan = self._plan
        return plan

    @property
    def cost(self) -> float:
        return self._plan.cost if self._plan is not None else self._estimate


class _TypeStr:
    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _describe(tree: Any, types: list[Any]) -> str:
    """A structure with its leaves as ``dtype[shape]``: ``(float32[3], {'n': int64[]})``."""
    leaves = [_TypeStr(f"{t.dtype}[{', '.join(map(str, t.shape))}]") for t in types]
    return repr(pytree.unflatten(tree, leaves))


def _as_tensor(leaf: Any, what: str, site: SourceLine | None) -> Tensor:
    if type(leaf) is Tensor:
        return leaf
    if isinstance(leaf, (np.ndarray, *_SCALARS)):
        return asarray(leaf)
    raise DTypeError(
        f"{what} must be tensors (or numpy arrays, or numbers), got {type(leaf).__name__} "
        f"{leaf!r}\n  at {site}"
    )


def _trace(
    fn: Callable[..., Any],
    role: str,
    tree: Any,
    leaves: list[Any],
    site: SourceLine | None,
) -> _Sub:
    """Trace ``fn(*unflatten(tree, leaves))`` with symbolic stand-ins for the
    tensor leaves (other leaves are passed as they are) and compile it."""
    if not callable(fn):
        raise ArgumentError(f"{role} must be a function, got {fn!r}\n  at {site}")
    inputs, _, symbolic = tracing._symbolic(leaves)
    name = getattr(fn, "__name__", role)
    trace = _SubTrace(Graph(name, inputs), tracing._current.get())
    token = tracing._current.set(trace)
    try:
        result = fn(*pytree.unflatten(tree, symbolic))
    finally:
        tracing._current.reset(token)
    if inspect.iscoroutine(result):
        result.close()
        raise ArgumentError(
            f"{role} must be a plain function, not an async one (it runs inside a "
            f"kernel, where nothing can be awaited)\n  at {site}"
        )
    out_leaves, out_tree = pytree.flatten(result)
    graph = trace.graph
    for leaf in out_leaves:
        graph.outputs.append(trace.operand(_as_tensor(leaf, f"{role}'s results", site)))
    types = [Value(v.shape, v.dtype, v.device) for v in graph.outputs]
    _check_no_writes_out(trace, role, site)
    graph.note("trace", f"{len(graph.nodes)} ops traced")
    return _Sub(name, graph, out_tree, types, trace.captured)


def _check_no_writes_out(trace: _SubTrace, role: str, site: SourceLine | None) -> None:
    """A write in the function to a traced tensor from around it would make that
    tensor stand for a value of the function's own graph: refuse it."""
    for t, value in zip(trace.captured, trace.captured_values, strict=True):
        if value is not None and t._value is not value:
            t._value = value  # the enclosing trace's tensor stays what it was
            raise TracingError(
                f"{role} writes into {value.name} ({value.type_str()}), a tensor traced "
                f"outside it: ert.cond's branches and ert.while_loop's functions can't "
                f"change tensors around them\n  at {site}\nReturn the new value instead."
            )


def _operands(base: list[Tensor], *subs: _Sub) -> list[Tensor]:
    """The op's operands: ``base``, then each distinct captured tensor once
    (each sub learns where its captures are)."""
    operands = list(base)
    where: dict[tuple[str, int], int] = {}
    for sub in subs:
        sub.captures = []
        for t in sub.captured:
            key = _capture_key(t)
            i = where.get(key)
            if i is None:
                i = where[key] = len(operands)
                operands.append(t)
            sub.captures.append(i)
    return operands


def _check_same(
    what: str,
    a_name: str,
    a_verb: str,
    a: tuple[Any, list[Any]],
    b_name: str,
    b: _Sub,
    site: SourceLine | None,
) -> None:
    """Raise at the call unless ``b`` returns ``a``'s structure, shapes and dtypes."""
    a_tree, a_types = a
    same_tree = a_tree == b.tree and len(a_types) == len(b.types)
    if same_tree:
        pairs = list(zip(a_types, b.types, strict=True))
        shapes = all(x.shape == y.shape for x, y in pairs)
        dtypes = all(x.dtype == y.dtype for x, y in pairs)
        if shapes and dtypes:
            return
    kind: type[UsageError] = ArgumentError
    if same_tree:
        kind = ShapeError if not shapes else DTypeError
    raise kind(
        f"{what}: {a_name} and {b_name} must give the same structure of tensors with "
        f"the same shapes and dtypes, but {a_name} {a_verb} {_describe(a_tree, a_types)} "
        f"and {b_name} returned {_describe(b.tree, b.types)}\n  at {site}"
    )


# -- the ops ----------------------------------------------------------------------------
class ControlFlowOp:
    """A graph op whose kernel runs sub-plans: ``cond`` or ``while_loop``.

    Not in the op registry: its static argument (the compiled functions) is
    made by :func:`cond` / :func:`while_loop`, never written by a user.
    """

    #: Never folded at compile time, even on constant operands: that would run
    #: a user's loop while compiling, and a failing branch would leave a failure
    #: nobody reads.
    stateful = True
    #: None: its kernel allocates its results (the branches' plans own their buffers).
    out_forms: Mapping[str, Any] = MappingProxyType({})

    def __init__(self, name: str, kernel: Callable[..., Any], cost: Callable[..., float]) -> None:
        self.name = name
        self.kernel = kernel
        self.cost = cost

    def _kernel_for(self, device: Any) -> Callable[..., Any]:
        return self.kernel  # device-agnostic: the sub-plans hold the device kernels

    def __repr__(self) -> str:
        return f"<eagerrt control-flow op {self.name!r}>"


def _truth(pred: Any) -> bool:
    # A numpy array or scalar (a ufunc on 0-d arrays gives a scalar); other
    # devices' arrays (CuPy) have item() too.
    return bool(pred.item())


def _execute(plan: Plan, arrays: list[Any]) -> list[Any]:
    """Run a sub-plan; a failing step fails this op with a KernelError naming it.

    Reading the sub-plan's failure marks it observed (only this op's failure,
    which chains it, is reported), and its message names the failing op and
    the line in the branch, this op's failure the line calling ``cond``.
    """
    try:
        if recorded_control_flow.running:  # inside an eager call being recorded?
            observed = recorded_control_flow.observing()
            if observed is not None:
                return observed.execute(plan, arrays)
        return plan.execute(arrays)
    except StepFailed as failed:
        error = failed.failure.to_exception()
        error.__suppress_context__ = True
        raise error from error.__cause__


def _results(values: list[Any]) -> Any:
    # A node with one output takes its value as is; several, as a tuple.
    return values[0] if len(values) == 1 else tuple(values)


@dataclass(eq=False, repr=False)
class _Pair:
    """A control-flow op's static argument: cond's true and false branches, or a
    loop's cond and body, and how many operands come before the captured tensors."""

    first: _Sub
    second: _Sub
    n_operands: int
    serial: int = field(default_factory=lambda: next(_serials))

    def __repr__(self) -> str:
        # Unique per call: CSE compares static arguments by repr.
        return f"<{self.first.name} | {self.second.name} #{self.serial}>"


def _cond_kernel(pred: Any, *arrays: Any, branches: _Pair) -> Any:
    sub = branches.first if _truth(pred) else branches.second
    n = branches.n_operands
    return _results(_execute(sub.plan, [*arrays[:n], *[arrays[i] for i in sub.captures]]))


def _cond_cost(shape: Any, dtype: Any, *args: Any, branches: _Pair) -> float:
    return config.op_overhead_ns + max(branches.first.cost, branches.second.cost)


def _while_kernel(*arrays: Any, loop: _Pair) -> Any:
    test, body = loop.first, loop.second
    carry = list(arrays[: loop.n_operands])
    cond_extra = [arrays[i] for i in test.captures]
    body_extra = [arrays[i] for i in body.captures]
    cond_plan, body_plan = test.plan, body.plan
    while _truth(_execute(cond_plan, [*carry, *cond_extra])[0]):
        carry = _execute(body_plan, [*carry, *body_extra])
    return _results(carry)


def _while_cost(shape: Any, dtype: Any, *args: Any, loop: _Pair) -> float:
    trip = loop.first.cost + loop.second.cost + config.op_overhead_ns
    return config.op_overhead_ns + ASSUMED_TRIPS * trip


COND = ControlFlowOp("cond", _cond_kernel, _cond_cost)
WHILE_LOOP = ControlFlowOp("while_loop", _while_kernel, _while_cost)


def _emit(
    op: ControlFlowOp,
    args: list[Tensor],
    static: dict[str, Any],
    types: list[Value],
    subs: tuple[_Sub, ...],
    site: SourceLine | None,
) -> list[Tensor]:
    """The op's result tensors: a node of the current trace if an operand is
    traced, else the op run now, or once its operands are ready."""
    if any(a._state == TRACED for a in args):
        trace = tracing._current.get()
        if trace is None:
            raise TracingError(
                f"{op.name}: a traced tensor was used after its trace ended (it was "
                f"stored outside the compiled function)\n  at {site}"
            )
        outs = [Value(t.shape, t.dtype, t.device, site=site) for t in types]
        trace.add(op, tuple(args), static, outs)
        for sub in subs:
            sub.plan  # noqa: B018 - compile with the enclosing function, not at its first run
        return [traced_tensor(v) for v in outs]
    return _run_eagerly(op, args, static, types, site)


def _call(
    op: ControlFlowOp,
    args: list[Tensor],
    static: dict[str, Any],
    n: int,
    observed: recorded_control_flow.Observed | None = None,
    inline: bool = True,
) -> list[Any]:
    def call() -> Any:
        return op.kernel(*[a._value for a in args], **static)

    out = call() if observed is None else observed.run(call, inline, _describe_runs(static))
    return [out] if n == 1 else list(out)


def _describe_runs(static: dict[str, Any]) -> Any:
    """For the profiler: which branch a cond took, how often a loop's body ran."""
    branches, loop = static.get("branches"), static.get("loop")

    def describe(runs: list[Plan]) -> dict[str, Any]:
        if branches is not None:
            taken = [sub for sub in (branches.first, branches.second) if sub._plan in runs]
            if not taken:
                return {}
            which = "true" if taken[0] is branches.first else "false"
            return {"branch": which, "function": taken[0].name}
        assert loop is not None
        body = loop.second._plan
        return {"iterations": sum(plan is body for plan in runs)}

    return describe


def _run_eagerly(
    op: ControlFlowOp,
    args: list[Tensor],
    static: dict[str, Any],
    types: list[Value],
    site: SourceLine | None,
) -> list[Tensor]:
    """Like an eager op with several results: inline when the operands are
    ready and it is cheap, else a task parked on them (on the workers if costly)."""
    name = op.name
    failed = next((a for a in args if a._state == ERROR), None)
    if failed is not None:  # an operand's failure is every result's
        return [Tensor._failed(failed._value, t.shape, t.dtype, t.device, name) for t in types]
    pending = [a for a in args if a._state == PENDING]
    if pending and config.sync_active:
        for a in pending:
            a.wait()
        return _run_eagerly(op, args, static, types, site)
    cost = op.cost((), None, *args, **static)
    observed = None
    recording = profiling.active  # read once: another thread may stop it
    if recording is not None:
        device = types[0].device.name
        observed = recorded_control_flow.Observed(recording, name, device, args, site)
    if not pending and cost <= config.inline_limit_ns:
        count_inline()
        try:
            values = _call(op, args, static, len(types), observed)
        except Exception as exc:  # the failure belongs to the results, not the call
            failure = Failure(name, site, exc)
            results = [Tensor._failed(failure, t.shape, t.dtype, t.device, name) for t in types]
        else:
            results = [
                Tensor._ready(v, t.shape, t.dtype, t.device, name)
                for v, t in zip(values, types, strict=True)
            ]
        if observed is not None:
            observed.made(results, later=False)
        return results
    results = [Tensor._pending(t.shape, t.dtype, t.device, name) for t in types]
    if observed is not None:
        observed.made(results, later=True)
    task = _ControlTask(results[0], cost, types[0].device.executor)
    task.op, task.args, task.static, task.results, task.site = op, args, static, results, site
    task.observed = observed
    if pending:  # noted as a reader and parked in one step (a write may come between)
        schedule_read(task, args)
        return results
    for a in args:  # a later write to an operand must wait for this read
        a._track_reader(task)
    schedule(task, pending)
    return results


class _ControlTask(Task):
    """The op's run once its operands are ready: completes every result."""

    __slots__ = ("args", "observed", "op", "results", "site", "static")

    op: ControlFlowOp
    args: list[Tensor]
    static: dict[str, Any]
    results: list[Tensor]
    site: SourceLine | None
    observed: recorded_control_flow.Observed | None

    def run(self) -> None:
        failed = next((a for a in self.args if a._state == ERROR), None)
        if failed is not None:
            if self.observed is not None:
                self.observed.recording.done(self.observed.event_id)
            self._complete_all(ERROR, failed._value)
            return
        try:
            n = len(self.results)
            inline = self.cost_ns <= config.inline_limit_ns  # where the scheduler ran it
            values = _call(self.op, self.args, self.static, n, self.observed, inline)
        except BaseException as exc:
            # Even Ctrl-C or SystemExit must not leave the results pending forever.
            self._complete_all(ERROR, Failure(self.op.name, self.site, exc))
            if not isinstance(exc, Exception):
                raise
            return
        self._done_reading()
        for r, v in zip(self.results, values, strict=True):
            r._complete(READY, v)

    def _complete_all(self, state: int, value: Any) -> None:
        self._done_reading()
        for r in self.results:
            r._complete(state, value)

    def _done_reading(self) -> None:
        for a in self.args:
            a._untrack_reader(self)


def _split(operands: Any) -> tuple[Any, list[Any], list[Tensor]]:
    """Flattened operands with numpy arrays made tensors, and the tensor leaves."""
    leaves, tree = pytree.flatten(operands)
    leaves = [asarray(x) if isinstance(x, np.ndarray) else x for x in leaves]
    return tree, leaves, [x for x in leaves if type(x) is Tensor]


def _predicate(pred: Any, what: str, site: SourceLine | None) -> Tensor:
    t = pred if type(pred) is Tensor else asarray(pred)
    if t.dtype != np.dtype(bool):
        raise DTypeError(
            f"{what}: the predicate must be a bool tensor with one element, got "
            f"{t.dtype}[{', '.join(map(str, t.shape))}] (compare it: `x != 0`)\n  at {site}"
        )
    if t.size != 1:
        raise ShapeError(
            f"{what}: the predicate must have one element, got shape {t.shape} "
            f"(reduce it: `.any()`, `.all()`)\n  at {site}"
        )
    return t


# -- the public functions ---------------------------------------------------------------
def cond(
    pred: Any,
    true_fn: Callable[..., Any],
    false_fn: Callable[..., Any],
    *operands: Any,
) -> Any:
    """``true_fn(*operands)`` if ``pred`` else ``false_fn(*operands)``, on tensors.

    ``pred`` is a bool tensor with one element (or a Python bool); the branches
    are plain functions of the operands (tensors, numpy arrays, or nestings of
    them in tuples, lists and dicts; other values are passed as they are) and
    must return the same structure of tensors with the same shapes and dtypes.
    Both are traced now, so a mismatch raises here; the result is that
    structure of tensors, returned at once and computed once ``pred`` and the
    operands are ready, by the chosen branch only. It works eagerly and inside
    ``ert.function`` (where it is one node of the graph).

    >>> import numpy as np, eagerrt as ert
    >>> x = ert.asarray(np.array([3.0, 4.0]))
    >>> def scale(v):
    ...     return v / ert.linalg.vector_norm(v)
    >>> y = ert.cond(ert.linalg.vector_norm(x) > 1, scale, lambda v: v, x)
    >>> y.shape, y.tolist()
    ((2,), [0.6, 0.8])
    >>> @ert.function
    ... def relu_or_zero(v, on):
    ...     return ert.cond(on, ert.relu, ert.zeros_like, v)
    >>> relu_or_zero(np.array([-1.0, 2.0]), np.array(True)).tolist()
    [0.0, 2.0]
    """
    site = user_line()
    p = _predicate(pred, "ert.cond", site)
    tree, leaves, tensors = _split(operands)
    true = _trace(true_fn, "true_fn", tree, leaves, site)
    false = _trace(false_fn, "false_fn", tree, leaves, site)
    _check_same("ert.cond", "true_fn", "returned", (true.tree, true.types), "false_fn", false, site)
    if not true.types:  # nothing to compute: the branches are pure
        return pytree.unflatten(true.tree, [])
    args = _operands(tensors, true, false)
    branches = _Pair(true, false, len(tensors))
    results = _emit(COND, [p, *args], {"branches": branches}, true.types, (true, false), site)
    return pytree.unflatten(true.tree, results)


def while_loop(cond_fn: Callable[[Any], Any], body_fn: Callable[[Any], Any], init_val: Any) -> Any:
    """``val = init_val; while cond_fn(val): val = body_fn(val)``, on tensors.

    ``init_val`` is the loop-carried value: a tensor, or tuples, lists and dicts
    of them (numpy arrays and numbers become tensors). ``body_fn`` must return
    the same structure with the same shapes and dtypes, and ``cond_fn`` a bool
    tensor with one element; both are traced now, so a mismatch raises here.
    The final value comes back at once, as that structure of tensors, computed
    once ``init_val`` is ready. It works eagerly and inside ``ert.function``.

    >>> import numpy as np, eagerrt as ert
    >>> def collatz_steps(n):
    ...     def step(c):
    ...         n, k = c
    ...         return ert.where(n % 2 == 0, n // 2, 3 * n + 1), k + 1
    ...     return ert.while_loop(lambda c: c[0] != 1, step, (n, 0))[1]
    >>> int(collatz_steps(ert.asarray(27)))
    111
    >>> int(ert.function(collatz_steps)(np.array(97)))
    118
    """
    site = user_line()
    leaves, tree = pytree.flatten(init_val)
    carry = [_as_tensor(x, "ert.while_loop: init_val's leaves", site) for x in leaves]
    if not carry:
        return pytree.unflatten(tree, [])
    # The functions take the carried value as one argument.
    _, arg_tree = pytree.flatten((pytree.unflatten(tree, carry),))
    test = _trace(cond_fn, "cond_fn", arg_tree, list(carry), site)
    if len(test.types) != 1 or test.types[0].dtype != np.dtype(bool) or test.types[0].size != 1:
        raise DTypeError(
            "ert.while_loop: cond_fn must return one bool tensor with one element, "
            f"got {_describe(test.tree, test.types)}\n  at {site}"
        )
    body = _trace(body_fn, "body_fn", arg_tree, list(carry), site)
    _check_same("ert.while_loop", "init_val", "is", (tree, carry), "body_fn", body, site)
    args = _operands(carry, test, body)
    loop = _Pair(test, body, len(carry))
    results = _emit(WHILE_LOOP, args, {"loop": loop}, body.types, (test, body), site)
    return pytree.unflatten(tree, results)
