"""The op registry: every op, built-in or user-defined, is one :class:`Op`.

An op is a name plus tables of rules, after JAX's primitives:

* a **shape rule** ``rule(*args, **static) -> (shape, dtype)`` run synchronously
  at the call, so metadata is known at once and bad calls fail at the user's line;
* a **cost** ``cost(shape, dtype, *args, **static) -> nanoseconds`` that the
  scheduler compares with ``config.inline_threshold_ns``;
* **kernels** by device name, where a device's own kernel overrides the generic
  (numpy-API) one;
* **out forms** by device name, for graph mode: ``form(*arrays, out)`` writes the
  result into a buffer the compiled plan's memory plan gives (see :meth:`Op.out_form`).
  A device's backend registers both as it loads (see :mod:`eagerrt.graph.backend`).

Positional arguments are tensors (anything array-like is converted) or Python
scalars (kept as weak scalars, as numpy does); keyword arguments are static
parameters passed to the rule, the cost and the kernel alike.

>>> import numpy as np, eagerrt as ert
>>> square = ert.define_op("doc_square", rule=lambda x: (x.shape, x.dtype))
>>> @square.kernel("cpu")
... def _square_cpu(x):
...     return x * x
>>> square(ert.asarray([1.0, 2.0, 3.0])).numpy()
array([1., 4., 9.])
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import math
import time
from collections.abc import Callable, Iterator, Mapping
from threading import get_ident
from types import FrameType, MappingProxyType
from typing import Any, TypeVar

import numpy as np

from .._core import (
    ERROR,
    PENDING,
    READY,
    DeviceError,
    DTypeError,
    Failure,
    OutOfBoundsError,
    ShapeError,
    SourceLine,
    Task,
    TracingError,
    UsageError,
    ValueRangeError,
    caller_modes,
    config,
    count_inline,
    float_errors,
    profiling,
    register_runner,
    run_here,
    run_under,
    schedule,
    schedule_read,
    stop_counting_as_busy,
    user_line,
)
from ..devices import cpu, get_device
from ..devices.base import Device, on_device_closed
from ..tensor import TRACED, Tensor
from .wrap import wrap

__all__ = [
    "GENERIC",
    "Op",
    "call_error",
    "define_op",
    "elementwise_cost",
    "exposes",
    "get_op",
    "launch",
    "load_backend_module",
    "registering_backend_kernels",
    "registered_ops",
]

#: The device name under which an op's generic (numpy-API) kernel is registered.
GENERIC = "generic"

Shape = tuple[int, ...]
Rule = Callable[..., tuple[Shape, np.dtype[Any]]]
Cost = Callable[..., float]
Kernel = Callable[..., Any]
_Bound = tuple[tuple[Any, ...], dict[str, Any]]  # a call's operands and static arguments

_SCALAR_TYPES = (bool, int, float, complex)

#: Graph mode's recorder (``eagerrt.graph.tracing`` sets it; ops can't import
#: the graph package): ``record(op, args, static, shape, dtype, device)`` gives
#: the traced tensor for a call with a traced operand.
_trace_recorder: Callable[..., Tensor] | None = None


def _never() -> bool:
    return False


#: Whether the calling task is inside a trace (for ops with no tensor operand).
tracing: Callable[[], bool] = _never


def set_trace_recorder(recorder: Callable[..., Tensor], is_tracing: Callable[[], bool]) -> None:
    global _trace_recorder, tracing
    _trace_recorder = recorder
    tracing = is_tracing


_registry: dict[str, Op] = {}
_all_ops: list[Op] = []  # including unregistered ones, for forget_all_calls
_new = object.__new__


def _on_host(op: Op, host_kernel: Kernel, device: Device) -> Kernel:
    """``op``'s CPU kernel as a kernel for ``device``, which asked for the host
    fallback: operands downloaded, the result uploaded, each run counted in
    ``device.host_fallbacks``."""
    natives = device.native_types

    def native(a: Any) -> bool:
        if natives is not None:
            return isinstance(a, natives)
        return not isinstance(a, (*_SCALAR_TYPES, type(None), str, slice, tuple, list))

    def on_host(*args: Any, **static: Any) -> Any:
        device.host_fallbacks[op.name] += 1
        out = host_kernel(*[device.to_numpy(a) if native(a) else a for a in args], **static)
        if isinstance(out, tuple):
            return tuple(device.from_numpy(np.asarray(o)) for o in out)
        return device.from_numpy(np.asarray(out))

    on_host.__name__ = on_host.__qualname__ = f"{op.name}_on_host"
    return on_host


def _forget_all_calls() -> None:
    for op in _all_ops:
        op.forget_calls()


config.on_cost_change(_forget_all_calls)
# A closed device's calls must reach _call's check, not a fast path's memory.
on_device_closed(lambda device: _forget_all_calls())


def elementwise_cost(shape: Shape, dtype: np.dtype[Any], /, *args: Any, **static: Any) -> float:
    """Default cost: a fixed call overhead plus a constant per output element."""
    return config.op_overhead_ns + math.prod(shape) * config.ns_per_element


class Op:
    """One op: a name, a shape rule, a cost, and kernels by device.

    Call it like a function; it returns a :class:`~eagerrt.Tensor` at once.
    """

    __slots__ = (
        "__dict__",
        "_by_device",
        "_generation",
        "_last1",
        "_last2",
        "_last2l",
        "_last2r",
        "_operand_names",
        "_out_forms",
        "_preparers",
        "_specializers",
        "_static_names",
        "_user_kernels",
        "call1",
        "call2",
        "cost",
        "kernels",
        "name",
        "operands",
        "rule",
        "scalar_types_only",
        "weak_scalars",
    )

    def __init__(
        self,
        name: str,
        rule: Rule,
        *,
        cost: Cost | None = None,
        doc: str | None = None,
        operands: int | None = None,
        weak_scalars: bool | None = None,
    ):
        self.name = name
        self.rule = rule
        #: How many leading positional arguments are tensors; further positional
        #: arguments bind to the rule's next parameters as static ones, so
        #: ``ert.sum(x, 0)`` means ``ert.sum(x, axis=0)``. None: all are tensors.
        self.operands = operands
        #: Python numbers stay weak scalars (NEP 50) instead of becoming tensors:
        #: by default for ops whose operand count is open (elementwise ones).
        self.weak_scalars = operands is None if weak_scalars is None else weak_scalars
        positional = [
            p.name
            for p in inspect.signature(rule).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        self._static_names = () if operands is None else tuple(positional[operands:])
        #: The rule's parameter names for operands, for operands given by keyword.
        self._operand_names: tuple[str, ...] = tuple(positional[:operands])
        self.cost: Cost = cost or elementwise_cost
        self.kernels: dict[str, Kernel] = {}
        self._specializers: dict[str, Callable[..., Kernel | None]] = {}
        self._preparers: dict[str, Callable[..., Kernel | None]] = {}
        self._out_forms: dict[str, Callable[[Any], Kernel | None]] = {}
        self._by_device: dict[Device, Kernel] = {}
        #: Devices (names) whose kernel came from outside eagerrt: its results
        #: are checked against the rule, as every result on a device that asks.
        self._user_kernels: set[str] = set()
        self._last1: tuple[Any, ...] | None = None
        self._last2: tuple[Any, ...] | None = None
        # A tensor and a weak scalar: the scalar on the left (2 * x), on the right (x * 2).
        self._last2l: tuple[Any, ...] | None = None
        self._last2r: tuple[Any, ...] | None = None
        #: The rule reads only the type of a weak scalar operand, never its
        #: value (numpy's binary ufuncs, but for NEP 50's check that a Python
        #: int fits an integer operand): the fast path may then reuse a call
        #: with one tensor and one scalar for the next scalar of that type.
        self.scalar_types_only = False
        self._generation = 0
        #: ``self(x)`` and ``self(x, y)`` as plain functions with the fast path:
        #: what Tensor's operators call.
        self.call1 = _fast_unary(self)
        self.call2 = _fast_binary(self)
        self.__doc__ = doc
        #: What ``inspect.signature(op)`` shows: the operands positional-only.
        self.__signature__ = _call_signature(rule, operands)
        _all_ops.append(self)

    def kernel(self, device: str = GENERIC) -> Callable[[Kernel], Kernel]:
        """Decorator registering ``fn`` as this op's kernel for ``device``."""

        def register(fn: Kernel) -> Kernel:
            self.register_kernel(device, fn)
            return fn

        return register

    def register_kernel(self, device: str, fn: Kernel) -> None:
        """Make ``fn(*arrays, **static)`` this op's kernel on ``device``.

        A kernel gets device-native arrays (numpy arrays on the CPU) and returns
        one of the rule's shape and dtype. On the CPU, a user kernel's list or
        Python number is turned into an array for the ops that read it.
        """
        if _builtin_names and not _backends_loading:  # a user's kernel
            self._user_kernels.add(device)
            if device in (GENERIC, "cpu"):
                fn = _host_arrays_out(fn)
        self.forget_calls()  # first: calls in flight see the new generation
        self.kernels[device] = fn
        self._by_device.clear()

    def specialize(self, device: str) -> Callable[[Callable[..., Kernel | None]], Any]:
        """Decorator: ``fn(*args, **static)`` may return a faster kernel for these
        operands' shapes and dtypes on ``device`` (or None to keep the usual one).

        It runs on the general path, once per new signature; the fast path then
        reuses its choice for every call with the same shapes and dtypes.
        """
        return _adding(self._specializers, device, then=self.forget_calls)

    def prepare(self, device: str) -> Callable[[Callable[..., Kernel | None]], Any]:
        """Decorator: in graph mode, ``fn(constants, *args, **static)`` may return a
        kernel for a node whose operands at the positions in ``constants`` (a dict:
        position -> numpy array) are the compiled function's constants (weights),
        or None. The kernel is called like the usual one, every operand passed,
        and may use work done once on the constants here instead (a convolution's
        transformed weights): graph mode computes from weights once, at compile
        time, as constant folding does. Eager calls never use it.
        """
        return _adding(self._preparers, device)

    def out_form(self, device: str) -> Callable[[Callable[[Any], Kernel | None]], Any]:
        """Decorator: ``fn(node)`` gives this op's *out form* on ``device`` for a
        graph node (its operands' shapes, dtypes and constants are the node's),
        or None where the node's kernel must allocate its result. An out form
        ``form(*arrays, out)`` writes the result into ``out``, a buffer the
        compiled plan's memory plan reuses across steps; static arguments are
        bound by ``fn``. Eager calls never use it.
        """
        return _adding(self._out_forms, device)

    @property
    def user_kernels(self) -> frozenset[str]:
        """The devices (names) whose kernel for this op was registered from
        outside eagerrt (a user's or a third-party device's): graph passes
        leave such ops' semantics alone."""
        return frozenset(self._user_kernels)

    @property
    def out_forms(self) -> Mapping[str, Callable[[Any], Kernel | None]]:
        """The out forms' makers registered, by device name (read only)."""
        return MappingProxyType(self._out_forms)

    def out_form_for(self, node: Any) -> Kernel | None:
        """The out form registered for ``node``'s device (or the generic one)."""
        device = node.out.device
        forms = self._out_forms
        maker = forms.get(device.kernel_name or device.name) or forms.get(GENERIC)
        return None if maker is None else maker(node)

    def forget_calls(self) -> None:
        """Drop the fast path's memory of the last call (kernels or costs changed)."""
        # A call that looked up the old kernel must not store it after this.
        self._generation += 1
        self._last1 = self._last2 = self._last2l = self._last2r = None

    def _kernel_for(self, device: Device) -> Kernel:
        if device.backend is not None and device.backend not in _loaded_backends:
            load_backend_module(device.backend)
        kernel = self.kernels.get(device.kernel_name or device.name)
        if kernel is None and device.generic_kernels:
            kernel = self.kernels.get(GENERIC)
        if kernel is None and device.host_fallback and device is not cpu:
            kernel = _on_host(self, self._kernel_for(cpu), device)
        if kernel is None:
            raise DeviceError(
                f"op {self.name!r} has no kernel for device {device.name!r} "
                f"(it has: {sorted(self.kernels) or 'none'})"
            )
        return kernel

    #: A stateful op gives new results on each call with the same arguments
    #: (random sampling): graph mode records it even without tensor operands,
    #: and never folds or merges it.
    stateful = False

    def __repr__(self) -> str:
        return f"<eagerrt op {self.name!r}>"

    def __call__(self, *args: Any, device: str | Device | None = None, **static: Any) -> Tensor:
        if self.operands is not None and len(args) > self.operands:
            args, static = self._bind_static(args, static)
        if not static and device is None:
            if len(args) == 2:
                return self.call2(args[0], args[1])
            if len(args) == 1:
                return self.call1(args[0])
        return self._call(args, device, static)

    def _bind_static(self, args: tuple[Any, ...], static: dict[str, Any]) -> _Bound:
        n = self.operands or 0
        extra = args[n:]
        if len(extra) > len(self._static_names):
            raise call_error(
                DTypeError,
                self.name,
                args,
                static,
                f"takes {n} tensor(s) and at most {len(self._static_names)} more "
                f"argument(s) {self._static_names}, got {len(args)}",
            )
        bound = dict(zip(self._static_names, extra, strict=False))
        twice = sorted(set(bound) & set(static))
        if twice:
            raise call_error(
                DTypeError, self.name, args, static, f"got multiple values for {twice}"
            )
        return args[:n], {**static, **bound}

    def _remember_call(
        self,
        args: tuple[Any, ...],
        dev: Device,
        shape: Shape,
        dtype: np.dtype[Any],
        cost: float,
        kernel: Kernel,
        generation: int,
    ) -> None:
        """Fill the fast path's inline cache for this signature (tensors, or one
        tensor and a weak scalar whose value the rule can't refuse)."""
        if len(args) == 2:
            a, b = args
            if type(a) is Tensor and type(b) is Tensor:
                self._last2 = (a.shape, b.shape, a.dtype, b.dtype, dev, shape, dtype, cost, kernel)
            elif self.scalar_types_only and (type(a) is Tensor) != (type(b) is Tensor):
                left = type(b) is Tensor
                x, scalar = (b, a) if left else (a, b)
                # Any float; an int only beside a float tensor (NEP 50's range check).
                if type(scalar) is float or (type(scalar) is int and x.dtype.kind in "fc"):
                    hit = (type(scalar), x.shape, x.dtype, dev, shape, dtype, cost, kernel)
                    if left:
                        self._last2l = hit
                    else:
                        self._last2r = hit
        elif len(args) == 1 and type(args[0]) is Tensor:
            a = args[0]
            self._last1 = (a.shape, a.dtype, dev, shape, dtype, cost, kernel)
        # Store, then re-check: a kernel registered meanwhile must not be undone.
        if self._generation != generation:
            self._last1 = self._last2 = self._last2l = self._last2r = None

    def _operands_from_keywords(self, args: tuple[Any, ...], static: dict[str, Any]) -> _Bound:
        """``ert.take(x, indices=i)``: operands named by keyword join ``args``, so
        the op waits for them like any operand. Tensors can't be static.

        With ``operands=n`` the first n rule parameters are operands; otherwise a
        rule parameter given a tensor by keyword is one.
        """
        names = self._operand_names
        fixed = self.operands is not None

        def is_operand(name: str) -> bool:
            return name in static and (fixed or isinstance(static[name], Tensor))

        if any(map(is_operand, names)):
            static = dict(static)
            args = list(args)  # type: ignore[assignment]
            for position, name in enumerate(names):
                if not is_operand(name):
                    continue
                if position != len(args):
                    why = (
                        f"got multiple values for {name!r}"
                        if position < len(args)
                        else f"operand {name!r} given by keyword, but "
                        f"{names[len(args)]!r} is missing"
                    )
                    raise call_error(DTypeError, self.name, tuple(args), static, why)
                args.append(static.pop(name))  # type: ignore[attr-defined]
            args = tuple(args)
        for key, value in static.items():
            if isinstance(value, Tensor):
                raise call_error(
                    DTypeError,
                    self.name,
                    args,
                    static,
                    f"{key}= is a static parameter and can't be a tensor "
                    "(its value would be needed now, at the call)",
                )
        return args, static

    def _convert_args(
        self, args: tuple[Any, ...], static: dict[str, Any], scalars_ok: bool
    ) -> tuple[Any, ...]:
        out = []
        for a in args:
            if type(a) is Tensor or (scalars_ok and isinstance(a, _SCALAR_TYPES)):
                out.append(a)
                continue
            try:
                out.append(wrap(a))
            except UsageError as exc:
                raise call_error(
                    DTypeError,
                    self.name,
                    args,
                    static,
                    f"cannot use {type(a).__name__} as an operand ({exc})",
                ) from None
        return tuple(out)

    def _failed(self, exc: Exception, shape: Shape, dtype: np.dtype[Any], dev: Device) -> Tensor:
        return Tensor._failed(Failure(self.name, user_line(), exc), shape, dtype, dev, self.name)

    def _call(self, args: tuple[Any, ...], device: Any, static: dict[str, Any]) -> Tensor:
        """The general path: conversions, the rule, then inline, park or offload."""
        generation = self._generation
        recording = profiling.active
        if recording is not None and not static and device is None:
            recorded = self._recorded_hit(recording, args, generation)
            if recorded is not None:
                return recorded
        if static:
            args, static = self._operands_from_keywords(args, static)
        scalars_ok = self.weak_scalars
        dev = None
        for a in args:
            if type(a) is Tensor:
                if dev is None:
                    dev = a.device
                elif a.device is not dev:
                    devices = sorted({t.device.name for t in args if type(t) is Tensor})
                    raise call_error(
                        DeviceError,
                        self.name,
                        args,
                        static,
                        f"operands are on different devices ({', '.join(devices)}); "
                        "move them to one device first with t.to(device)",
                    )
            elif not (scalars_ok and isinstance(a, _SCALAR_TYPES)):
                args = self._convert_args(args, static, scalars_ok)
                return self._call(args, device, static)
        if dev is None:
            dev = get_device(device)
        elif device is not None and get_device(device) is not dev:
            raise call_error(
                DeviceError,
                self.name,
                args,
                static,
                f"operands are on {dev.name} but device={device!r} was asked for; "
                "move them first with t.to(device)",
            )
        if dev.closed:
            raise call_error(DeviceError, self.name, args, static, f"device {dev.name!r} is closed")
        try:
            shape, dtype = self.rule(*args, **static)
        except UsageError as exc:
            raise call_error(type(exc), self.name, args, static, str(exc)) from None
        except IndexError as exc:
            raise call_error(OutOfBoundsError, self.name, args, static, str(exc)) from None
        except OverflowError as exc:
            raise call_error(ValueRangeError, self.name, args, static, str(exc)) from None
        except ValueError as exc:
            raise call_error(ShapeError, self.name, args, static, str(exc)) from None
        except TypeError as exc:
            raise call_error(DTypeError, self.name, args, static, str(exc)) from None
        kernel = self._by_device.get(dev)
        if kernel is None:
            try:
                kernel = self._kernel_for(dev)
            except DeviceError as exc:  # said at the call, naming the user's line
                raise call_error(DeviceError, self.name, args, static, str(exc)) from None
            # Store, then re-check: a registration that raced this lookup wins.
            self._by_device[dev] = kernel
            if self._generation != generation:
                self._by_device.pop(dev, None)
        if self._specializers:
            specializer = self._specializers.get(dev.name)
            if specializer is not None:
                kernel = specializer(*args, **static) or kernel
        if (dev.checks_results or self._user_kernels) and not dev.completes_at_enqueue:
            kernel = _checking(kernel, self.name, dev, shape, dtype)

        if self.stateful and tracing() and _trace_recorder is not None:
            return _trace_recorder(self, args, static, shape, dtype, dev)
        ready = True
        for a in args:
            if type(a) is Tensor and a._state != READY:
                if a._state == ERROR:
                    return Tensor._failed(a._value, shape, dtype, dev, self.name)
                if a._state == TRACED and _trace_recorder is not None:
                    return _trace_recorder(self, args, static, shape, dtype, dev)
                ready = False
        # While a profile records, the fast path's cache stays off (it would skip
        # the record): every call comes here, and _recorded_last does its job.
        fast_ok = ready and not static and device is None
        if dev.completes_at_enqueue:  # a stream device: ready once enqueued
            result = self._enqueue(dev, kernel, args, static, shape, dtype, ready)
            if fast_ok and recording is None and result._state == READY:
                launcher = dev.launcher(self, kernel, shape, dtype)
                self._remember_call(args, dev, shape, dtype, 0.0, launcher, generation)
            return result
        cost = self.cost(shape, dtype, *args, **static)
        if fast_ok and recording is None:
            self._remember_call(args, dev, shape, dtype, cost, kernel, generation)
        elif fast_ok and all(type(a) is Tensor for a in args):
            sig = tuple((a.shape, a.dtype) for a in args)
            self._recorded_last = (generation, sig, dev, shape, dtype, cost, kernel)
        if ready and cost <= config.inline_limit_ns:
            count_inline()
            if recording is not None:
                return self._run_recorded(recording, kernel, args, static, shape, dtype, dev)
            values = [a._value if type(a) is Tensor else a for a in args]
            try:
                value = (
                    run_here(kernel, *values)
                    if not static
                    else run_here(lambda: kernel(*values, **static))
                )
            except Exception as exc:  # the failure belongs to the result, not the call
                return self._failed(exc, shape, dtype, dev)
            return Tensor._ready(value, shape, dtype, dev, self.name)
        return self._launch(kernel, args, static, shape, dtype, dev, cost)

    #: While a profile records: the last call's signature and what the rule,
    #: the cost and the kernel lookup gave for it (the inline cache's job).
    _recorded_last: tuple[Any, ...] | None = None

    def _recorded_hit(
        self, recording: profiling.Recording, args: tuple[Any, ...], generation: int
    ) -> Tensor | None:
        """While profiling, a ready call with the last recorded call's shapes,
        dtypes and device runs (recorded) without the rule and cost; else None."""
        last = self._recorded_last
        if last is None or last[0] != generation or self.stateful:
            return None
        _, sig, dev, shape, dtype, cost, kernel = last
        if len(args) != len(sig) or cost > config.inline_limit_ns:
            return None
        for a, (a_shape, a_dtype) in zip(args, sig, strict=True):
            if (
                type(a) is not Tensor
                or a._state != READY
                or a.device is not dev
                or a.dtype is not a_dtype
                or a.shape != a_shape
            ):
                return None
        count_inline()
        return self._run_recorded(recording, kernel, args, {}, shape, dtype, dev)

    def _run_recorded(
        self,
        recording: profiling.Recording,
        kernel: Kernel,
        args: tuple[Any, ...],
        static: dict[str, Any],
        shape: Shape,
        dtype: np.dtype[Any],
        dev: Device,
    ) -> Tensor:
        """The inline run, timed and recorded (only while a profile is active)."""
        values = [a._value if type(a) is Tensor else a for a in args]
        start = time.perf_counter_ns()
        try:
            value = run_here(lambda: kernel(*values, **static))
        except Exception as exc:
            end = time.perf_counter_ns()
            result = self._failed(exc, shape, dtype, dev)
        else:
            end = time.perf_counter_ns()
            result = Tensor._ready(value, shape, dtype, dev, self.name)
        recording.ran(
            self.name, dev.name, start, end, user_line(), args, result, result._state == ERROR
        )
        return result

    def _enqueue(
        self,
        dev: Device,
        kernel: Kernel,
        args: tuple[Any, ...],
        static: dict[str, Any],
        shape: Shape,
        dtype: np.dtype[Any],
        ready: bool,
    ) -> Tensor:
        """A stream device's op: its tensor is ready once the work is enqueued
        (on the thread that completes the operands, if some are still pending)."""
        if not ready:

            def enqueue(*values: Any) -> Any:
                return dev.enqueue(self, kernel, values, static, shape, dtype)

            return launch(self.name, enqueue, args, shape, dtype, dev, 0.0, dev.executor)
        values = [a._value if type(a) is Tensor else a for a in args]
        recording = profiling.active  # the device may report the work: see launching()
        launching = (
            None if recording is None else recording.launch(self.name, dev.name, args, user_line())
        )
        try:
            value = dev.enqueue(self, kernel, values, static, shape, dtype)
        except Exception as exc:  # out of memory, a kernel refusing its operands
            result = self._failed(exc, shape, dtype, dev)
        except BaseException:  # Ctrl-C: this thread's launch must not outlive the call
            if launching is not None:
                launching.abandoned()
            raise
        else:
            result = Tensor._ready(value, shape, dtype, dev, self.name)
        if launching is not None:
            launching.launched(result, result._state == ERROR)
        return result

    def _launch(
        self,
        kernel: Kernel,
        args: tuple[Any, ...],
        static: dict[str, Any],
        shape: Shape,
        dtype: np.dtype[Any],
        dev: Device,
        cost: float,
    ) -> Tensor:
        """The slow path: park on pending inputs and/or run on the device's workers."""
        compute = (lambda *values: kernel(*values, **static)) if static else kernel
        return launch(self.name, compute, args, shape, dtype, dev, cost, dev.executor)


