"""eagerrt's errors, split by whose fault they are.

* Call-time errors (:class:`UsageError` and its subclasses): the user's call was
  wrong (a shape, a dtype, an argument). Raised synchronously at the call, naming
  the op, its operands and the user's own line. Each is also a ``ValueError`` or
  ``TypeError`` so code written for numpy keeps catching them.
* Run-time errors (:class:`KernelError`): a kernel failed on the data. The failing
  op's result, and every result depending on it, holds the failure; it is raised on
  ``await`` / ``numpy()`` / :func:`eagerrt.synchronize`, naming the failing op and
  the line that created it, with the kernel's own exception chained.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import traceback
import types
from typing import NamedTuple

from .forking import renew_after_fork

__all__ = [
    "ArgumentError",
    "BatchError",
    "DTypeError",
    "DeviceError",
    "EagerError",
    "Failure",
    "KernelError",
    "OutOfBoundsError",
    "PipelineError",
    "ShapeError",
    "TracingError",
    "SourceLine",
    "UsageError",
    "ValueRangeError",
    "WaitTimeoutError",
    "WeightsError",
    "take_unobserved",
    "user_line",
]

# Every file under the installed package counts as "ours" when looking for the
# user's line and when trimming tracebacks.
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


class EagerError(Exception):
    """Base class of every error eagerrt raises."""


class UsageError(EagerError):
    """The call was wrong; raised at the call site."""


class ArgumentError(UsageError, ValueError):
    """An argument's value is wrong (a negative seed, a copy that can't be avoided)."""


class ShapeError(ArgumentError):
    """Operand shapes (or an axis, or an index) don't fit the op."""


class OutOfBoundsError(ShapeError, IndexError):
    """An index or an axis is out of range for the tensor's shape (like numpy's
    ``AxisError``, both a ``ValueError`` and an ``IndexError``)."""


class DTypeError(UsageError, TypeError):
    """Operand dtypes or argument types don't fit the op."""


class ValueRangeError(UsageError, OverflowError):
    """A Python number does not fit the tensor's dtype (``int8_tensor + 300``)."""


class DeviceError(UsageError, ValueError):
    """Operands live on different devices, or a device is unknown."""


class TracingError(UsageError):
    """Graph mode (``ert.function``) met something it can't trace: a tensor's
    value asked for while tracing (Python control flow on it, ``await``,
    ``float(t)``), or an op whose result shape depends on data."""


class KernelError(EagerError, RuntimeError):
    """A kernel failed at run time; raised when its result is read.

    ``__cause__`` is the kernel's own exception; ``kernel_traceback`` says where
    in the kernel it was raised (also shown as a note), eagerrt's frames left out.
    """

    kernel_traceback: traceback.StackSummary


#: KernelError subclasses that are also their causes' types, by cause type.
_KERNEL_ERRORS: dict[type[BaseException], type[KernelError]] = {}


def kernel_error_type(cause: type[BaseException]) -> type[KernelError]:
    """The KernelError to raise for a kernel's ``cause``: one that is also of
    the cause's type, so that the ``except`` clauses libraries write for what
    numpy raises (``np.linalg.LinAlgError``, ``ValueError``) catch it; plain
    KernelError where the two types can't be combined (a different instance
    layout, a constructor or ``str`` of its own)."""
    found = _KERNEL_ERRORS.get(cause)
    if found is not None:
        return found
    found = KernelError
    if issubclass(cause, Exception) and not issubclass(KernelError, cause):
        try:
            both = type(
                "KernelError",
                (KernelError, cause),
                {"__module__": KernelError.__module__, "__qualname__": "KernelError"},
            )
            if str(both("probe")) == "probe":  # the cause's own __init__/__str__ would show
                found = both
        except Exception:  # a layout conflict, a final class, a constructor of its own
            pass
    _KERNEL_ERRORS[cause] = found
    return found


class PipelineError(EagerError, RuntimeError):
    """A stage of an ``ert.pipeline`` failed: it names the stage and the item.

    ``stage`` is the stage's name, ``index`` the failing item's position in the
    pipeline's source (``None`` when the source itself failed), ``item`` the value
    the stage was given; ``__cause__`` is the original exception.
    """

    def __init__(
        self, message: str, *, stage: str, index: int | None = None, item: object = None
    ) -> None:
        super().__init__(message)
        self.stage = stage
        self.index = index
        self.item = item


class BatchError(EagerError, RuntimeError):
    """A micro-batch could not be served (``ert.serving.MicroBatcher``): the model
    failed on it (``__cause__`` is the model's exception; every caller in that
    batch gets its own BatchError) or the batcher closed before it ran."""


class WaitTimeoutError(EagerError, TimeoutError):
    """A blocking wait ran out of time before the value was available."""


class WeightsError(UsageError, ValueError):
    """Model weights could not be loaded or don't fit the model (``ert.weights``): a
    corrupt file, a missing, unexpected or mis-shaped name."""


class SourceLine(NamedTuple):
    """Where in the user's code something happened."""

    filename: str
    lineno: int
    function: str

    def __str__(self) -> str:
        return f'File "{self.filename}", line {self.lineno}, in {self.function}'


