"""Runtime settings: sync mode, worker threads, and the inline/offload threshold.

The cost model turns an op's work into estimated nanoseconds; an op whose inputs
are ready runs inline on the calling thread when that estimate is at most
``inline_threshold_ns``, and on a worker thread otherwise. The defaults below were
measured on the project's reference machine (2 cores, Python 3.11) by
``eagerrt.calibrate()``; call it to measure your own machine.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields

from . import precision
from .forking import renew_after_fork

__all__ = ["Config", "config", "sync_mode"]


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r}: expected a positive integer") from None
    if value < 1:
        raise ValueError(f"{name}={raw!r}: expected a positive integer")
    return value


@dataclass
class Config:
    """eagerrt's live settings; change them through :data:`eagerrt.config`.

    >>> import eagerrt as ert
    >>> with ert.config.override(inline_threshold_ns=0):
    ...     ert.config.inline_threshold_ns
    0
    """

    #: Run every op inline at call time (``EAGERRT_SYNC=1``); results are identical.
    sync: bool = False
    #: CPU worker threads (``EAGERRT_NUM_THREADS``, default one per core). Read
    #: once, when the CPU device first offloads work; later changes don't resize it.
    num_threads: int = field(default_factory=lambda: os.cpu_count() or 2)
    #: Ops estimated to take at most this long run inline on the calling thread.
    #: Four worker round trips (measured 7-13 us here), so a hop adds at most a
    #: quarter to an offloaded op's latency.
    inline_threshold_ns: float = 50_000.0
    #: A compiled function's plan (``ert.function``) of at most this estimated
    #: cost runs on the calling thread, like TFRT's synchronous interpreter: one
    #: hop for a whole plan is worth it only for plans of a few milliseconds
    #: (a worker round trip measured 20-100+ us on these VMs), and the caller's
    #: event loop is held at most this long.
    graph_inline_threshold_ns: float = 1_000_000.0
    #: Backpressure: at most this many tasks wait in a worker pool's queue
    #: (``EAGERRT_MAX_QUEUED``). Past it, the thread offloading a task runs it
    #: itself, so a flood of callers (10,000 coroutines each starting a model)
    #: is slowed to the workers' pace instead of queueing work, and the
    #: intermediate results that work holds, without bound.
    max_queued_tasks: int = 1024
    #: The library for the heavy kernels' matrix products (``EAGERRT_BLAS``):
    #: ``"auto"``, Intel's MKL where installed (``pip install 'eagerrt[mkl]'``),
    #: else numpy's BLAS; ``"mkl"``, MKL or an error; ``"numpy"``, numpy's.
    blas: str = "auto"
    #: The cuda device's float32 convolutions multiply on TensorFloat-32 tensor
    #: cores (``EAGERRT_CUDA_TF32``): several times faster, 10-bit mantissas in
    #: the products (PyTorch's default for its cuDNN convolutions). Off: results
    #: match the CPU's to float32 rounding.
    cuda_tf32: bool = False
    #: The cuda device's convolutions run on cuDNN where it is installed
    #: (``pip install nvidia-cudnn-cu13``, or the one PyTorch brings); off
    #: (``EAGERRT_CUDA_CUDNN=0``), they run as cuBLAS products.
    cuda_cudnn: bool = True
    #: The precision of compiled functions' matrix products
    #: (``EAGERRT_MATMUL_PRECISION``): ``"float32"``, exact (the default), or
    #: ``"bfloat16"``, bfloat16 operands with float32 accumulation (a device
    #: without fast bfloat16 products raises ``PrecisionError`` at a compiled
    #: function's first call; see :mod:`eagerrt._core.precision`). Read when a
    #: function is traced; ``ert.function(precision=...)`` overrides it.
    matmul_precision: str = precision.FLOAT32
    #: Cost-model constants, in nanoseconds (see ``eagerrt.calibrate``): a tiny
    #: numpy call, a float32 add per element on 4 MB arrays, and a float32
    #: 256x256 matmul per flop, as measured on the reference machine.
    op_overhead_ns: float = 400.0
    ns_per_element: float = 0.35
    ns_per_flop: float = 0.006
    #: Derived, not a setting: the threshold in force (infinite in sync mode).
    inline_limit_ns: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._listeners: list[Callable[[], None]] = []
        self._sync_scopes = 0  # open sync_mode() blocks
        #: Set while a ``deterministic()`` block is open (``_core/deterministic.py``,
        #: which owns the block's run): every op is queued, none runs inline.
        self._queue_every_op = False
        # Reentrant: __setattr__ and _enter_sync_scope both recompute under it.
        self._scope_lock = threading.RLock()
        self._update_limit()

    @property
    def sync_active(self) -> bool:
        """True while ``sync`` is set or any ``sync_mode()`` block is open, and
        no ``deterministic()`` block is (that mode queues every op instead)."""
        return (self.sync or self._sync_scopes > 0) and not self._queue_every_op

    @property
    def deterministic_active(self) -> bool:
        """True inside an ``eagerrt.deterministic()`` block."""
        return self._queue_every_op

    def _update_limit(self) -> None:
        # The one number the fast path compares a cost with (derived, not a
        # setting): sync mode inlines everything, deterministic mode nothing.
        with self._scope_lock:
            if self._queue_every_op:
                limit = float("-inf")
            elif self.sync_active:
                limit = float("inf")
            else:
                limit = self.inline_threshold_ns
            object.__setattr__(self, "inline_limit_ns", limit)

    def _set_queue_every_op(self, on: bool) -> None:
        with self._scope_lock:
            self._queue_every_op = on
            self._update_limit()

    def _enter_sync_scope(self, delta: int) -> None:
        with self._scope_lock:
            self._sync_scopes += delta
            self._update_limit()

    def __setattr__(self, name: str, value: object) -> None:
        if name == "blas" and value not in _BLAS_CHOICES:
            raise ValueError(f"config.blas must be one of {_BLAS_CHOICES}, got {value!r}")
        changed_precision = False
        if name == "matmul_precision":
            value = precision.canonical(value)
            changed_precision = self.__dict__.get(name) != value
        object.__setattr__(self, name, value)
        if changed_precision:
            for listener in self.__dict__.get("_precision_listeners", ()):
                listener()
        if name in ("sync", "inline_threshold_ns") and "_listeners" in self.__dict__:
            self._update_limit()
        elif name in _COST_FIELDS:
            for listener in self.__dict__.get("_listeners", ()):
                listener()

    def on_precision_change(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` whenever ``matmul_precision`` changes."""
        self.__dict__.setdefault("_precision_listeners", []).append(listener)

    def on_cost_change(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` whenever a cost-model constant changes."""
        self._listeners.append(listener)

    @contextlib.contextmanager
    def override(self, **changes: object) -> Iterator[Config]:
        """Temporarily change settings (process-wide) inside a ``with`` block.

        Blocks restore what they saved, so they must nest: for sync mode in
        concurrent tasks, use :func:`sync_mode`, which counts open blocks.
        """
        known = {f.name for f in fields(Config) if f.init}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise TypeError(f"unknown eagerrt setting(s) {unknown}; known: {sorted(known)}")
        saved = {name: getattr(self, name) for name in changes}
        for name, value in changes.items():
            setattr(self, name, value)
        try:
            yield self
        finally:
            for name, value in saved.items():
                setattr(self, name, value)


_COST_FIELDS = frozenset({"op_overhead_ns", "ns_per_element", "ns_per_flop"})
_BLAS_CHOICES = ("auto", "mkl", "numpy")

config = Config(
    sync=_env_flag("EAGERRT_SYNC"),
    num_threads=_env_int("EAGERRT_NUM_THREADS", os.cpu_count() or 2),
    max_queued_tasks=_env_int("EAGERRT_MAX_QUEUED", 1024),
    blas=os.environ.get("EAGERRT_BLAS", "").strip().lower() or "auto",
    cuda_tf32=_env_flag("EAGERRT_CUDA_TF32"),
    cuda_cudnn=os.environ.get("EAGERRT_CUDA_CUDNN", "1").strip().lower()
    not in {"0", "false", "no", "off"},
    matmul_precision=os.environ.get("EAGERRT_MATMUL_PRECISION", "").strip() or precision.FLOAT32,
)


renew_after_fork(config, "_scope_lock", threading.RLock)


@contextlib.contextmanager
def sync_mode() -> Iterator[Config]:
    """Run every op inline at call time inside the block (process-wide).

    For debugging (errors surface at the line that caused them) and for small
    embedded models where a thread hop would cost more than the work. Blocks
    may overlap (concurrent tasks each opening one): sync mode lasts while any
    is open.

    >>> import eagerrt as ert
    >>> with ert.sync_mode():
    ...     t = ert.ones((2,)) + 1
    ...     t.is_ready()
    True
    """
    config._enter_sync_scope(+1)
    try:
        yield config
    finally:
        config._enter_sync_scope(-1)