def _call_signature(rule: Rule, operands: int | None) -> inspect.Signature:
    """An op's call signature from its rule's: operands are positional-only,
    static parameters keep their kind (those after the operands also bind by
    position), and ``device`` comes last, keyword-only."""
    params = []
    position = 0
    for p in inspect.signature(rule).parameters.values():
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            if operands is None or position < operands:
                p = p.replace(kind=p.POSITIONAL_ONLY)
            position += 1
        if p.kind == p.VAR_KEYWORD:
            params.append(inspect.Parameter("device", p.KEYWORD_ONLY, default=None))
        params.append(p.replace(annotation=p.empty))
    if not any(p.kind == p.VAR_KEYWORD for p in params):
        params.append(inspect.Parameter("device", inspect.Parameter.KEYWORD_ONLY, default=None))
    return inspect.Signature(params)


_F = TypeVar("_F", bound=Callable[..., Any])


def _adding(
    table: dict[str, Any], device: str, then: Callable[[], None] | None = None
) -> Callable[[_F], _F]:
    """A decorator putting ``fn`` in ``table`` under ``device`` (then calling ``then``)."""

    def register(fn: _F) -> _F:
        table[device] = fn
        if then is not None:
            then()
        return fn

    return register


def exposes(op: Op) -> Callable[[_F], _F]:
    """Decorator for the public function that calls ``op`` with the Array API's
    signature: ``fn.op`` is the op (to give it device kernels, and numpy's
    positional order), ``fn.name`` its name."""

    def attach(fn: _F) -> _F:
        setattr(fn, "op", op)  # noqa: B010 - an attribute mypy doesn't know functions have
        setattr(fn, "name", op.name)  # noqa: B010
        return fn

    return attach


