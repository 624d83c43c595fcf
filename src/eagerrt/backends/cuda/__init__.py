"""The cuda device's backend: CuPy, cuBLAS and cuDNN kernels (``.kernels``,
``.nn``), imported when a cuda device first looks up a kernel, so CuPy is
only imported where it is used; compiled functions run as native plans
(captured as CUDA graphs by the device), after this backend's fusions
(``.passes``)."""

from __future__ import annotations

from ..stream import StreamBackend
from . import kernels as _kernels  # noqa: F401  (registers the cuda kernels)
from .passes import add_layer_norm, conv_relu

__all__ = ["backend"]

backend = StreamBackend(plan_passes=(conv_relu.run, add_layer_norm.run))
