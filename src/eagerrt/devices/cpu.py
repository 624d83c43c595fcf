"""The CPU device: numpy arrays in host memory, numpy and numba kernels.

Cheap ops run inline on the calling thread; heavy ones on a pool of worker
threads (``config.num_threads``, one per core by default). numpy's large
ufunc loops and BLAS calls, and numba kernels compiled with ``nogil=True``,
release the GIL, so independent heavy ops really run side by side.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from .._core import UsageError, WorkerPool, config, register_executor, renew_after_fork
from .base import Device

__all__ = ["CPUDevice", "cpu"]


class CPUDevice(Device):
    """Host memory; numpy arrays as native arrays.

    >>> import eagerrt as ert
    >>> ert.ones((2,)).device
    Device('cpu')
    """

    name = "cpu"
    generic_kernels = True
    backend = "eagerrt.backends.cpu"
    checks_results = False  # eagerrt's own kernels, tested (users' are still checked)
    native_types = (np.ndarray, np.generic)

    def __init__(self) -> None:
        self._pool: WorkerPool | None = None
        self._pool_lock = threading.Lock()
        renew_after_fork(self, "_pool_lock")

    @property
    def executor(self) -> WorkerPool:
        pool = self._pool
        if pool is None:
            with self._pool_lock:  # two first offloads must not make two pools
                pool = self._pool
                if pool is None:
                    pool = self._pool = WorkerPool(config.num_threads, "cpu")
                    register_executor(pool)
        return pool

    def busy_besides_caller(self) -> int:
        """CPU tasks queued or running besides the caller's own (0 before any)."""
        pool = self._pool
        return 0 if pool is None else pool.busy_besides_caller()

    def close(self) -> None:
        """The CPU device is eagerrt's own: every process has it, open."""
        raise UsageError("the CPU device can't be closed")

    def from_numpy(self, array: np.ndarray) -> np.ndarray:
        return array

    def to_numpy(self, native: Any) -> np.ndarray:
        return np.asarray(native)


cpu = CPUDevice()