class _KernelTask(Task):
    """Run ``compute`` on the inputs' values; fail like the inputs, or with a new
    failure naming the op and its creation line."""

    __slots__ = ("args", "compute", "modes", "name", "site")

    args: tuple[Any, ...]
    compute: Callable[..., Any]
    modes: Any  # numpy's error modes where the op was made
    name: str
    site: SourceLine | None

    def run(self) -> None:
        result = self.result
        args = self.args
        failed = next((a for a in args if type(a) is Tensor and a._state == ERROR), None)
        if failed is not None:
            self._done_reading()
            result._complete(ERROR, failed._value)
            return
        try:
            values = [a._value if type(a) is Tensor else a for a in args]
            value = run_under(self.modes, self.compute, *values)
        except BaseException as exc:
            # Even Ctrl-C or SystemExit must not leave the result pending forever.
            self._done_reading()
            result._complete(ERROR, Failure(self.name, self.site, exc))
            if not isinstance(exc, Exception):
                raise
            return
        self._done_reading()
        stop_counting_as_busy()
        result._complete(READY, value)

    def refused(self, exc: Exception) -> None:
        self._done_reading()
        super().refused(exc)

    def _done_reading(self) -> None:
        # A write waiting for this read may now replace the inputs' values.
        for a in self.args:
            if type(a) is Tensor:
                a._untrack_reader(self)


