"""Graph mode: ``ert.function`` traces a function into a small IR, optimizes
it with passes (one module each under ``passes/``) and lowers it to a plan of
generated code run with preallocated buffers.

Modules: ``ir`` (values, nodes, graphs), ``tracing`` (symbolic tensors),
``passes`` (rewrites), ``cost_model``, ``kernels`` (out forms),
``memory_plan``, ``plan`` (lowering and code generation), ``executor``
(running plans on tensors), ``function`` (the decorator), ``explain``.
"""

from __future__ import annotations

from .control_flow import cond, while_loop
from .function import Function, function
from .ir import Graph, Node, Value
from .tracing import is_tracing

__all__ = ["Function", "Graph", "Node", "Value", "cond", "function", "is_tracing", "while_loop"]
