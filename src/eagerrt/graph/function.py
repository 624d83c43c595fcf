"""``ert.function``: trace once per input signature, optimize, run the plan.

>>> import asyncio, numpy as np, eagerrt as ert
>>> W = ert.asarray(np.eye(3, dtype="float32") * 2)
>>> @ert.function
... async def double(x):
...     return ert.relu(x @ W)
>>> async def main():
...     y = await double(ert.asarray(np.ones((2, 3), "float32")))
...     return (await y).tolist()
>>> asyncio.run(main())
[[2.0, 2.0, 2.0], [2.0, 2.0, 2.0]]
>>> double.traces
1
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import os
import sys
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np

from .._core import AsyncValue, Available, PrecisionError, TracingError, UsageError, config
from .._core import precision as _precision
from ..ops.creation import asarray
from ..tensor import TRACED, Tensor
from . import pytree
from .backend import backend_for, graph_device
from .cost_model import record_cost
from .executor import run_plan
from .explain import explain
from .ir import Graph
from .native_plan import NativePlan
from .op_by_op import OpByOpPlan
from .plan import Plan, StepFailed
from .tracing import _OUTPUT, is_tracing, output_structure, trace_async, trace_sync

__all__ = ["Function", "function"]

_F = TypeVar("_F", bound=Callable[..., Any])

#: Traces kept per function (least recently used dropped first).
DEFAULT_MAX_TRACES = 32


@dataclass
class Compiled:
    """One trace of a function, optimized and lowered."""

    graph: Graph
    plan: Plan | OpByOpPlan | NativePlan
    structure: Any
    positions: list[int]  # which flattened argument leaves are graph inputs

    def call(self, leaves: list[Any]) -> Any:
        inputs = []
        for p in self.positions:
            leaf = leaves[p]
            inputs.append(leaf if type(leaf) is Tensor else asarray(leaf))
        return self.finish(run_plan(self.plan, inputs))

    def finish(self, outputs: list[Tensor]) -> Any:
        if self.structure is _ONE_OUTPUT:
            return outputs[0]
        return output_structure(self.structure, outputs)


def _current_task() -> int:
    """An id of the running task (trio's or asyncio's), or of this thread."""
    trio = sys.modules.get("trio")
    if trio is not None:
        try:
            return id(trio.lowlevel.current_task())
        except RuntimeError:
            pass
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no running loop
        task = None
    return id(task) if task is not None else threading.get_ident()


#: The output structure of a function returning one tensor (the common case).
_ONE_OUTPUT = (pytree.LEAF, [_OUTPUT])


def _fast_key(args: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """The cache key of a call whose arguments are all concrete tensors (the
    common case), without flattening; None for any other call."""
    key: list[Any] = []
    for a in args:
        if type(a) is not Tensor or a._state == TRACED:
            return None
        key += (a.shape, a.dtype, a.device)
    return tuple(key)


def signature(leaves: list[Any], tree: Any, name: str) -> tuple[Any, ...]:
    """The cache key: each tensor's shape, dtype and device; other values themselves."""
    parts: list[Any] = [tree]
    for leaf in leaves:
        if type(leaf) is Tensor:
            parts.append((leaf.shape, leaf.dtype, leaf.device))
        elif isinstance(leaf, np.ndarray):
            parts.append((leaf.shape, leaf.dtype, "numpy"))
        else:
            try:
                hash(leaf)
            except TypeError:
                raise UsageError(
                    f"{name}: argument {leaf!r} is neither a tensor nor hashable; non-tensor "
                    "arguments are static (each value compiles its own trace) and must be "
                    "hashable"
                ) from None
            parts.append(("static", type(leaf), leaf))
    return tuple(parts)


def _has_traced(leaves: list[Any]) -> bool:
    return any(type(leaf) is Tensor and leaf._state == TRACED for leaf in leaves)