def launch(
    name: str,
    compute: Callable[..., Any],
    args: tuple[Any, ...],
    shape: Shape,
    dtype: np.dtype[Any],
    device: Device,
    cost_ns: float,
    executor: Any,
) -> Tensor:
    """A pending tensor that ``compute(*values)`` fills once ``args`` are ready.

    An input's failure passes to the result unchanged; ``compute`` raising makes
    a new failure naming ``name`` and the user's line calling now.
    """
    site = user_line()
    result = Tensor._pending(shape, dtype, device, name)
    pending = []
    for a in args:
        if type(a) is Tensor and a._state != READY:
            if a._state == TRACED:
                raise TracingError(
                    f"{name} can't be traced by ert.function: it needs its operands' data "
                    f"at the call, which a traced tensor doesn't have\n  at {user_line()}\n"
                    "Call it outside the compiled function, or run the function eagerly."
                )
            if a._state == PENDING:
                pending.append(a)
    if config.sync_active:  # every op runs at its call: wait for inputs made earlier
        for a in pending:
            a.wait()
        pending = []
    recording = profiling.active
    if recording is not None:
        compute = recording.launched(name, device.name, compute, args, result, site, cost_ns)
    task = _KernelTask(result, cost_ns, executor)
    task.args = args
    task.compute = compute
    # (A stream's launch raises no numeric warnings and reads the stream chosen.)
    task.modes = None if device.completes_at_enqueue else caller_modes()
    task.name = name
    task.site = site
    if pending:  # noted as a reader and parked in one step (a write may come between)
        schedule_read(task, args)
        return result
    for a in args:  # a later write to an input must wait for this read
        if type(a) is Tensor:
            a._track_reader(task)
    schedule(task, pending)
    return result


