"""Numeric warnings (divide by zero, overflow, invalid value) at the user's line.

numpy warns from the Python frame that called the ufunc: for an op, a line of
eagerrt's registry, where the default filter also shows each warning once per
process. So kernels run under numpy's error modes with ``'warn'`` turned into
``'call'``: the call finds the op on the stack and warns at the line that made
it, in that line's module (its filters and once-per-line registry apply).

The modes come from whoever made the op: an op made inside
``np.errstate(divide='ignore')`` ignores division by zero, whether its kernel
runs at the call or later on a worker. Kernels run in a context of their own,
one per thread and set of modes, that carries nothing but numpy's modes.

>>> import warnings, numpy as np, eagerrt as ert
>>> with warnings.catch_warnings(record=True) as caught:
...     warnings.simplefilter("always")
...     y = ert.asarray([1.0, 0.0]) / 0.0
>>> [str(w.message) for w in caught]
['divide by zero encountered in divide', 'invalid value encountered in divide']
>>> {w.filename.startswith("<doctest") for w in caught}  # the line above, not eagerrt's
{True}
"""

from __future__ import annotations

import contextvars
import os
import sys
import threading
import types
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from .errors import _PACKAGE_DIR, SourceLine

__all__ = ["caller_modes", "enter", "register_runner", "run_here", "run_under"]

try:  # numpy >= 2 keeps its error modes in a context variable
    from numpy._core._multiarray_umath import (  # type: ignore[import-not-found]
        _extobj_contextvar as _modes_var,
    )
except ImportError:  # pragma: no cover - an older numpy: kernels warn as numpy does
    _modes_var = None

#: The frames that run kernels, by code: each says which op runs and where the
#: user made it (None: on this very stack, the first frame outside eagerrt).
_runners: dict[types.CodeType, Callable[[types.FrameType], tuple[str, SourceLine | None]]] = {}

#: Once-per-line registries for warnings raised away from the user's frame (a
#: worker's), by file, as a module's ``__warningregistry__`` is for its own.
_registries: dict[str, dict[Any, Any]] = {}


def register_runner(
    code: types.CodeType, describe: Callable[[types.FrameType], tuple[str, SourceLine | None]]
) -> None:
    """``describe(frame)`` names the op a frame running ``code`` runs and where
    the user made it (None when the user's own frame is further out)."""
    _runners[code] = describe


_UNSET: Any = object()


def _no_modes() -> None:
    return None


#: numpy's error modes where the caller stands (to run its op's kernel under).
caller_modes: Callable[[], Any] = _no_modes if _modes_var is None else _modes_var.get


def _direct(fn: Callable[..., Any], /, *args: Any) -> Any:
    return fn(*args)


#: The context last entered by an op run at its call: (thread, the caller's
#: modes, that context's ``run``). The fast path reads it and checks both in a
#: few tens of nanoseconds; anything else goes through :func:`enter`.
here: tuple[int | None, Any, Callable[..., Any]] = (None, None, _direct)

#: Each thread's contexts, by the modes they were made for (and those modes,
#: kept alive so their ids stay theirs); the modes set inside ours, by id
#: (where nothing needed turning into a call, the caller's own modes: kernels
#: made under them run directly, as they would in a context of ours).
_contexts: dict[tuple[int, int], tuple[Any, Callable[..., Any]]] = {}
_ours: dict[int, Any] = {}


def enter(modes: Any = _UNSET) -> Callable[..., Any]:
    """The ``run`` of this thread's context for ``modes`` (default: the
    caller's), made ``here``'s entry when they are the caller's."""
    global here
    current = caller_modes()
    mine = modes is _UNSET
    if mine:
        modes = current
    if current is not None and id(current) in _ours:
        # Inside one of ours already: a kernel waiting on other work runs it on
        # this thread. A context can't be entered twice; the outer one's modes do.
        if mine:
            here = (threading.get_ident(), modes, _direct)
        return _direct
    ident = threading.get_ident()
    known = _contexts.get((ident, id(modes)))
    if known is None or known[0] is not modes:
        if modes is None:  # none to keep: no numpy support, or a stream's launch
            run: Callable[..., Any] = _direct
        else:
            context = contextvars.Context()
            converted = context.run(_convert, modes)
            _ours[id(converted)] = converted
            run = context.run
        if len(_contexts) > 256:  # threads come and go: start over
            _contexts.clear()
            _ours.clear()  # (a nested op then gets a fresh context of its own)
        known = _contexts[(ident, id(modes))] = (modes, run)
    if mine:
        here = (ident, modes, known[1])
    return known[1]


def run_here(kernel: Callable[..., Any], /, *args: Any) -> Any:
    """``kernel(*args)`` under the caller's modes (an op run at its call; the
    fast paths write this out)."""
    ident, modes, run = here
    if modes is not caller_modes() or ident != threading.get_ident():
        run = enter()
    return run(kernel, *args)


def run_under(modes: Any, kernel: Callable[..., Any], /, *args: Any) -> Any:
    """``kernel(*args)`` under ``modes`` (a worker running an op made elsewhere)."""
    return enter(modes)(kernel, *args)


def _convert(modes: Any) -> Any:
    """In the current (fresh) context: ``modes`` with 'warn' made a call to
    :func:`_warn_at_user_line`; the modes now set."""
    assert _modes_var is not None
    _modes_var.set(modes)
    errors = np.geterr()
    if "warn" in errors.values() and not {"call", "log"} & set(errors.values()):
        # (A user's own 'call' or 'log' handler stays theirs, and these warn as numpy does.)
        calls: dict[str, Any] = {
            k: "call" if mode == "warn" else mode for k, mode in errors.items()
        }
        np.seterr(**calls)
        np.seterrcall(_warn_at_user_line)
    return _modes_var.get()


def _warn_at_user_line(kind: str, flag: int) -> None:
    """numpy's 'call' for a kernel's floating-point error: warn as numpy would,
    at the line that made the op."""
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code not in _runners:
        frame = frame.f_back
    if frame is None:  # not inside an op's run: the caller's frame, as numpy does
        warnings.warn(f"{kind} encountered", RuntimeWarning, stacklevel=2)
        return
    name, site = _runners[frame.f_code](frame)
    message = f"{kind} encountered in {name}"
    namespace = None
    if site is not None:  # made elsewhere (a worker runs it): the line recorded then
        filename, lineno, module = site.filename, site.lineno, _module_of(site.filename)
        registry = _registries.setdefault(filename, {})
    else:
        user = frame.f_back
        while user is not None and user.f_code.co_filename.startswith(_PACKAGE_DIR):
            user = user.f_back
        if user is None:
            warnings.warn(message, RuntimeWarning, stacklevel=2)
            return
        namespace = user.f_globals
        filename, lineno = user.f_code.co_filename, user.f_lineno
        module = namespace.get("__name__", "<string>")
        registry = namespace.setdefault("__warningregistry__", {})
    warnings.warn_explicit(message, RuntimeWarning, filename, lineno, module, registry, namespace)


def _module_of(filename: str) -> str:
    """The name of the module loaded from ``filename`` (what ``-W`` filters
    match), else the file's name as warnings would make it."""
    for name, module in list(sys.modules.items()):
        if getattr(module, "__file__", None) == filename:
            return name
    return os.path.splitext(os.path.basename(filename))[0] or filename