class Function(Generic[_F]):
    """A compiled function (see :func:`eagerrt.function`)."""

    def __init__(
        self, fn: _F, *, max_traces: int = DEFAULT_MAX_TRACES, precision: str | None = None
    ) -> None:
        if not callable(fn):
            raise UsageError(f"ert.function needs a function, got {fn!r}")
        #: The precision of its products, or None to follow ``config.matmul_precision``.
        self.precision = None if precision is None else _precision.canonical(precision)
        self._fn = fn
        self._async = inspect.iscoroutinefunction(fn)
        self._name = getattr(fn, "__qualname__", getattr(fn, "__name__", "function"))
        self._cache: OrderedDict[tuple[Any, ...], Compiled] = OrderedDict()
        # Traces of calls with only tensor arguments, by _fast_key (a subset of
        # _cache, kept in step with it).
        self._fast: dict[tuple[Any, ...], Compiled] = {}
        # run_sync's calls by their arrays' shapes and dtypes: what runs them; calls
        # of one array by its shape alone: (its dtype, what runs them).
        self._sync: dict[tuple[Any, ...], Callable[[tuple[Any, ...]], Any]] = {}
        self._sync_one: dict[tuple[int, ...], tuple[np.dtype[Any], Any]] = {}
        self._max_traces = max_traces
        #: How many times the function has been traced (new signatures, evictions).
        self.traces = 0
        # Signatures being compiled now -> (process, the compiling thread or task, a value set
        # when done): concurrent first calls of one signature wait for one compile, not each do one.
        self._compiling: dict[tuple[Any, ...], tuple[int, int, AsyncValue]] = {}
        self._compiling_lock = threading.Lock()
        functools.update_wrapper(self, fn)
        _FOLLOWING_CONFIG.add(self)

    def __repr__(self) -> str:
        return f"<ert.function {self._name} ({len(self._cache)} traces cached)>"

    def __reduce__(self) -> tuple[Any, ...]:
        # Its traces hold compiled code, locks and weights: a compiled function
        # pickles (and copies) as its function and options, and traces anew.
        return _rebuild_function, (self._fn, self._max_traces, self.precision)

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        # As a method: the instance is a static argument (each instance its own trace).
        if instance is None:
            return self
        return functools.partial(self.__call__, instance)

    # -- calling ---------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._async:
            return self._call_async(args, kwargs)
        if not kwargs:
            compiled = self._fast.get(_fast_key(args))  # type: ignore[arg-type]
            if compiled is not None:
                return compiled.finish(run_plan(compiled.plan, args))  # type: ignore[arg-type]
        leaves, tree = pytree.flatten((args, kwargs))
        if _has_traced(leaves):  # called while tracing another function: inline it
            return self._fn(*args, **kwargs)
        key = self._key(leaves, tree)
        compiled = self._cache.get(key)
        if compiled is None:
            compiled = self._compile_once_sync(args, kwargs, key)
        else:
            self._cache.move_to_end(key)
            self._remember_fast(key, args, kwargs, compiled)
        return compiled.call(leaves)

    async def _call_async(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if not kwargs:
            compiled = self._fast.get(_fast_key(args))  # type: ignore[arg-type]
            if compiled is not None:
                return compiled.finish(run_plan(compiled.plan, args))  # type: ignore[arg-type]
        leaves, tree = pytree.flatten((args, kwargs))
        if _has_traced(leaves):
            return await self._fn(*args, **kwargs)
        key = self._key(leaves, tree)
        compiled = self._cache.get(key)
        if compiled is None:
            compiled = await self._compile_once_async(args, kwargs, key)
        else:
            self._cache.move_to_end(key)
            self._remember_fast(key, args, kwargs, compiled)
        return compiled.call(leaves)

    def _key(self, leaves: list[Any], tree: Any) -> tuple[Any, ...]:
        """A trace's cache key: the arguments' signature and the precision in force."""
        return (*signature(leaves, tree, self._name), self._precision_now())

    def _precision_now(self) -> str:
        return self.precision or config.matmul_precision

    def _on_precision_change(self) -> None:
        # The fast path's key has no precision in it: traces made under the old
        # setting must not answer calls under the new one.
        if self.precision is None:
            self._fast = {}
            self._sync, self._sync_one = {}, {}

    def run_sync(self, *arrays: np.ndarray) -> Any:
        """The embedded call path: the compiled plan run on numpy arrays, now,
        on this thread, returning numpy arrays (in the function's output
        structure), as TFRT's synchronous interpreter runs small models.

        What a call costs beyond the plan's kernels is a dictionary lookup and
        the plan's own call (measured in ``benchmarks/bench_graph.py``), where
        ``f(x)`` also makes tensors, consults the scheduler and settings and
        records the call. What it gives up: the result is an array, not an
        awaitable tensor, so nothing overlaps with the call (a large model
        holds this thread, and an event loop on it, until it is done); a failing
        step raises its :class:`~eagerrt.KernelError` at once, with no
        replay giving each output its own failure; the profiler does not record
        it. Every argument must be a numpy array (each shape and dtype traces
        once, as ``f(x)`` does; the trace is shared with ``f``'s own calls).

        >>> import numpy as np, eagerrt as ert
        >>> f = ert.function(lambda x: ert.exp(x) * 2 + 1)
        >>> f.run_sync(np.zeros(3, np.float32))
        array([3., 3., 3.], dtype=float32)
        """
        if len(arrays) == 1 and type(arrays[0]) is np.ndarray:
            a = arrays[0]
            entry = self._sync_one.get(a.shape)
            if entry is not None and entry[0] is a.dtype:
                return entry[1](arrays)
            return self._sync_runner(arrays)(arrays)
        shapes = tuple([(a.shape, a.dtype) if type(a) is np.ndarray else () for a in arrays])
        run = self._sync.get(shapes)
        if run is None:
            run = self._sync_runner(arrays, shapes)
        return run(arrays)

    def _sync_runner(
        self, arrays: tuple[Any, ...], shapes: tuple[Any, ...] | None = None
    ) -> Callable[[tuple[Any, ...]], Any]:
        """What runs :meth:`run_sync`'s calls of these arrays' shapes and dtypes
        (traced now if new), kept for the next: under ``shapes`` (their shapes
        and dtypes), or for one array by its shape."""
        bad = [i for i, a in enumerate(arrays) if type(a) is not np.ndarray]
        if bad:
            raise UsageError(
                f"{self._name}.run_sync takes numpy arrays only; argument {bad[0]} is "
                f"{type(arrays[bad[0]]).__name__} (call the function itself for tensors "
                "and static arguments)"
            )
        foreign = [i for i, a in enumerate(arrays) if not a.dtype.isnative]
        if foreign:
            raise UsageError(
                f"{self._name}.run_sync takes arrays in this machine's byte order; argument "
                f"{foreign[0]} is {arrays[foreign[0]].dtype.str} (convert it with "
                "a.astype(a.dtype.newbyteorder('='))"
            )
        tensors = tuple(asarray(a) for a in arrays)
        leaves, tree = pytree.flatten((tensors, {}))
        key = self._key(leaves, tree)
        # (Concurrent first calls of one signature compile it once, as f(x)'s do.)
        compiled = self._cache.get(key) or self._compile_once_sync(tensors, {}, key)
        if compiled.positions != list(range(len(arrays))):
            raise UsageError(f"{self._name}.run_sync: every argument must be a graph input")
        plan, structure = compiled.plan, compiled.structure
        one = structure is _ONE_OUTPUT
        if not isinstance(plan, Plan):  # a plan over several devices: through tensors

            def run(arrays: tuple[Any, ...]) -> Any:
                outs = [t.numpy() for t in run_plan(plan, [asarray(a) for a in arrays])]
                return outs[0] if one else output_structure(structure, outs)

        else:
            execute = plan.execute

            def run(arrays: tuple[Any, ...]) -> Any:
                try:
                    outs = execute(arrays)
                except StepFailed as failed:
                    raise failed.failure.to_exception() from None
                return outs[0] if one else output_structure(structure, outs)

        if key[-1] != self._precision_now():  # the setting changed meanwhile: don't keep it
            return run
        if shapes is None:
            self._sync_one[arrays[0].shape] = (arrays[0].dtype, run)
        else:
            self._sync[shapes] = run
        return run

    def eager(self, *args: Any, **kwargs: Any) -> Any:
        """Call the undecorated function (op by op, no tracing)."""
        return self._fn(*args, **kwargs)

    # -- compiling -------------------------------------------------------------
    def _claim(self, key: tuple[Any, ...], me: int) -> AsyncValue | None:
        """None if caller ``me`` (a thread or a task) is to compile ``key`` (it then
        must :meth:`_release` it), else the value set when the compiling caller is done."""
        pid = os.getpid()
        with self._compiling_lock:
            pending = self._compiling.get(key)
            # A compile a forked parent had under way never finishes in the child.
            if pending is None or pending[0] != pid:
                self._compiling[key] = (pid, me, AsyncValue())
                return None
        _, owner, done = pending
        # The caller compiling this signature again (a function calling itself with
        # concrete arguments while traced) must not wait for itself.
        return None if owner == me else done

    def _release(self, key: tuple[Any, ...], me: int) -> None:
        with self._compiling_lock:
            entry = self._compiling.get(key)
            if entry is None or entry[1] != me:
                return
            del self._compiling[key]
        entry[2].set_value(None)

    def _compile_once_sync(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], key: tuple[Any, ...]
    ) -> Compiled:
        me = threading.get_ident()
        done = self._claim(key, me)
        if done is not None:
            done.wait()
            # Its trace, unless that compile failed.
            return self._cache.get(key) or self._compile_once_sync(args, kwargs, key)
        try:
            return self._compile_sync(args, kwargs, key)
        finally:
            self._release(key, me)

    async def _compile_once_async(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], key: tuple[Any, ...]
    ) -> Compiled:
        me = _current_task()
        done = self._claim(key, me)
        if done is not None:
            await Available(done)
            # Its trace, unless that compile failed.
            return self._cache.get(key) or await self._compile_once_async(args, kwargs, key)
        try:
            return await self._compile_async(args, kwargs, key)
        finally:
            self._release(key, me)

    def _compile_sync(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], key: tuple[Any, ...]
    ) -> Compiled:
        graph, structure, positions = trace_sync(self._fn, self._name, args, kwargs)
        for c in graph.constants():
            if type(c.const) is Tensor:
                c.const.wait()
        return self._store(key, graph, structure, positions, args, kwargs)

    async def _compile_async(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], key: tuple[Any, ...]
    ) -> Compiled:
        if is_tracing():
            raise TracingError(f"{self._name} can't be compiled while another trace runs")
        graph, structure, positions = await trace_async(self._fn, self._name, args, kwargs)
        for c in graph.constants():
            if type(c.const) is Tensor:
                await c.const  # weights still being computed (or loaded)
        return self._store(key, graph, structure, positions, args, kwargs)

    def _store(
        self,
        key: tuple[Any, ...],
        graph: Graph,
        structure: Any,
        positions: list[int],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Compiled:
        graph.note("trace", f"{len(graph.nodes)} ops traced")
        graph.precision = key[-1]
        plan: Plan | OpByOpPlan | NativePlan | None = None
        device = graph_device(graph)
        if device is not None:  # one device: its backend's compiler, if it has one
            backend = backend_for(device)
            backend.check_precision(graph.precision)
            plan = backend.compile(graph)
        elif graph.precision != _precision.FLOAT32:
            raise PrecisionError(
                f"{self._name}: matmul precision {graph.precision!r} applies to a graph on "
                "one device; this one's values span several (it runs op by op, in float32)"
            )
        if plan is None:  # no compiler, or values on several devices: ops called in order
            plan = OpByOpPlan(graph)
        if structure == _ONE_OUTPUT:
            structure = _ONE_OUTPUT  # the same object: finish() tests identity
        compiled = Compiled(graph, plan, structure, positions)
        self.traces += 1
        self._cache[key] = compiled
        self._remember_fast(key, args, kwargs, compiled)
        while len(self._cache) > self._max_traces:
            self._forget(next(iter(self._cache)))  # the least recently used
        return compiled

    def _remember_fast(
        self,
        key: tuple[Any, ...],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        compiled: Compiled,
    ) -> None:
        """Let calls of only these tensors find ``compiled`` without flattening
        (again, after a change of precision emptied the fast path), unless it
        was traced under another precision than the one now in force (a
        compile that a change of setting overtook)."""
        if kwargs or key[-1] != self._precision_now():
            return
        fast = _fast_key(args)
        if fast is not None and compiled.positions == list(range(len(args))):
            self._fast[fast] = compiled

    def _forget(self, key: tuple[Any, ...]) -> None:
        """Drop a trace from both caches."""
        dropped = self._cache.pop(key, None)
        self._fast = {k: c for k, c in self._fast.items() if c is not dropped}
        self._sync, self._sync_one = {}, {}  # (rebuilt from the kept traces when called)

    def compiled_for(self, *args: Any, **kwargs: Any) -> Compiled:
        """The trace these arguments would run (traced now if new; the function
        must not await anything real while tracing)."""
        leaves, tree = pytree.flatten((args, kwargs))
        key = self._key(leaves, tree)
        return self._cache.get(key) or self._compile_sync(args, kwargs, key)

    def measure_costs(self, *args: Any, repeats: int = 3, **kwargs: Any) -> dict[str, float]:
        """Time each step of the plan for these arguments (their data must be
        ready), record the timings in the cost model, and recompile with them:
        later traces of the same ops and shapes, in any function, use measured
        costs instead of estimates. Returns nanoseconds by step (output name and
        op). On a device with its own plans, each op is timed as an eager call
        that the device finished (nothing is recorded: its plans use no costs)."""
        leaves, tree = pytree.flatten((args, kwargs))
        key = self._key(leaves, tree)
        compiled = self.compiled_for(*args, **kwargs)
        plan = compiled.plan
        inputs = [asarray(leaves[p]) for p in compiled.positions]
        if not isinstance(plan, Plan):
            return dict(plan.time_ops(inputs, repeats))
        timings = plan.time_steps([t.numpy() for t in inputs], repeats)
        measured = {}
        for step, ns in zip(plan.steps, timings, strict=True):
            record_cost(step.node, ns)
            measured[f"{step.node.outputs[0].name} {step.node.name}"] = ns
        self._forget(key)
        self.compiled_for(*args, **kwargs)
        return measured

    def explain(self, *args: Any, **kwargs: Any) -> str:
        """What the compiler made of a call with these arguments: the passes,
        the optimized graph, the execution plan, the memory plan, the code."""
        return explain(self._name, self.compiled_for(*args, **kwargs))


#: Every live compiled function, told when ``config.matmul_precision`` changes.
_FOLLOWING_CONFIG: weakref.WeakSet[Function[Any]] = weakref.WeakSet()


def _precision_changed() -> None:
    for fn in list(_FOLLOWING_CONFIG):
        fn._on_precision_change()


config.on_precision_change(_precision_changed)


def _rebuild_function(fn: Any, max_traces: int, precision: str | None = None) -> Function[Any]:
    return Function(fn, max_traces=max_traces, precision=precision)


def function(
    fn: _F | None = None, *, max_traces: int = DEFAULT_MAX_TRACES, precision: str | None = None
) -> Any:
    """Compile ``fn`` (async or plain) for inference: the first call per input
    signature traces it into a graph, optimizes it and lowers it to a plan;
    later calls with tensors of the same shapes, dtypes and devices run the
    plan. Results are tensors, as eager calls give.

    Non-tensor arguments are static: each distinct value gets its own trace.
    Tensors the function closes over (weights) are constants of the graph.
    ``fn.explain(*args)`` shows what the compiler did; ``fn.eager(*args)``
    runs the original, op by op.

    ``precision``: the precision of the plan's matrix products, ``"float32"``
    (exact) or ``"bfloat16"`` (bfloat16 operands, float32 accumulation, where
    the device has fast bfloat16 products; see :mod:`eagerrt._core.precision`);
    None follows ``ert.config.matmul_precision`` as it is when a call is traced.
    A device that can't deliver it raises :class:`~eagerrt.PrecisionError` at
    the first call.
    """
    if fn is None:
        return lambda f: Function(f, max_traces=max_traces, precision=precision)
    return Function(fn, max_traces=max_traces, precision=precision)