def _call_directly(kernel: Callable[..., Any], /, *args: Any) -> Any:
    """A stream's launcher, called as the fast path calls ``run`` (no context)."""
    return kernel(*args)


# The fast sync path, after TFRT's: one or two ready tensors (or a tensor and
# a weak scalar, for ops whose rule reads only its type) with the same shapes,
# dtypes and device as the op's previous call reuse that call's rule, cost and
# kernel lookup (a monomorphic inline cache) and run the kernel right here; on
# a stream device the cached "kernel" is the device's launcher, which enqueues
# it. Everything else, and every miss, takes Op._call. Closures rather than
# methods: Python calls a function found on a type (Tensor.__add__) with no
# bound-method or __call__ indirection.
def _fast_binary(op: Op) -> Callable[[Any, Any], Tensor]:
    name = op.name

    def call2(a: Any, b: Any, /) -> Tensor:
        hit = op._last2
        if (
            hit is not None
            and type(a) is Tensor
            and type(b) is Tensor
            and a._state == READY
            and b._state == READY
        ):
            sa, sb, da, db, dev, shape, dtype, cost, kernel = hit
            if not (
                a.dtype is da
                and b.dtype is db
                and a.shape == sa
                and b.shape == sb
                and a.device is dev
                and b.device is dev
                and cost <= config.inline_limit_ns
            ):
                return op._call((a, b), None, {})
            first, second = a._value, b._value
        else:  # one tensor and a weak scalar (x * 0.5, 1 - x)?
            left = type(b) is Tensor
            hit = op._last2l if left else op._last2r
            if hit is None:
                return op._call((a, b), None, {})
            kind, sx, dx, dev, shape, dtype, cost, kernel = hit
            x, scalar = (b, a) if left else (a, b)
            if not (
                type(scalar) is kind
                and type(x) is Tensor
                and x._state == READY
                and x.dtype is dx
                and x.shape == sx
                and x.device is dev
                and cost <= config.inline_limit_ns
            ):
                return op._call((a, b), None, {})
            first, second = (scalar, x._value) if left else (x._value, scalar)
        count_inline()
        if dev.completes_at_enqueue:  # the kernel is a stream's launcher
            run = _call_directly
        else:  # float_errors.run_here, written out (numeric warnings at the user's line)
            ident, modes, run = float_errors.here
            if modes is not caller_modes() or ident != get_ident():
                run = float_errors.enter()
        try:
            value = run(kernel, first, second)
        except Exception as exc:  # the failure belongs to the result
            return op._failed(exc, shape, dtype, dev)
        # Tensor._ready, written out: this is the hottest line.
        t = _new(Tensor)
        t._state = READY
        t._value = value
        t.shape = shape
        t.dtype = dtype
        t.device = dev
        t._op = name
        return t

    call2.__name__ = call2.__qualname__ = name
    register_runner(call2.__code__, _run_by_closure)
    return call2


