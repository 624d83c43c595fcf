"""Tensor: an awaitable n-d array whose metadata is known at once.

A Tensor *is* an :class:`~eagerrt.lowlevel.AsyncValue` (one object per op result,
which keeps the fast path cheap) carrying the result's ``shape``, ``dtype`` and
``device``, computed synchronously when the op was called. Its data arrives
asynchronously: ``await t`` in async code, ``t.numpy()`` / ``np.asarray(t)`` /
``float(t)`` in plain sync code (no event loop needed).

Arithmetic operators and methods such as ``t.sum()`` are installed by
:mod:`eagerrt.ops` (ops are defined there, once).
"""

from __future__ import annotations

import contextlib
import html
import math
import threading
from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from ._core import (
    ERROR,
    PENDING,
    READY,
    DTypeError,
    Failure,
    KernelError,
    ShapeError,
    UsageError,
    VersionedValue,
    WaitTimeoutError,
    renew_after_fork,
    wait_async,
)

if TYPE_CHECKING:
    from .devices.base import Device

__all__ = ["TRACED", "Operand", "Shaped", "Tensor"]

#: A fourth state, beside the AsyncValue's pending/ready/error: a symbolic
#: tensor made while ``ert.function`` traces; its ``_value`` is the graph value
#: it stands for (:class:`eagerrt.graph.ir.Value`), never data.
TRACED = 3

#: What an op accepts where a tensor goes: a tensor, numpy data, a Python number.
Operand = Any

_new = object.__new__


def host_lock(t: Tensor) -> threading.Lock:
    """The lock under which ``t``'s array is first handed out as read-only, and
    under which a write into that same array (``t += 1`` in place,
    ops/writes.py) checks that nobody holds it and writes: so no reader gets
    the array between the check and the write. Striped by tensor: a long
    write holds up only first reads of the tensors sharing its stripe."""
    return _host_locks[(id(t) >> 4) % len(_host_locks)]


_host_locks = tuple(threading.Lock() for _ in range(16))
_NO_LOCK = contextlib.nullcontext()
renew_after_fork(__name__, "_host_locks", lambda: tuple(threading.Lock() for _ in range(16)))


class Shaped:
    """``ndim``, ``size`` and ``nbytes`` of anything with a ``shape`` and a
    ``dtype`` (a tensor, a traced graph's value)."""

    __slots__ = ()
    shape: tuple[int, ...]
    dtype: np.dtype[Any]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize


