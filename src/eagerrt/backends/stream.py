"""The backend of stream devices: a compiled function runs as one native plan
(``NativePlan``: the whole graph enqueued as one unit of work on one stream)
on a device that takes them (``StreamDevice.runs_native_plans``), else op by op.

>>> import eagerrt as ert
>>> from eagerrt.graph.backend import backend_for
>>> type(backend_for(ert.get_device("teststream:0"))).__name__
'StreamBackend'
"""

from __future__ import annotations

from collections.abc import Sequence

from ..devices.stream import StreamDevice
from ..graph.backend import Backend, Pass, graph_device
from ..graph.ir import Graph
from ..graph.native_plan import NativePlan

__all__ = ["StreamBackend", "backend"]


class StreamBackend(Backend):
    """Native plans on stream devices that take them; ``plan_passes`` run on
    the graph before it becomes one (fusions of what the device's kernels do
    in one launch)."""

    def __init__(self, plan_passes: Sequence[Pass] = ()) -> None:
        self.plan_passes = tuple(plan_passes)

    def compile(self, graph: Graph) -> NativePlan | None:
        device = graph_device(graph)
        if isinstance(device, StreamDevice) and device.runs_native_plans:
            return NativePlan(graph, device, self.plan_passes)
        return None


backend = StreamBackend()
