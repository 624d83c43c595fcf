"""Run ONNX models with eagerrt: ``ert.onnx.load(path)``.

The loader reads the model (with the ``onnx`` package, from the ``models``
extra: ``pip install 'eagerrt[models]'``), checks every node against the op
table and gives an :class:`OnnxModel`: ``await model(x)`` runs the graph
through :func:`eagerrt.function`, ``model.eager(x)`` op by op. Shapes and
constants are computed at trace time, on numpy, so exporters' dynamic-axis
shape arithmetic costs nothing per call.

>>> import eagerrt as ert
>>> "Conv" in ert.onnx.supported_ops()
True
"""

from __future__ import annotations

from .graph import Node, ValueInfo
from .model import OnnxModel, load
from .ops import UnsupportedError, supported_ops

__all__ = ["Node", "OnnxModel", "UnsupportedError", "ValueInfo", "load", "supported_ops"]
