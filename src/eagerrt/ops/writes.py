"""Writes: ``t[index] = value`` and the in-place operators (``t += x``).

A tensor has value semantics: a write gives ``t`` a new *version*, and every
tensor computed from ``t`` before the write (views like ``t[0:2]`` included)
keeps the values it had, as do arrays ``t.numpy()`` handed out. Writes are
ordered like MXNet's read/write dependencies:

* a write runs after every earlier op that reads ``t`` (they see the old
  version) and after the version it overwrites is computed;
* every op that reads ``t`` after the write waits for it (it sees the new one).

When ``t`` is ready, nothing reads it in the background and the write is cheap,
it happens right here (the fast path); otherwise ``t`` turns pending until the
write is done. The new version is a copy with the write applied, never a
mutation of memory something else may still read; an elementwise in-place
operator on an array nothing else can see writes into it (:func:`in_place_ufunc`).

A write through a basic-index view (``t[0][1] = 5``) also writes the view's
base, as numpy's does (:func:`_through_view`).

>>> import eagerrt as ert
>>> t = ert.zeros(4, dtype=ert.int32)
>>> before = t + 0
>>> t[1:3] = 7
>>> t += 1
>>> t.numpy().tolist(), before.numpy().tolist()
([1, 8, 8, 1], [0, 0, 0, 0])
"""

from __future__ import annotations

import sys
import threading
import time
import types
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from .._core import (
    ERROR,
    PENDING,
    READY,
    DeviceError,
    DTypeError,
    OutOfBoundsError,
    ShapeError,
    TracingError,
    UsageError,
    ValueRangeError,
    caller_modes,
    config,
    float_errors,
    forget_outstanding,
    profiling,
    register_runner,
    renew_after_fork,
    run_here,
    schedule,
    user_line,
)
from ..tensor import TRACED, Tensor, host_lock
from . import registry
from ._rules import broadcast_shapes
from .indexing import fill_index, index_tensor, indexed_shape, split_index
from .registry import GENERIC, Op, _KernelTask, call_error, define_op, elementwise_cost
from .wrap import wrap

__all__: list[str] = []

_SCALARS = (bool, int, float, complex)

#: Writes issued by several threads at once take turns, so each one applies to
#: the version the previous one left (no lost update), and ``t += x`` reads and
#: replaces ``t`` with no other write between. Reentrant: ``t += x`` holds it
#: around its read and its write. Held while a write is issued, never while
#: blocking on a value (sync mode waits first), not while it runs on a worker.
_write_lock = threading.RLock()
renew_after_fork(__name__, "_write_lock", threading.RLock)
_KIND_ORDER = "biufc"  # bool < int < float < complex: a value may not climb down
_EVERYTHING = (Ellipsis,)


def setitem(t: Tensor, key: Any, value: Any, /) -> None:
    """``t[key] = value``: basic, integer-array and boolean-mask indexes."""
    if key is Ellipsis or (type(key) is tuple and not key):
        template: tuple[Any, ...] = _EVERYTHING
        operands: list[Tensor] = []
    else:
        try:
            template, operands = split_index(key, t.device)  # the index on t's device
        except DTypeError as exc:
            raise call_error(DTypeError, "setitem", (t,), {"index": key}, str(exc)) from None
    value = _check_value(t, template, operands, value, key)
    write(t, "setitem", _setitem, value, operands, template=template)


def replace(t: Tensor, result: Tensor, op: str) -> Tensor:
    """Make ``result`` (computed from ``t``) ``t``'s next version: ``t += x``."""
    if result.shape != t.shape:
        raise call_error(
            ShapeError,
            op,
            (t, result),
            {},
            f"the result's shape {result.shape} is not the tensor's {t.shape}; an "
            "in-place operator can't change a tensor's shape",
        )
    _check_cast(t, result.dtype, op, (t, result))
    write(t, op, _assign, result, [])
    return t