def _fast_unary(op: Op) -> Callable[[Any], Tensor]:
    name = op.name

    def call1(a: Any, /) -> Tensor:
        hit = op._last1
        if hit is not None and type(a) is Tensor and a._state == READY:
            sa, da, dev, shape, dtype, cost, kernel = hit
            if (
                a.dtype is da
                and a.shape == sa
                and a.device is dev
                and cost <= config.inline_limit_ns
            ):
                count_inline()
                if dev.completes_at_enqueue:  # the kernel is a stream's launcher
                    run = _call_directly
                else:  # float_errors.run_here, written out
                    ident, modes, run = float_errors.here
                    if modes is not caller_modes() or ident != get_ident():
                        run = float_errors.enter()
                try:
                    value = run(kernel, a._value)
                except Exception as exc:
                    return op._failed(exc, shape, dtype, dev)
                t = _new(Tensor)
                t._state = READY
                t._value = value
                t.shape = shape
                t.dtype = dtype
                t.device = dev
                t._op = name
                return t
        return op._call((a,), None, {})

    call1.__name__ = call1.__qualname__ = name
    register_runner(call1.__code__, _run_by_closure)
    return call1


# Where a kernel's numeric warning belongs (see _core/float_errors.py): the op a
# frame runs, and the line that made it if that line is not further out on
# the same stack.
def _run_by_closure(frame: FrameType) -> tuple[str, SourceLine | None]:
    return frame.f_locals["name"], None


