"""Where graph mode asks a device what it brings: its backend.

A device names its backend as a module (``Device.backend``, a string such as
``"eagerrt.backends.cpu"``), imported the first time the device looks up a
kernel or compiles a graph, as anyio loads an event loop's backend by name.
The module registers the device's kernels and out forms (see
:meth:`eagerrt.Op.out_form`) as it is imported, and defines
``backend``: a :class:`Backend`. Graph mode runs its device-neutral passes
(``eagerrt.graph.passes.PIPELINE``), then the backend's :attr:`~Backend.passes`,
then hands the graph to the backend's :meth:`~Backend.compile`. A device with no
backend, or a backend without a compiler, runs compiled functions op by op
(``OpByOpPlan``): each op an eager call, in order.

No layer tests a device's name: a graph is compiled by the backend of the one
device its values live on, and a graph that spans devices runs op by op.

>>> import eagerrt as ert
>>> from eagerrt.graph.backend import backend_for
>>> type(backend_for(ert.get_device("cpu"))).__name__
'CPUBackend'
>>> backend_for(ert.get_device("teststream:0")).passes
()
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .._core import PrecisionError, precision
from ..devices import cpu
from ..devices.base import Device
from ..ops.registry import load_backend_module
from ..tensor import Tensor
from .ir import Graph
from .passes import optimize
from .plan import Plan, lower
from .replay import Replay

__all__ = ["Backend", "Pass", "PlanCompiler", "backend_for", "graph_device"]

#: A graph pass: ``run(graph) -> how many rewrites it made`` (see ``.passes``).
Pass = Callable[[Graph], int]


class Backend:
    """What a device brings to graph mode. The base class compiles nothing: its
    device runs compiled functions op by op."""

    #: (name, pass) pairs run after the device-neutral passes, in order.
    passes: Sequence[tuple[str, Pass]] = ()

    def check_precision(self, precision: str) -> None:
        """Raise :class:`~eagerrt.PrecisionError` unless this backend's plans can
        run their products in ``precision`` at speed. The base class knows only
        float32: a device brings reduced-precision products with its backend."""
        if precision != "float32":
            raise PrecisionError(
                f"matmul precision {precision!r}: this device's backend "
                f"({type(self).__name__}) has no {precision} products; use 'float32'"
            )

    def compile(self, graph: Graph) -> Any | None:
        """A plan for ``graph`` (its values all on this backend's device), or
        None to run it op by op. The plan has ``run(inputs) -> outputs`` (or is
        a CPU ``Plan``), ``describe()`` for
        ``explain()`` and ``time_ops(inputs, repeats)`` for ``measure_costs()``."""
        return None


class PlanCompiler(Backend):
    """A backend whose compiler lowers the optimized graph to a
    :class:`~eagerrt.graph.plan.Plan`: generated Python that calls each node's
    kernel for the device on native arrays (or its out form, into buffers the
    memory plan reuses), with no tensor, rule or scheduler between them, run
    inline or as one task on the device's executor. Any device whose kernels
    are plain functions of native arrays can use it as it is (``passes``: its
    own, run after the device-neutral ones); the CPU's adds fusion into numba.
    """

    def __init__(self, passes: Sequence[tuple[str, Pass]] = ()) -> None:
        self.passes = tuple(passes)

    def compile(self, graph: Graph) -> Plan:
        for c in graph.constants():
            if type(c.const) is Tensor:
                c.const = c.const._native()  # a failed weight raises its KernelError here
        replay = Replay(graph)  # before the passes rewrite the graph's nodes
        with precision.compiling(graph.precision):  # read by the out forms the passes pick
            optimize(graph, self.passes)
            plan = lower(graph)
        plan.replay = replay
        return plan


_NONE = Backend()


def backend_for(device: Device) -> Backend:
    """``device``'s backend (its module imported on first use); the base
    :class:`Backend` for a device that names none."""
    if device.backend is None:
        return _NONE
    backend = load_backend_module(device.backend).backend
    if not isinstance(backend, Backend):
        raise TypeError(f"{device.backend}.backend is {backend!r}, not an eagerrt Backend")
    return backend


def graph_device(graph: Graph) -> Device | None:
    """The one device every value of ``graph`` lives on (the CPU for a graph
    with no values), or None where they span devices."""
    values = [*graph.inputs, *graph.outputs, *graph.constants()]
    values += [v for node in graph.nodes for v in node.outputs]
    devices = {v.device for v in values}
    if not devices:
        return cpu
    return devices.pop() if len(devices) == 1 else None