def _check_cast(t: Tensor, dtype: np.dtype[Any], op: str, args: tuple[Any, ...]) -> None:
    if dtype != t.dtype and not np.can_cast(dtype, t.dtype, "same_kind"):
        raise call_error(
            DTypeError,
            op,
            args,
            {},
            f"can't write {dtype} values into a {t.dtype} tensor (it would lose their "
            f"kind); cast them first with .astype({str(t.dtype)!r})",
        )


def _check_value(
    t: Tensor, template: tuple[Any, ...], operands: list[Tensor], value: Any, index: Any
) -> Any:
    """The value as a Python scalar or a tensor, checked against the target."""
    args = (t, value)

    def refused(error: type[UsageError], why: str) -> UsageError:
        return call_error(error, "setitem", args, {"index": index}, why)

    if isinstance(value, _SCALARS):
        kind = "b" if type(value) is bool else type(value).__name__[0]  # i, f or c
        if _KIND_ORDER.index(kind) > _KIND_ORDER.index(t.dtype.kind.replace("u", "i")):
            raise refused(
                DTypeError, f"can't write a Python {type(value).__name__} into a {t.dtype} tensor"
            )
        if isinstance(value, int) and kind == "i" and t.dtype.kind in "iu":
            info = np.iinfo(t.dtype)
            if not info.min <= value <= info.max:
                raise refused(ValueRangeError, f"{value} does not fit {t.dtype}")
    else:
        if type(value) is not Tensor:
            try:
                value = wrap(value, device=t.device)
            except UsageError as exc:
                raise refused(DTypeError, str(exc)) from None
        if value.device is not t.device:
            raise refused(
                DeviceError, f"the value is on {value.device.name}, the tensor on {t.device.name}"
            )
        _check_cast(t, value.dtype, "setitem", args)
    for o in operands:
        if o.device is not t.device:
            raise refused(DeviceError, "index on another device")
    # The target's shape, when the index alone decides it (a boolean mask's
    # data decides it otherwise, and the kernel checks the value then).
    masks = [o for o in operands if o.dtype.kind == "b"]
    if masks and len(masks) < len(operands):
        return value  # masks and integer arrays broadcast by the mask's data: checked on run
    stand_ins = [np.zeros(o.shape, dtype=bool) if o.dtype.kind == "b" else o for o in operands]
    try:
        target = indexed_shape(t.shape, template, stand_ins)
        if not masks and type(value) is Tensor and broadcast_shapes(value.shape, target) != target:
            raise ShapeError(f"a value of shape {value.shape} can't fill shape {target}")
    except (ShapeError, OutOfBoundsError) as exc:
        raise refused(type(exc), str(exc)) from None
    return value


def _same_as_target(target: Any, *_: Any, **__: Any) -> tuple[tuple[int, ...], np.dtype[Any]]:
    return target.shape, target.dtype


def _setitem_generic(old: Any, value: Any, *arrays: Any, template: tuple[Any, ...]) -> Any:
    # A 0-d result may be a numpy scalar (numpy's ops give those), which takes no
    # item assignment: its copy as a 0-d array does.
    new = np.array(old) if isinstance(old, np.generic) else old.copy()
    new[fill_index(template, arrays)] = value
    return new


def _assign_generic(old: Any, value: Any) -> Any:
    return value if value.dtype == old.dtype else value.astype(old.dtype)


# Writes are ops a device gives kernels to, like any other
# (``ert.get_op("setitem").register_kernel("mydev", kernel)``). A write kernel
# returns the tensor's next version as a new array, never changing ``old``
# (earlier versions may still be read); the generic ones use numpy's API.
_setitem = define_op(
    "setitem",
    _same_as_target,
    doc="``t[index] = value`` as a write's kernel sees it: ``setitem(old, value, "
    "*index_arrays, template=...)`` is the next version, ``value`` at the index "
    "(``template`` holds the index, the index arrays in its slots).",
)
_setitem.register_kernel(GENERIC, _setitem_generic)
_assign = define_op(
    "assign",
    _same_as_target,
    doc="A write of a whole tensor (``t += x``) as its kernel sees it: "
    "``assign(old, value)`` is the next version, ``value`` in ``old``'s dtype.",
)
_assign.register_kernel(GENERIC, _assign_generic)