def _run_by_method(frame: FrameType) -> tuple[str, SourceLine | None]:
    return frame.f_locals["self"].name, None


def _run_by_task(frame: FrameType) -> tuple[str, SourceLine | None]:
    task = frame.f_locals["self"]
    return task.name, task.site


register_runner(Op._call.__code__, _run_by_method)
register_runner(Op._run_recorded.__code__, _run_by_method)
register_runner(_KernelTask.run.__code__, _run_by_task)


def _checking(kernel: Kernel, name: str, dev: Device, shape: Shape, dtype: np.dtype[Any]) -> Kernel:
    """``kernel``, its result checked against the rule's shape and dtype (and
    the device's array type): a kernel from outside eagerrt, or any kernel on a
    device that asks, can't hand back a wrong result silently. The check made
    for this call's signature is what the inline cache keeps for the next."""

    def checked(*values: Any, **static: Any) -> Any:
        result = kernel(*values, **static)
        _check_result(name, dev, result, shape, dtype)
        return result

    return checked


def _check_result(name: str, dev: Device, result: Any, shape: Shape, dtype: np.dtype[Any]) -> None:
    where = f"op {name!r} on device {dev.name!r}"
    types = dev.native_types
    if types is not None and not isinstance(result, types):
        wanted = " or ".join(t.__name__ for t in types)
        raise DeviceError(
            f"{where}: its kernel returned a {type(result).__name__}, not the device's "
            f"array ({wanted})"
        )
    try:
        got_shape, got_dtype = dev.native_shape_dtype(result)
    except Exception as exc:
        raise DeviceError(
            f"{where}: can't tell the shape and dtype of the {type(result).__name__} its "
            f"kernel returned ({exc}); define {type(dev).__name__}.native_shape_dtype"
        ) from exc
    if tuple(got_shape) != shape or np.dtype(got_dtype) != dtype:
        raise DeviceError(
            f"{where}: its kernel returned {np.dtype(got_dtype)}{list(got_shape)} where the "
            f"op's rule says {dtype}{list(shape)}"
        )