def user_line(skip: int = 1) -> SourceLine | None:
    """The innermost calling frame that is not inside eagerrt itself."""
    frame: types.FrameType | None = sys._getframe(skip)
    codes = _codes
    while frame is not None:
        code = frame.f_code
        known = codes.get(id(code))
        if known is None or known[0] is not code:
            known = _learn(code)
        if known[1] is None:  # one of ours: look further out
            frame = frame.f_back
            continue
        lineno = frame.f_lineno
        line = known[1].get(lineno)
        if line is None:
            line = known[1][lineno] = SourceLine(code.co_filename, lineno, code.co_name)
        return line
    return None


# What user_line learned of each code object it walked through (it runs on
# every op while profiling, and on every failure): by id, the code itself
# (kept alive, so its id is not reused while it is here), and None if it is
# eagerrt's own, else its SourceLines by line number (made once each).
_codes: dict[int, tuple[types.CodeType, dict[int, SourceLine] | None]] = {}
_MAX_CODES = 4096


def _learn(code: types.CodeType) -> tuple[types.CodeType, dict[int, SourceLine] | None]:
    if len(_codes) >= _MAX_CODES:  # code made on the fly (a notebook's cells): start over
        _codes.clear()
    lines: dict[int, SourceLine] | None = None if code.co_filename.startswith(_PACKAGE_DIR) else {}
    known = _codes[id(code)] = (code, lines)
    return known


def trim_traceback(exc: BaseException) -> BaseException:
    """Drop eagerrt's own leading frames from ``exc``'s traceback (keep the last)."""
    tb = exc.__traceback__
    while (
        tb is not None
        and tb.tb_next is not None
        and tb.tb_frame.f_code.co_filename.startswith(_PACKAGE_DIR)
    ):
        tb = tb.tb_next
    return exc.with_traceback(tb)


def _drop_tracebacks(exc: BaseException) -> None:
    seen: set[int] = set()
    chain: list[BaseException | None] = [exc]
    while chain:
        current = chain.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        current.__traceback__ = None
        chain += [current.__cause__, current.__context__]


class Failure:
    """The error state of a tensor: which op failed, where it was created, why.

    One Failure is shared by the failing op's result and every dependent, so a
    failure counts as observed (and is not raised again by ``synchronize``) once
    any of them has been read.
    """

    __slots__ = ("__weakref__", "cause", "kernel_traceback", "op", "site")

    def __init__(self, op: str, site: SourceLine | None, cause: BaseException) -> None:
        self.op = op
        self.site = site
        # Keep where the kernel failed as text, not as live frames: a frame holds
        # its caller (and so the user's stack and the kernel's inputs) for as long
        # as an unread failure is kept. The whole chain goes: a __context__'s
        # traceback would hold the same frames.
        self.kernel_traceback = traceback.extract_tb(trim_traceback(cause).__traceback__)
        self.cause = cause
        _drop_tracebacks(cause)
        with _unobserved_lock:
            _unobserved[id(self)] = self
            if len(_unobserved) > MAX_UNOBSERVED:
                dropped = _unobserved.pop(next(iter(_unobserved)))  # the oldest
                _log.warning(
                    "eagerrt: dropped an unread failure (over %d kept): %r", MAX_UNOBSERVED, dropped
                )

    def to_exception(self, reading: str | None = None) -> KernelError:
        """A fresh KernelError for one read, marking this failure observed."""
        self.discard()  # observed: synchronize() must not raise it again
        where = f"\n  created at {self.site}" if self.site else ""
        via = ""
        if reading is not None and reading != self.op:
            via = f"\n  (read through the result of {reading!r}, which depends on it)"
        cause = self.cause
        message = f"op {self.op!r} failed: {type(cause).__name__}: {cause}{where}{via}"
        err = kernel_error_type(type(cause))(message)
        err.__cause__ = cause
        err.kernel_traceback = self.kernel_traceback
        if self.kernel_traceback:
            lines = "".join(self.kernel_traceback.format())
            err.add_note(f"kernel traceback (most recent call last):\n{lines.rstrip()}")
        return err

    def discard(self) -> None:
        """Drop this failure unread: no tensor holds it (a compiled call's
        replay reports its failures instead), so synchronize() must not."""
        with _unobserved_lock:
            _unobserved.pop(id(self), None)

    def __repr__(self) -> str:
        return f"<Failure of {self.op!r}: {self.cause!r}>"


#: Unread failures kept for synchronize(); past this the oldest is logged and dropped.
MAX_UNOBSERVED = 1000
_log = logging.getLogger("eagerrt")
_unobserved_lock = threading.Lock()
renew_after_fork(__name__, "_unobserved_lock")
_unobserved: dict[int, Failure] = {}


def take_unobserved() -> list[Failure]:
    """Remove and return the failures that nobody has read yet, oldest first."""
    with _unobserved_lock:
        failures = list(_unobserved.values())
        _unobserved.clear()
    return failures


def unobserved_count() -> int:
    return len(_unobserved)