def write(t: Tensor, name: str, op: Op, value: Any, operands: list[Tensor], **static: Any) -> None:
    """Give ``t`` the version ``op``'s kernel for ``t``'s device makes of
    ``(old, value, *operands, **static)``, ordered after every earlier reader
    of ``t`` and before every later one; through a view, its base too
    (:func:`_through_view`). ``name`` names the write in errors and profiles."""
    _refuse_stream_device(t, name, value)
    try:
        kernel = op._kernel_for(t.device)
    except DeviceError as exc:
        raise call_error(DeviceError, name, (t, value), static, str(exc)) from None
    if config.sync_active:  # wait before taking the lock: a kernel may issue writes
        for v in (t, value, *operands, *[r.result for r in list(getattr(t, "_readers", ()))]):
            if type(v) is Tensor and v._state == PENDING:
                v.wait()
    w = _Write(t, name, kernel, value, operands, static)
    with _write_lock:
        if getattr(t, "_view_of", None) is not None:
            _through_view(w)
        else:
            _write(w)
        t._writes = getattr(t, "_writes", 0) + 1


class _Write(NamedTuple):
    """One write (see :func:`write`), as the steps below pass it on."""

    t: Tensor
    name: str
    kernel: Callable[..., Any]
    value: Any
    operands: list[Tensor]
    static: dict[str, Any]


def _through_view(w: _Write) -> None:
    """A write to ``t``, a basic-index view of ``base``, reaches ``base`` (as
    numpy's and array_api_strict's do: scikit-learn adds to a covariance's
    diagonal through a view): ``t`` is refreshed (:func:`_refresh_view`), then
    written, then ``base[index] = t`` (itself propagated if ``base`` is a view).
    Each is an ordinary ordered write: pending values on either side wait as
    usual. Writes to ``base`` don't reach its views (value semantics)."""
    t = w.t
    _refresh_view(t)
    base, index, _ = t._view_of
    _write(w)
    setitem(base, index, t)
    t._view_of = (base, index, base._writes)


def _refresh_view(t: Tensor) -> None:
    """If ``t`` is a view whose base was written since it last matched it, make
    ``base[index]`` (as it is now) ``t``'s version first: what numpy's view would
    show to the write about to happen (hold ``_write_lock``)."""
    view = getattr(t, "_view_of", None)
    if view is None:
        return
    base, index, seen = view
    if getattr(base, "_writes", 0) == seen:
        return
    _write(_Write(t, "view", _assign._kernel_for(t.device), index_tensor(base, index), [], {}))
    t._view_of = (base, index, base._writes)
    t._writes = getattr(t, "_writes", 0) + 1


def in_place(t: Tensor, compute: Callable[[], Tensor], op: str) -> Tensor:
    """``t op= x``: ``compute()`` reads ``t`` and its result replaces ``t``, with
    no other thread's write in between (it would be lost)."""
    _refuse_stream_device(t, op, None)
    with _write_lock:
        _refresh_view(t)  # a view computes from what its base shows now
        return replace(t, compute(), op)


def _references(holder: Any) -> int:
    """How many references ``holder._value`` has, counted as :data:`_ALONE` was."""
    return sys.getrefcount(holder._value)


#: The count :func:`_references` gives for an array held by one object alone
#: (measured: what the interpreter counts for locals and arguments varies by version).
_ALONE = _references(types.SimpleNamespace(_value=np.zeros(1)))


def in_place_ufunc(t: Tensor, op: Op, other: Any, name: str) -> Tensor:
    """``t op= other`` for an elementwise op: into ``t``'s own buffer where
    nothing else can see it (:func:`_into_own_buffer`), else as a new version
    (:func:`in_place`)."""
    with _write_lock:
        if _into_own_buffer(t, op, other):
            return t
        return in_place(t, lambda: op.call2(t, other), name)


