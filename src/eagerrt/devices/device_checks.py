"""Checks a kernel makes on the device rather than wait for them.

A kernel that would have to read device memory to validate its operands (an
embedding's indices in range) computes the condition on the device instead, as
a 0-d bool array, and leaves it here (:func:`check_later`). The device takes
the checks after each launch (:func:`take_checks`) and keeps them with the
result, and with every result computed from it; when the host reads one of
those (``await``, ``.numpy()``), the device is done with the flag, and a true
one fails the read with the kernel's message, naming the op and the user's line.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from .._core import Failure, SourceLine, user_line

__all__ = ["Check", "check_later", "checks_for", "first_failure", "take_checks"]


@dataclass(slots=True, eq=False, repr=False)
class Check:
    """A condition a kernel computed on the device instead of waiting for it
    (``flag``, a 0-d bool array, true on failure), made when the host reads a
    result that depends on it."""

    flag: Any
    op: str
    site: SourceLine | None
    message: str
    failure: Failure | None = field(init=False, default=None)


class _Pending(threading.local):
    #: Checks kernels left on this thread since the device last took them. A
    #: class default, so that reading it where none was left is an attribute
    #: hit (every launch reads it; a missing attribute costs an exception).
    pending: list[tuple[Any, str]] | None = None


_checks = _Pending()


def check_later(flag: Any, message: str) -> None:
    """For a kernel: fail its result, when the host reads it, if the 0-d device
    bool ``flag`` is true (a check made on the device, no wait for it now)."""
    pending = _checks.pending
    if pending is None:
        pending = _checks.pending = []
    pending.append((flag, message))


def take_checks() -> list[tuple[Any, str]]:
    """The ``(flag, message)`` checks kernels on this thread left since the last call."""
    pending = _checks.pending
    if not pending:
        return []
    _checks.pending = []
    return pending


def checks_for(op: str, values: Any, left: list[tuple[Any, str]]) -> tuple[Check, ...] | None:
    """The checks a result answers to: its operands' (``values``, the device's
    values among them carrying theirs as ``handle``) and those its kernels
    ``left`` (made into Checks naming ``op`` and the user's line)."""
    checks: tuple[Check, ...] = ()
    for v in values:
        handle = getattr(v, "handle", None)
        if type(handle) is not tuple or handle is checks:
            continue
        if not checks:
            checks = handle  # shared, not copied: most results have one source of checks
        else:  # each check once: a residual connection joins two paths from one lookup
            checks += tuple(c for c in handle if c not in checks)
    if left:
        site = user_line()
        checks += tuple(Check(flag, op, site, message) for flag, message in left)
    return checks or None


def first_failure(checks: tuple[Check, ...] | None) -> Failure | None:
    """The failure of the first of ``checks`` whose flag is true (read once the
    device is done with them: the host is reading a result)."""
    for check in checks or ():
        if check.failure is None and bool(check.flag):
            check.failure = Failure(check.op, check.site, IndexError(check.message))
        if check.failure is not None:
            return check.failure
    return None
