"""Tracing: run a function once on symbolic tensors and record its ops.

A traced tensor is an ordinary :class:`~eagerrt.Tensor` in a fourth state,
``TRACED``, whose ``_value`` is the graph :class:`~eagerrt.graph.ir.Value` it
stands for. Every op whose operands include one takes its usual path up to the
shape rule (so bad shapes still fail at the user's line, now at trace time),
then the registry hands the call to :func:`_record` instead of running a
kernel. Ops on concrete tensors only (closed-over weights, ``ert.ones``) run
eagerly while tracing; their results enter the graph as constants.

Asking a traced tensor for data (``if t:``, ``float(t)``, ``await t``) raises a
:class:`~eagerrt.TracingError` naming the line and the fix.
"""

from __future__ import annotations

import contextvars
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from .._core import TracingError, user_line
from ..ops import registry
from ..ops.creation import asarray
from ..tensor import TRACED, Tensor
from . import pytree
from .ir import Graph, Node, Value

__all__ = ["Trace", "is_tracing", "trace_async", "trace_sync", "traced_tensor"]

_current: contextvars.ContextVar[Trace | None] = contextvars.ContextVar(
    "eagerrt_trace", default=None
)


def traced_tensor(value: Value) -> Tensor:
    """A symbolic tensor standing for ``value``."""
    t = Tensor._pending(value.shape, value.dtype, value.device, "trace")
    t._state = TRACED
    t._value = value
    return t


def is_tracing() -> bool:
    """True inside a function that ``ert.function`` is tracing."""
    return _current.get() is not None


class Trace:
    """The graph being recorded and the constants met so far."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.values: set[int] = {v.id for v in graph.inputs}
        # id(concrete tensor) -> (its constant value, the tensor: kept alive so
        # the id is not reused while tracing).
        self._consts: dict[int, tuple[Value, Any]] = {}

    def operand(self, arg: Any) -> Any:
        """A call argument as a node input: a value, or a weak Python scalar."""
        if type(arg) is Tensor:
            if arg._state == TRACED:
                value: Value = arg._value
                if value.id not in self.values:
                    raise TracingError(
                        f"traced tensor {value.name} belongs to another trace (a traced "
                        "tensor stored outside its function and used in another)\n"
                        f"  at {user_line()}"
                    )
                return value
            return self.constant(arg)
        return arg

    def constant(self, tensor: Tensor) -> Value:
        key = id(tensor)
        known = self._consts.get(key)
        if known is None:
            value = Value(tensor.shape, tensor.dtype, tensor.device, const=tensor)
            value.name = f"%c{value.id}"
            known = self._consts[key] = (value, tensor)
        return known[0]

    def add(
        self, op: Any, args: tuple[Any, ...], static: dict[str, Any], outs: list[Value]
    ) -> Node:
        node = Node(op, [self.operand(a) for a in args], static, outs, site=outs[0].site)
        self.graph.nodes.append(node)
        self.values.update(v.id for v in outs)
        return node


def _record(
    op: Any,
    args: tuple[Any, ...],
    static: dict[str, Any],
    shape: tuple[int, ...],
    dtype: np.dtype[Any],
    device: Any,
) -> Tensor:
    """The registry's hook: a call with a traced operand becomes a node."""
    trace = _current.get()
    if trace is None:
        raise TracingError(
            f"{op.name}: a traced tensor was used after its trace ended (it was stored "
            "outside the compiled function, e.g. in a global or on self)\n"
            f"  at {user_line()}\nReturn it from the function instead."
        )
    out = Value(shape, dtype, device, site=user_line())
    trace.add(op, args, static, [out])
    return traced_tensor(out)


registry.set_trace_recorder(_record, is_tracing)


def _start(
    name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Trace, tuple[Any, ...], dict[str, Any], list[int]]:
    """The trace and the arguments with every tensor leaf made symbolic."""
    leaves, tree = pytree.flatten((args, kwargs))
    inputs, positions, symbolic = _symbolic(leaves)
    trace = Trace(Graph(name, inputs))
    new_args, new_kwargs = pytree.unflatten(tree, symbolic)
    return trace, new_args, new_kwargs, positions


def _symbolic(leaves: list[Any]) -> tuple[list[Value], list[int], list[Any]]:
    """Graph inputs for the tensor (or numpy array) leaves, where those leaves are,
    and the leaves with each of them replaced by a symbolic tensor."""
    inputs: list[Value] = []
    positions: list[int] = []
    symbolic: list[Any] = []
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, (Tensor, np.ndarray)):
            t = leaf if type(leaf) is Tensor else asarray(leaf)
            v = Value(t.shape, t.dtype, t.device, name=f"%in{len(inputs)}")
            inputs.append(v)
            positions.append(i)
            symbolic.append(traced_tensor(v))
        else:
            symbolic.append(leaf)
    return inputs, positions, symbolic


def _finish(trace: Trace, result: Any) -> Any:
    """Record the outputs; returns ``(tree, leaves)``: the result's structure,
    and its leaves with each tensor replaced by the ``_OUTPUT`` marker (graph
    outputs fill them in order, see :func:`output_structure`)."""
    leaves, tree = pytree.flatten(result)
    kept: list[Any] = []
    for leaf in leaves:
        if isinstance(leaf, (Tensor, np.ndarray)):
            if type(leaf) is not Tensor:
                leaf = asarray(leaf)
            trace.graph.outputs.append(trace.operand(leaf))
            kept.append(_OUTPUT)
        else:
            kept.append(leaf)
    return tree, kept


#: Marks where a graph output goes in the rebuilt result.
_OUTPUT = object()


def trace_sync(
    fn: Callable[..., Any], name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Graph, Any, list[int]]:
    """Trace without an event loop: ``(graph, output structure, input positions)``.
    An async ``fn`` must not await anything real (nothing would resume it)."""
    return _drive(trace_async(fn, name, args, kwargs), name)


async def trace_async(
    fn: Callable[..., Any], name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Graph, Any, list[int]]:
    """Trace an async function (it may await I/O while tracing)."""
    trace, targs, tkwargs, positions = _start(name, args, kwargs)
    token = _current.set(trace)
    try:
        result = fn(*targs, **tkwargs)
        if inspect.iscoroutine(result):
            result = await result
    finally:
        _current.reset(token)
    return trace.graph, _finish(trace, result), positions


def _drive(awaitable: Any, name: str) -> Any:
    """Run a coroutine that never suspends (a traced async function that
    awaits nothing real) to its result, without an event loop."""
    coro = awaitable.__await__()
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise TracingError(
        f"{name} awaited something real while being traced from synchronous code "
        "(explain() or a sync call); trace it with `await fn(...)` instead"
    )


def output_structure(out: Any, values: list[Any]) -> Any:
    """Rebuild a traced function's result from its graph outputs' tensors."""
    tree, kept = out
    it = iter(values)
    return pytree.unflatten(tree, [next(it) if k is _OUTPUT else k for k in kept])
