"""The box device's backend: its kernels, and a compiler.

eagerrt imports this module the first time a box device looks up a kernel or
compiles a function (``BoxDevice.backend``). It registers kernels for the ops
the device has (here: numpy's, working on the array inside each :class:`Box`,
so data never leaves the device), and defines ``backend``: eagerrt's
:class:`~eagerrt.graph.backend.PlanCompiler`, which lowers an optimized graph to
a plan calling these kernels (and the host fallback's) on boxes, with no tensor,
rule or scheduler in between. A device with a compiler of its own would
subclass :class:`~eagerrt.graph.backend.Backend` and return its own plan.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import eagerrt as ert
from eagerrt.graph.backend import PlanCompiler
from eagerrt.lowlevel import fill_index

from . import Box

__all__ = ["BOX_OPS", "backend"]


def _setitem(old: np.ndarray, value: Any, *index: np.ndarray, template: Any) -> np.ndarray:
    new = old.copy()  # the next version: the old one may still be read
    new[fill_index(template, index)] = value
    return new


#: The ops with a box kernel: the device's own, here numpy's on the boxed arrays.
BOX_OPS = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "divide": np.divide,
    "exp": np.exp,
    "tanh": np.tanh,
    "relu": lambda x: np.maximum(x, 0),
    "matmul": np.matmul,
    "linear": lambda x, w, b=None: x @ w.T if b is None else x @ w.T + b,
    "sum": np.sum,
    # Writes: t[index] = value, and t += x's new version in t's dtype.
    "setitem": _setitem,
    "assign": lambda old, value: value.astype(old.dtype, copy=False),
}


def _boxed(fn: Callable[..., Any]) -> Callable[..., Box]:
    def kernel(*args: Any, **static: Any) -> Box:
        arrays = [a.array if type(a) is Box else a for a in args]
        return Box(np.asarray(fn(*arrays, **static)))

    return kernel


for _name, _fn in BOX_OPS.items():
    ert.get_op(_name).register_kernel("box", _boxed(_fn))

backend = PlanCompiler()
