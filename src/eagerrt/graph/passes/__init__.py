"""The device-neutral graph passes, one module each, run in order by :func:`optimize`,
then a device backend's own (the CPU's fuse into generated numba code:
:mod:`eagerrt.backends.cpu.passes`).

Each pass is ``run(graph) -> int`` (how many rewrites it made), edits the
graph in place and keeps :meth:`Graph.verify`'s invariants; ``optimize``
records what each did in ``graph.log`` for ``explain()``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..ir import Graph
from . import algebraic, constant_folding, cse, dce, fold_batch_norm, hoist_concat

__all__ = ["PIPELINE", "optimize"]

#: (name, pass) in the order they run. Simplifications first, then folding
#: (which needs them), then the rewrites that enable vectorizing; a backend's
#: passes (fusion) run after these.
PIPELINE: list[tuple[str, Callable[[Graph], int]]] = [
    ("dead code elimination", dce.run),
    ("common subexpressions", cse.run),
    ("algebraic simplification", algebraic.run),
    ("constant folding", constant_folding.run),
    ("batch norm folding", fold_batch_norm.run),
    ("constant folding", constant_folding.run),
    ("hoisting through concat", hoist_concat.run),
    ("algebraic simplification", algebraic.run),  # the joined slices hoisting leaves
    ("constant folding", constant_folding.run),
    ("common subexpressions", cse.run),
]


def optimize(
    graph: Graph, passes: Sequence[tuple[str, Callable[[Graph], int]]] = (), *, verify: bool = False
) -> Graph:
    """Run every pass in :data:`PIPELINE`, then ``passes`` (a backend's), over
    ``graph`` (in place)."""
    for name, run in [*PIPELINE, *passes]:
        changed = run(graph)
        graph.note(name, f"{changed} rewrite{'s' if changed != 1 else ''}")
        if verify:
            graph.verify()
    return graph