def _into_own_buffer(t: Tensor, op: Op, other: Any) -> bool:
    """``t op= other`` computed into ``t``'s array itself, numpy's ``out=``:
    no second buffer, no copy (numpy's own ``a += 1`` speed). Only where that
    can't break value semantics or ordering: ``t`` and ``other`` ready on a
    device whose kernel is the numpy ufunc, no task reading ``t``, its array
    its own (not a view) and referenced by ``t`` alone (no view of it, no array
    handed out, no plan keeping it), and the result of ``t``'s shape and
    dtype. Says whether it wrote (else nothing happened)."""
    if t._state != READY or profiling.active is not None or getattr(t, "_readers", None):
        return False
    if getattr(t, "_view_of", None) is not None:  # its base must be written too
        return False
    if type(other) is Tensor:
        if other._state != READY or other.device is not t.device:
            return False
        native = other._value
    elif type(other) in _SCALARS:
        native = other
    else:
        return False
    try:
        kernel = op._kernel_for(t.device)
    except DeviceError:  # the general path says so, at the user's line
        return False
    if not isinstance(kernel, np.ufunc) or kernel.nin != 2:
        return False
    try:
        shape, dtype = op.rule(t, other)
    except Exception:  # the general path raises it, at the user's line
        return False
    if shape != t.shape or dtype != t.dtype:
        return False
    with host_lock(t):  # no thread hands the array out between the count and the write
        return _write_into(t, kernel, native)


def _write_into(t: Tensor, kernel: Any, native: Any) -> bool:
    """The count and the write of :func:`_into_own_buffer` (under t's host lock)."""
    # The context for numeric warnings first: between the count and the write,
    # as few bytecodes as can be (another thread could take a view of the
    # array meanwhile; views are made without a lock).
    run = float_errors.enter()
    t._forget_host()  # the cache of the array t.numpy() hands out (the array itself)
    # One reference more than a lone tensor's array has is a view, an array
    # handed out or a plan's constant, which must keep its values. (Counted
    # before this function names the array: that would be one more.)
    if _references(t) > _ALONE:
        return False
    array = t._value
    if type(array) is not np.ndarray or array.base is not None or not array.flags.owndata:
        return False
    # Read-only because t.numpy() handed it out once; nobody holds it now.
    array.flags.writeable = True
    run(kernel, array, native, array)  # (a ufunc's third positional is out=)
    t._writes = getattr(t, "_writes", 0) + 1  # views of t must see it was written
    return True


def _refuse_stream_device(t: Tensor, op: str, value: Any) -> None:
    # Versions, readers and holds here are host values; a stream device's
    # values live on its streams, where writes would need their own ordering.
    if t.device.completes_at_enqueue:
        raise call_error(
            DeviceError,
            op,
            (t,) if value is None else (t, value),
            {},
            f"in-place writes to {t.device.name} tensors are not supported yet; make a new "
            "tensor instead (ert.where, ert.concat, arithmetic), or write on the host: "
            "t.to('cpu')",
        )


def _write(w: _Write) -> None:
    t, name, kernel, value, operands, static = w
    if t._state == TRACED or any(
        type(o) is Tensor and o._state == TRACED for o in (value, *operands)
    ):
        _trace_write(w)
        return
    if t._state == ERROR:
        return  # a failed tensor stays failed: its readers learn why on await
    inputs = [o for o in (value, *operands) if type(o) is Tensor]
    failed = any(o._state == ERROR for o in inputs)  # the task passes the failure on
    readers = [r.result for r in list(getattr(t, "_readers", ()))]
    # Not t itself (`t[k] = t`, `t += t`): it stays pending until this very
    # write completes it; the hold below waits for the version it reads.
    waits = [v for v in (*inputs, *readers) if v._state == PENDING and v is not t]
    cost = elementwise_cost(t.shape, t.dtype)
    if config.sync_active:
        for v in waits:
            v.wait()
        waits = []
        if t._state == PENDING:
            t.wait()
    fits_inline = cost <= config.inline_limit_ns or config.sync_active
    recording = profiling.active  # read once: another thread may stop it
    if t._state == READY and not waits and not failed and fits_inline:
        if recording is not None:
            _write_now_recorded(recording, w)
        else:
            _write_now(w)
        return
    task = _WriteTask(t, cost, t.device.executor)
    task.args = (t, value, *operands)
    task.compute = (lambda *v: kernel(*v, **static)) if static else kernel
    task.modes = caller_modes()
    task.name = name
    task.site = user_line()
    for o in inputs:  # a later write to the value must wait for this read
        if o is not t:
            o._track_reader(task)
    if recording is not None:  # its event depends on the value and t's old version
        task.compute = recording.launched(
            name, t.device.name, task.compute, (value, *operands, t), t, task.site, cost
        )
    started, wait_for = t._begin_version()
    if not started:
        # Its producer failed on another thread since the check above: a
        # failed tensor stays failed.
        for o in inputs:
            if o is not t:
                o._untrack_reader(task)
        return
    if wait_for is not None:
        waits.append(wait_for)
    t._forget_host()
    schedule(task, waits)


