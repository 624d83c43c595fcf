"""The CPU's backend: its out forms (``.out_forms``), its passes, which fuse
a graph's elementwise work, epilogues and small-op regions into generated numba
code (``.passes``, ``.codegen``), and its compiler: the optimized graph
lowered to a ``Plan``, generated Python over numpy
buffers that a memory plan reuses.

>>> import numpy as np, eagerrt as ert
>>> f = ert.function(lambda x: ert.exp(x) * 2 + 1)
>>> f(ert.asarray(np.zeros(3))).numpy()
array([3., 3., 3.])
>>> type(f.compiled_for(ert.asarray(np.zeros(3))).plan).__name__
'Plan'
"""

from __future__ import annotations

from ..._core import precision
from ...graph.backend import PlanCompiler
from ...graph.passes import dce

# Each registers its "cpu" kernels (and out forms) as it is imported.
from . import activation, attention, bf16, conv, linear, norm, out_forms, pooling  # noqa: F401
from .passes import epilogue, fusion, merge_heads, regions

__all__ = ["CPUBackend", "backend"]


class CPUBackend(PlanCompiler):
    """Graph mode on the CPU: fusion into numba, then a planned sequence of steps."""

    def __init__(self) -> None:
        # After the neutral passes: small-op regions first (their matmuls would
        # otherwise take epilogues), then epilogues before general elementwise
        # fusion, and a final clean-up.
        super().__init__(
            [
                ("small-op regions", regions.run),
                ("attention heads merged", merge_heads.run),
                ("epilogue fusion", epilogue.run),
                ("elementwise fusion", fusion.run),
                ("dead code elimination", dce.run),
            ]
        )

    def check_precision(self, name: str) -> None:
        """float32 always; bfloat16 where the CPU multiplies it at speed (see
        :func:`.bf16.require`)."""
        if name == precision.BFLOAT16:
            bf16.require()
        else:
            super().check_precision(name)


backend = CPUBackend()
