"""Graph passes, one module each, run in order by :func:`optimize`.

Each pass is ``run(graph) -> int`` (how many rewrites it made), edits the
graph in place and keeps :meth:`Graph.verify`'s invariants; ``optimize``
records what each did in ``graph.log`` for ``explain()``.
"""

from __future__ import annotations

from collections.abc import Callable

from ..ir import Graph
from . import algebraic, constant_folding, cse, dce, fold_batch_norm, hoist_concat, merge_heads
from .epilogue import run as fuse_epilogues
from .fusion import run as fuse_elementwise
from .regions import run as fuse_small_regions

__all__ = ["PIPELINE", "optimize"]

#: (name, pass) in the order they run. Simplifications first, then folding
#: (which needs them), then the rewrites that enable vectorizing, then fusion
#: (epilogues before general elementwise fusion), and a final clean-up.
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
    ("small-op regions", fuse_small_regions),
    ("attention heads merged", merge_heads.run),
    ("epilogue fusion", fuse_epilogues),
    ("elementwise fusion", fuse_elementwise),
    ("dead code elimination", dce.run),
]


def optimize(graph: Graph, *, verify: bool = False) -> Graph:
    """Run every pass in :data:`PIPELINE` over ``graph`` (in place)."""
    for name, run in PIPELINE:
        changed = run(graph)
        graph.note(name, f"{changed} rewrite{'s' if changed != 1 else ''}")
        if verify:
            graph.verify()
    return graph