_write_ops: dict[tuple[str, Callable[..., Any]], Op] = {}


def _trace_write(w: _Write) -> None:
    """Inside ``ert.function``: the write becomes a node computing the new
    version, and ``t`` (a traced tensor) stands for it from now on. Earlier
    reads recorded the old version, so the graph keeps the write's ordering."""
    t, name, kernel, value, operands, static = w
    if t._state != TRACED:
        raise TracingError(
            f"{name}: writing a traced value into a tensor made outside the compiled "
            "function (a weight or a global) would change it for every later call\n"
            f"  at {user_line()}\nCopy it first inside the function (t = x + 0), or "
            "return the new value instead."
        )
    op = _write_ops.get((name, kernel))
    if op is None:
        op = _write_ops[(name, kernel)] = Op(name, _same_as_target)
        op.register_kernel(GENERIC, kernel)
    recorder = registry._trace_recorder
    assert recorder is not None  # set by eagerrt.graph.tracing, which made t
    new = recorder(op, (t, value, *operands), static, t.shape, t.dtype, t.device)
    t._value = new._value


def _write_now(w: _Write) -> None:
    t, name, kernel, value, operands, static = w
    native = value._value if type(value) is Tensor else value
    try:
        new = run_here(lambda: kernel(t._value, native, *[o._value for o in operands], **static))
    except IndexError as exc:  # known now, so said now, at the user's line
        raise call_error(OutOfBoundsError, name, (t,), static, str(exc)) from None
    except ValueError as exc:
        raise call_error(ShapeError, name, (t,), static, str(exc)) from None
    t._value = new
    t._forget_host()


def _write_now_recorded(recording: profiling.Recording, w: _Write) -> None:
    """:func:`_write_now`, recorded: its inputs are the value (and index
    tensors) and ``t``'s old version; later readers of ``t`` depend on it."""
    t = w.t
    start = time.perf_counter_ns()
    failed = True
    try:
        _write_now(w)
        failed = False
    finally:
        recording.record(
            w.name,
            device=t.device.name,
            start_ns=start,
            end_ns=time.perf_counter_ns(),
            source=user_line(),
            inputs=(w.value, *w.operands, t),
            outputs=() if failed else (t,),
            failed=failed,
        )


class _WriteTask(_KernelTask):
    """Compute ``t``'s next version from its current one (its first argument,
    read when the task runs) and complete ``t`` with it."""

    __slots__ = ()

    def run(self) -> None:
        if self.result._state == ERROR:  # an earlier version failed; so did this one
            return
        super().run()

    def _run_and_forget(self) -> None:
        try:
            self.run()
        finally:
            # Another write may keep the tensor pending: then it stays outstanding.
            if self.result._state != PENDING:
                forget_outstanding(self.result)


# A numeric warning of a write run at its call names the op, at the user's line.
register_runner(_write_into.__code__, lambda frame: (frame.f_locals["kernel"].__name__, None))
register_runner(_write_now.__code__, lambda frame: (frame.f_locals["name"], None))
