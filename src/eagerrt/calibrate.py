"""Measure this machine and set the cost model and the inline threshold.

The scheduler decides inline-or-offload from estimated nanoseconds, so the
estimates must be in this machine's units. ``calibrate()`` times a worker round
trip and a few numpy kernels (a second or so) and sets :data:`eagerrt.config`.

>>> import eagerrt as ert
>>> figures = ert.calibrate(apply=False)
>>> sorted(figures)
['inline_threshold_ns', 'ns_per_element', 'ns_per_flop', 'op_overhead_ns', 'worker_round_trip_ns']
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np

from ._core import config
from .devices import cpu

__all__ = ["calibrate"]


def _best_ns(fn: Callable[[], object], repeat: int, number: int) -> float:
    fn()  # warm up: first calls pay for BLAS thread start-up and page faults
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter_ns()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter_ns() - start) / number)
    return best


def _round_trip_ns() -> float:
    pool = cpu.executor
    samples = []
    pool.submit(lambda: None)  # start the threads outside the measurement
    for _ in range(200):
        done = threading.Event()
        start = time.perf_counter_ns()
        pool.submit(done.set)
        done.wait()
        samples.append(time.perf_counter_ns() - start)
    samples.sort()
    return float(samples[len(samples) // 2])


def calibrate(apply: bool = True) -> dict[str, float]:
    """Measure, optionally apply to ``eagerrt.config``, and return the figures."""
    tiny = np.ones((4, 4), np.float32)
    big = np.ones(1 << 20, np.float32)
    square = np.ones((256, 256), np.float32)
    overhead = _best_ns(lambda: np.add(tiny, tiny), 5, 2000)
    per_element = (_best_ns(lambda: np.add(big, big), 5, 10) - overhead) / big.size
    per_flop = (_best_ns(lambda: square @ square, 5, 10) - overhead) / (2 * 256**3)
    round_trip = _round_trip_ns()
    figures = {
        "op_overhead_ns": overhead,
        "ns_per_element": max(per_element, 0.01),
        "ns_per_flop": max(per_flop, 0.001),
        "worker_round_trip_ns": round_trip,
        # Offload only work at least four hops long: the hop then adds at most a
        # quarter to the op's latency, and the caller's thread is free meanwhile.
        "inline_threshold_ns": 4.0 * round_trip,
    }
    if apply:
        for name in ("op_overhead_ns", "ns_per_element", "ns_per_flop", "inline_threshold_ns"):
            setattr(config, name, figures[name])
    return figures