def _host_arrays_out(fn: Kernel) -> Kernel:
    """Wrap a user's CPU kernel so a list, tuple or scalar result becomes an array
    (other ops' kernels, and the fast path, count on numpy arrays)."""

    def kernel(*args: Any, **static: Any) -> Any:
        out = fn(*args, **static)
        if type(out) is np.ndarray or not isinstance(out, _HOST_LIKE):
            return out
        if isinstance(out, Tensor):  # a kernel that called ops: its data, not the tensor
            return out.numpy()
        return np.asarray(out)

    kernel.__name__ = getattr(fn, "__name__", "kernel")
    kernel.__wrapped__ = fn  # type: ignore[attr-defined]
    return kernel


_HOST_LIKE = (Tensor, np.generic, list, tuple, bool, int, float, complex)


def _describe(arg: Any) -> str:
    if type(arg) is Tensor:
        return f"{arg.dtype}[{', '.join(map(str, arg.shape))}]"
    return repr(arg)


def call_error(
    kind: type[UsageError], op: str, args: tuple[Any, ...], static: dict[str, Any], why: str
) -> UsageError:
    """A call-time error naming the op, its operands and the user's line."""
    operands = [_describe(a) for a in args] + [f"{k}={v!r}" for k, v in static.items()]
    site = user_line()
    where = f"\n  at {site}" if site else ""
    return kind(f"{op}({', '.join(operands)}): {why}{where}")


def define_op(
    name: str,
    rule: Rule,
    *,
    cost: Cost | None = None,
    doc: str | None = None,
    operands: int | None = None,
    weak_scalars: bool | None = None,
    replace: bool = False,
) -> Op:
    """Create and register an op; add kernels with ``op.kernel(device)``.

    ``rule(*args, **static)`` returns the result's ``(shape, dtype)`` or raises
    (a ``ValueError`` becomes a :class:`ShapeError`, a ``TypeError`` a
    :class:`DTypeError`, both naming the call). ``cost(shape, dtype, *args,
    **static)`` estimates the kernel's nanoseconds (default:
    :func:`elementwise_cost`). With ``operands=n``, only the first ``n``
    positional arguments are tensors and later ones bind to the rule's next
    parameters (``ert.sum(x, 0)``), and Python numbers become tensors unless
    ``weak_scalars=True`` keeps them weak, as numpy's ufuncs do. ``replace=True``
    lets a new op take the name of an earlier user-defined one (re-running a
    notebook cell); built-in ops can't be replaced, only given new kernels.
    """
    if name in _registry and not (replace and name not in _builtin_names):
        hint = (
            "it is built in: add a kernel with get_op(name).kernel(device) instead"
            if name in _builtin_names
            else "pass replace=True to redefine it (e.g. when re-running a notebook cell)"
        )
        raise UsageError(f"an op named {name!r} is already registered; {hint}")
    op = Op(name, rule, cost=cost, doc=doc, operands=operands, weak_scalars=weak_scalars)
    _registry[name] = op
    return op


_builtin_names: frozenset[str] = frozenset()
_loaded_backends: set[str] = set()
_backends_loading = 0  # > 0 while a backend registers eagerrt's (or a device's) own kernels


@contextlib.contextmanager
def registering_backend_kernels() -> Iterator[None]:
    """Kernels registered inside are a backend's own (as it loads, or ops its
    graph passes make), not a user's: neither wrapped nor checked as user
    kernels are, and graph passes may rewrite their ops."""
    global _backends_loading
    _backends_loading += 1
    try:
        yield
    finally:
        _backends_loading -= 1


def load_backend_module(module: str) -> Any:
    """Import a device's backend module (once: later calls return it from
    ``sys.modules``), its kernels registered as the backend's own (see
    :func:`registering_backend_kernels`)."""
    with registering_backend_kernels():
        loaded = importlib.import_module(module)
    _loaded_backends.add(module)
    return loaded


def seal_builtin_ops() -> None:
    """Mark every op registered so far as built in (called once by eagerrt.ops)."""
    global _builtin_names
    _builtin_names = frozenset(_registry)


def get_op(name: str) -> Op:
    """The registered op called ``name``."""
    try:
        return _registry[name]
    except KeyError:
        raise UsageError(f"no op named {name!r}") from None


def registered_ops() -> dict[str, Op]:
    """A snapshot of every registered op, by name."""
    return dict(_registry)