class Tensor(VersionedValue, Shaped):
    """The result of an eagerrt op: metadata now, data when ready.

    >>> import eagerrt as ert
    >>> t = ert.ones((2, 3), dtype="float32") * 2
    >>> t.shape, t.dtype, t.device.name
    ((2, 3), dtype('float32'), 'cpu')
    >>> t.numpy()
    array([[2., 2., 2.],
           [2., 2., 2.]], dtype=float32)
    """

    # Born-ready tensors (the fast path) leave ``_waiters`` and the version
    # slots (``_holds``, ``_host``, ``_readers``: see ``_core/versions.py``)
    # unset: none is read before it is written (each is probed with
    # getattr/try), and every assignment saved matters on the hottest line.
    # Writes (``t[i] = v``, ``t += 1``, ``eagerrt.ops.writes``) give a tensor
    # new versions over time.
    #
    # A basic-index view (``t[0]``, ``t[1:3]``) keeps ``_view_of``: (its base,
    # the index, the base's ``_writes`` when the view last matched it), so that
    # a write through the view also writes its base; ``_writes`` counts a
    # tensor's writes. Both unset on other tensors.
    __slots__ = ("_op", "_view_of", "_writes", "device", "dtype", "shape")

    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    device: Device
    _op: str
    _host: np.ndarray
    _view_of: tuple[Tensor, Any, int]
    _writes: int

    # Tensors compare elementwise (ops install __eq__) yet hash by identity, as
    # PyTorch's do: asyncio's combinators (gather, wait, as_completed) key their
    # futures by the awaitables given, and a dict or set of tensors finds each
    # one by identity before any == is tried. numpy's protocols
    # (__array_ufunc__, __array_function__) are installed by eagerrt.ops.interop.
    __hash__ = object.__hash__

    def __init__(self) -> None:
        raise TypeError("Tensors are made by ops: use eagerrt.asarray(data) to wrap existing data")

    @classmethod
    def _ready(
        cls, value: Any, shape: tuple[int, ...], dtype: np.dtype[Any], device: Device, op: str
    ) -> Tensor:
        t = _new(cls)
        t._state = READY
        t._value = value
        t.shape = shape
        t.dtype = dtype
        t.device = device
        t._op = op
        return t

    @classmethod
    def _pending(
        cls, shape: tuple[int, ...], dtype: np.dtype[Any], device: Device, op: str
    ) -> Tensor:
        t = cls._ready(None, shape, dtype, device, op)
        t._state = PENDING
        t._waiters = None
        return t

    @classmethod
    def _failed(
        cls, failure: Failure, shape: tuple[int, ...], dtype: np.dtype[Any], device: Device, op: str
    ) -> Tensor:
        t = cls._ready(failure, shape, dtype, device, op)
        t._state = ERROR
        return t

    # -- metadata ------------------------------------------------------------
    @property
    def op(self) -> str:
        """The name of the op that produced this tensor."""
        return self._op

    # -- readiness -----------------------------------------------------------
    def is_ready(self) -> bool:
        """True once the data (or the failure) is there; never blocks."""
        return self._state != PENDING

    @property
    def value(self) -> np.ndarray:
        """The data, read-only, on the host (raises unless available, like numpy())."""
        if self._state == PENDING:
            raise UsageError(
                f"tensor from {self._op!r} is still pending: await it, or call .numpy()"
            )
        return self._host_value()

    def set_value(self, value: Any) -> None:
        raise UsageError("a tensor is completed by the op that made it, not by set_value")

    def set_error(self, error: BaseException) -> None:
        raise UsageError("a tensor is completed by the op that made it, not by set_error")

    @property
    def error(self) -> KernelError:
        """The failure as a :class:`KernelError` (marks it observed)."""
        if self._state != ERROR:
            raise UsageError(f"tensor from {self._op!r} is {self.state}, not an error")
        return self._value.to_exception(self._op)

    # -- reading the data ----------------------------------------------------
    def _native(self) -> Any:
        """The device-native value; the tensor must be available."""
        if self._state == ERROR:
            raise self._value.to_exception(self._op)
        if self._state == TRACED:
            raise self._value.read_error()
        return self._value

    def __await__(self) -> Generator[Any, None, Any]:
        if self._state == PENDING:
            yield from wait_async(self)
        device = self.device
        if device.completes_at_enqueue and self._state == READY:
            # Ready for device ops since it was enqueued; the host waits for its
            # event, then gets the device's own array (a cupy.ndarray on cuda).
            done = device.host_ready(self._value)  # type: ignore[attr-defined]
            if done._state == PENDING:
                yield from wait_async(done)
            return device.native_result(self._value, self._op)  # type: ignore[attr-defined]
        return self._host_value()

    def _host_value(self) -> np.ndarray:
        try:
            return self._host  # read before: no flags to check, nothing to copy
        except AttributeError:
            pass
        # No lock against writes that swap the version while we convert it:
        # writers replace the value (or state) first and forget the cache
        # second; so we cache first and check second, and a cache of a
        # replaced version never outlives the check or the forget. A host
        # array is read and cached under the tensor's host lock, so an in-place
        # write into that very array (which counts its holders and writes
        # under the lock) can't slip between the read and the cache.
        while True:
            lock = host_lock(self) if type(self._value) is np.ndarray else _NO_LOCK
            with lock:
                state, source = self._state, self._value
                if type(source) is Failure:  # the value is set before the state
                    raise source.to_exception(self._op)
                if state == TRACED:
                    raise source.read_error()
                value = source
                if type(value) is not np.ndarray:
                    value = np.asarray(self.device.to_numpy(value))
                # Handed-out arrays are read-only: they may share memory with
                # other tensors (views) that pending ops still read.
                if value.flags.writeable:
                    value.flags.writeable = False
                self._host = value
            if self._value is source and self._state == state:
                return value
            self._forget_host()  # replaced meanwhile: read the version now current

    def numpy(self, timeout: float | None = None) -> np.ndarray:
        """Block until ready and return the data as a read-only numpy array.

        Raises :class:`KernelError` if the op (or one it depends on) failed, and
        :class:`WaitTimeoutError` if ``timeout`` seconds pass first.
        """
        if self._state == PENDING and not self.wait(timeout):
            raise WaitTimeoutError(
                f"tensor from {self._op!r} not ready after {timeout} s; "
                "in async code, `await` it instead of blocking"
            )
        return self._host_value()

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        value = self.numpy()
        if copy is False and dtype is not None and np.dtype(dtype) != value.dtype:
            raise ValueError("unable to convert to the requested dtype without a copy")
        if dtype is not None:
            value = value.astype(dtype, copy=bool(copy))
        elif copy:
            value = value.copy()
        return value

    # -- DLPack: zero-copy exchange with numpy, PyTorch, CuPy, ... ------------
    def __dlpack__(
        self,
        /,
        *,
        stream: Any = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        """Export the data as a DLPack capsule (blocks until ready, like numpy();
        on a stream device, until the device has made it: a cupy array's
        capsule on cuda).

        The capsule shares this tensor's memory, marked read-only where the
        consumer understands DLPack 1.0's flag; a consumer of the older
        protocol gets a copy (eagerrt never hands out writable shared memory).
        """
        native = self._made_native()
        if isinstance(native, np.generic):  # a 0-d result held as a numpy scalar
            native = np.asarray(native)
        given = {"stream": stream, "max_version": max_version, "dl_device": dl_device, "copy": copy}
        kwargs = {name: value for name, value in given.items() if value is not None}
        try:
            return native.__dlpack__(**kwargs)
        except BufferError:
            if copy is False or not hasattr(native, "copy"):
                raise
            return native.copy().__dlpack__(**kwargs)  # an old consumer: no read-only flag

    def __dlpack_device__(self) -> tuple[int, int]:
        """``(device type, device id)`` as DLPack numbers them (1, 0 is the CPU)."""
        if self.device.name == "cpu":
            return (1, 0)
        return tuple(self._made_native().__dlpack_device__())

    def _made_native(self) -> Any:
        """The device-native array once it is made (blocks): what DLPack exports.
        A stream device's value is ready once enqueued; its array is made when
        the device's event says so."""
        if self._state == PENDING:
            self.wait()
        device = self.device
        if device.completes_at_enqueue and self._state == READY:
            device.host_ready(self._value).wait()  # type: ignore[attr-defined]
            return device.native_result(self._value)  # type: ignore[attr-defined]
        return self._native()

    def item(self) -> Any:
        """The single element as a Python scalar (blocks until ready)."""
        if self.size != 1:
            raise ShapeError(
                f"item() needs a tensor with one element, this one has shape {self.shape}"
            )
        return self.numpy().item()

    def tolist(self) -> Any:
        return self.numpy().tolist()

    def _scalar(self, kind: str) -> Any:
        # Any one-element tensor converts, as in PyTorch (numpy 2.4 wants 0-d),
        # so `float(loss)` works whatever the loss's shape; the error is numpy's type.
        if self.size != 1:
            raise DTypeError(
                f"only one-element tensors convert to {kind}; this one has shape "
                f"{self.shape} (use .numpy() for the whole array)"
            )
        return self.numpy().item()

    def __float__(self) -> float:
        return float(self._scalar("float"))

    def __int__(self) -> int:
        return int(self._scalar("int"))

    def __complex__(self) -> complex:
        return complex(self._scalar("complex"))

    def __bool__(self) -> bool:
        if self.size != 1:
            raise ShapeError(
                f"the truth value of a tensor of shape {self.shape} is ambiguous; "
                "reduce it first, e.g. with .max() or .min()"
            )
        return bool(self.numpy().item())

    def __index__(self) -> int:
        if self.dtype.kind not in "iu":
            raise DTypeError(f"only integer tensors can be used as an index, not {self.dtype}")
        return int(self._scalar("int"))

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self) -> Iterator[Tensor]:
        if not self.shape:
            raise TypeError("iteration over a 0-d tensor")
        for i in range(self.shape[0]):
            yield self[i]

    if TYPE_CHECKING:
        # Installed by eagerrt.ops.tensor_methods (ops make tensors and tensors
        # call ops); declared here so type checkers and IDEs know them.
        def __add__(self, other: Operand) -> Tensor: ...

        # The other arithmetic operators and the comparisons take and give the same.
        __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = __add__
        __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __pow__ = __rpow__ = __add__
        __matmul__ = __rmatmul__ = __lt__ = __le__ = __gt__ = __ge__ = __add__

        def __neg__(self) -> Tensor: ...

        __pos__ = __abs__ = __invert__ = __neg__

        def __eq__(self, other: object) -> Tensor: ...  # type: ignore[override]
        def __ne__(self, other: object) -> Tensor: ...  # type: ignore[override]
        def __and__(self, other: Operand, /) -> Tensor: ...

        # The other bitwise operators and the in-place ones (all positional-only).
        __rand__ = __or__ = __ror__ = __xor__ = __rxor__ = __and__
        __lshift__ = __rlshift__ = __rshift__ = __rrshift__ = __and__
        __iadd__ = __isub__ = __imul__ = __itruediv__ = __ifloordiv__ = __imod__ = __and__
        __ipow__ = __imatmul__ = __iand__ = __ior__ = __ixor__ = __ilshift__ = __irshift__ = __and__

        def __getitem__(self, key: Any, /) -> Tensor: ...
        def __setitem__(self, key: Any, value: Operand, /) -> None: ...
        def __array_namespace__(self, /, *, api_version: str | None = None) -> Any: ...
        def to_device(self, device: str | Device, /, *, stream: Any = None) -> Tensor: ...
        @property
        def mT(self) -> Tensor: ...
        def reshape(self, *shape: Any) -> Tensor: ...
        def transpose(self, *axes: Any) -> Tensor: ...
        @property
        def T(self) -> Tensor: ...
        def astype(self, dtype: Any, copy: bool = True) -> Tensor: ...
        def to(self, device: str | Device) -> Tensor: ...
        def mean(
            self, axis: Any = None, dtype: Any = None, out: None = None, keepdims: bool = False
        ) -> Tensor: ...

        sum = prod = mean

        def var(
            self,
            axis: Any = None,
            dtype: Any = None,
            out: None = None,
            ddof: float = 0,
            keepdims: bool = False,
        ) -> Tensor: ...

        std = var

        def max(self, axis: Any = None, out: None = None, keepdims: bool = False) -> Tensor: ...
        def min(self, axis: Any = None, out: None = None, keepdims: bool = False) -> Tensor: ...
        def argmax(
            self, axis: int | None = None, out: None = None, *, keepdims: bool = False
        ) -> Tensor: ...

        argmin = argmax

    # -- display -------------------------------------------------------------
    # Display never blocks and never marks a failure observed: a notebook shows
    # a pending tensor as pending, and an unread error is still raised by
    # synchronize() after it was shown.
    @property
    def state(self) -> str:
        """``"pending"``, ``"ready"``, ``"error"``, or ``"traced"`` inside ``ert.function``.

        >>> import eagerrt as ert
        >>> ert.ones(2).state
        'ready'
        """
        return "traced" if self._state == TRACED else super().state

    def _display_meta(self) -> str:
        dims = ", ".join(map(str, self.shape))
        meta = f"shape=({dims}{',' if len(self.shape) == 1 else ''}), dtype={self.dtype}"
        if self.device.name != "cpu":  # like PyTorch: the default device goes unsaid
            meta += f", device={self.device.name}"
        return meta

    def _display_state(self, state: int) -> str:
        """What stands for the values while there are none (the state, as text)."""
        if state == PENDING:
            return "pending"
        if state == ERROR:
            return f"error: {self._value.op} failed: {type(self._value.cause).__name__}"
        return f"traced {self._value.name}"

    def __repr__(self) -> str:
        """Shape, dtype, device (unless cpu) and the values, or the state instead.

        >>> import eagerrt as ert
        >>> ert.arange(3.0) * 2
        Tensor([0., 2., 4.], shape=(3,), dtype=float64)

        Big arrays are summarized as numpy summarizes them (``np.set_printoptions``).
        """
        state = self._state  # read once: another thread may complete it meanwhile
        if state != READY:
            return f"Tensor(<{self._display_state(state)}>, {self._display_meta()})"
        body = np.array2string(np.asarray(self._host_value()), separator=", ", prefix="Tensor(")
        return f"Tensor({body}, {self._display_meta()})"

    def _repr_html_(self) -> str:
        """Jupyter's rich display: a one-line summary and the values or the state."""
        state = self._state
        dims = ", ".join(map(str, self.shape))
        facts = [
            ("shape", f"({dims}{',' if len(self.shape) == 1 else ''})"),
            ("dtype", str(self.dtype)),
            ("device", self.device.name),
            ("op", self._op),
        ]
        if state == READY:
            text = np.array2string(np.asarray(self._host_value()), separator=", ")
            label, colour = "ready", "#2a7d2a"
        elif state == PENDING:
            text, label, colour = "", "pending", "#b07800"
        elif state == ERROR:
            failure = self._value
            text = f"op {failure.op!r} failed: {type(failure.cause).__name__}: {failure.cause}"
            if failure.site is not None:
                text += f"\ncreated at {failure.site}"
            label, colour = "error", "#b00020"
        else:
            text, label, colour = f"graph value {self._value.name}", "traced", "#555"
        cells = "".join(
            f"<td><b>{name}</b> <code>{html.escape(value)}</code></td>" for name, value in facts
        )
        badge = f'<td style="color:{colour}"><b>{label}</b></td>'
        pre = f'<pre style="margin:0.3em 0">{html.escape(text)}</pre>' if text else ""
        return (
            '<div class="eagerrt-tensor"><table style="border-collapse:collapse">'
            f"<tr><td><b>Tensor</b></td>{badge}{cells}</tr></table>{pre}</div>"
        )

    def __str__(self) -> str:
        if self._state == READY:
            return str(self._host_value())
        return repr(self)

    def __format__(self, spec: str) -> str:
        if spec and self.size == 1:
            return format(self.item(), spec)
        return format(str(self), spec)
