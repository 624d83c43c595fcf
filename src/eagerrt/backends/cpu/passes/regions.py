"""Small-op regions: a connected stretch of tiny ops becomes one generated
numba function with explicit loops.

For a 4x4 matmul BLAS needs ~20 ns of arithmetic and a numpy call ~300 ns of
overhead; a model made of such ops (TFRT's "tiny model": 100 dependent 4x4
matmuls) is all overhead. Here every *tiny* node (a 2-d float matmul of at
most :data:`TINY_MACS` multiply-adds, an elementwise op with an exact scalar
form on at most :data:`TINY_ELEMENTS` elements) joins a region grown like an
elementwise group (intermediates read only inside it, one result). A region
with a matmul and at least two nodes becomes one node whose kernel runs every
op as loops with literal bounds (LLVM unrolls and vectorizes them),
intermediates in scratch arrays, constants passed in as arrays.

**Repeated patterns** compile once: when the region's nodes repeat with a
period (the same ops on the same shapes, each repetition reading the previous
one's result: ``x = relu(x @ W[i] + b[i])`` ten times, or ``x = x @ w`` a
hundred times) the body is emitted once inside a loop, the constants that
differ between repetitions stacked into one array indexed by the iteration.
Compile time then does not grow with the chain's length. Long stretches that
don't repeat call one helper function per distinct step instead of writing
every step's loops inline (numba's compile time grows faster than linearly
with the loops in one function).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...._core import config
from ....devices import cpu
from ....graph.ir import Graph, Node, Value
from ....ops.linalg import matmul
from ..codegen import HEADER, NJIT, ScalarEmitter, index_expr, loop_nest
from .fusion import (
    _builtin_ops,
    _key,
    _operand,
    compile_kernel,
    display_name,
    elementwise_ok,
    find_groups,
    make_op,
    replace_groups,
    users_kernel,
)

__all__ = ["TINY_ELEMENTS", "TINY_MACS", "run"]

#: A matmul is tiny up to this many multiply-adds (m * n * k).
TINY_MACS = 4096
#: An elementwise op is tiny up to this many result elements.
TINY_ELEMENTS = 1024
#: A repeated pattern is looped over from this many repetitions on.
MIN_REPEATS = 3
#: Up to this many steps a region's loops are written inline; beyond, each
#: distinct step is a helper function the region calls.
INLINE_STEPS = 8

# Rough costs of the generated loops, for the plan's cost model.
_NS_PER_MAC = 0.3
_NS_PER_ELEMENT = 1.0


def tiny_matmul(node: Node) -> bool:
    if node.op is not matmul or users_kernel(node.op) or len(node.inputs) != 2:
        return False
    (a, b), out = node.inputs, node.out
    if type(a) is not Value or type(b) is not Value or a.ndim != 2 or b.ndim != 2:
        return False
    if out.dtype not in (np.float32, np.float64) or a.dtype != out.dtype or b.dtype != out.dtype:
        return False
    if out.device is not cpu or a.device is not out.device:
        return False
    return 0 < a.shape[0] * a.shape[1] * b.shape[1] <= TINY_MACS  # no empty operand


def tiny(node: Node) -> bool:
    """Whether ``node`` may join a region."""
    return tiny_matmul(node) or (node.out.size <= TINY_ELEMENTS and elementwise_ok(node))


# -- periodic structure -----------------------------------------------------------------
def _signature(node: Node) -> tuple[Any, ...]:
    operands = tuple(
        (a.shape, a.dtype.str) if type(a) is Value else (type(a).__name__, repr(a))
        for a in node.inputs
    )
    out = node.out
    return (id(node.op), repr(sorted(node.static.items())), out.shape, out.dtype.str, operands)


@dataclass
class Block:
    """Nodes ``start .. start + period * repeats`` of a region: one body, repeated."""

    start: int
    period: int
    repeats: int
    #: The value the first repetition reads where later ones read the previous
    #: repetition's result.
    init: Value
    #: (position in the body, operand index) of the reads of the carried value.
    carry: set[tuple[int, int]] = field(default_factory=set)
    #: (position in the body, operand index) -> per-repetition constants.
    stacked: dict[tuple[int, int], list[Value]] = field(default_factory=dict)

    @property
    def stop(self) -> int:
        return self.start + self.period * self.repeats


def _classify(
    index: dict[int, int], rep_start: int, period: int, start: int, a: Any
) -> tuple[Any, ...] | None:
    """An operand of a node in the repetition starting at ``rep_start``."""
    if type(a) is not Value:
        return ("scalar", type(a), repr(a))
    at = index.get(id(a.node)) if a.node is not None else None
    if at is not None and rep_start <= at < rep_start + period:
        return ("local", at - rep_start)
    if at is not None and rep_start > start and at == rep_start - 1:
        return ("carry",)
    if at is not None and at >= start:
        return None  # reads an earlier repetition: not a simple chain
    return ("outside", a)


def _check(
    nodes: list[Node],
    index: dict[int, int],
    users: dict[int, list[Node]],
    start: int,
    period: int,
    repeats: int,
) -> Block | None:
    """The block if repetitions 1.. of ``nodes[start:]`` match repetition 0."""
    pattern: list[list[tuple[Any, ...]]] = []
    for q in range(period):
        row = []
        for a in nodes[start + period + q].inputs:
            c = _classify(index, start + period, period, start, a)
            if c is None:
                return None
            row.append(c)
        pattern.append(row)
    if not any(c == ("carry",) for row in pattern for c in row):
        return None
    init: Value | None = None
    outside: dict[tuple[int, int], list[Any]] = {}
    for k in range(repeats):
        base = start + k * period
        for q in range(period):
            node = nodes[base + q]
            for i, a in enumerate(node.inputs):
                want = pattern[q][i]
                got = _classify(index, base, period, start, a)
                if got is None:
                    return None
                if k == 0 and want == ("carry",):
                    if got[0] != "outside" or (init is not None and a is not init):
                        return None
                    init = a
                elif want[0] == "outside":
                    if got[0] != "outside":
                        return None
                    outside.setdefault((q, i), []).append(a)
                elif got != want:
                    return None
            # Only the repetition's result leaves it, and only into the next one
            # (or, from the last, to whatever follows the block).
            for u in users.get(node.out.id, ()):
                at = index.get(id(u))
                if at is None:
                    return None
                later = at >= base + period and (k == repeats - 1 or at < base + 2 * period)
                if not (base <= at < base + period or (q == period - 1 and later)):
                    return None
    assert init is not None
    block = Block(start, period, repeats, init)
    block.carry = {
        (q, i) for q, row in enumerate(pattern) for i, c in enumerate(row) if c == ("carry",)
    }
    for key, values in outside.items():
        if all(v is values[0] for v in values):
            continue
        first = values[0]
        if not all(
            type(v) is Value and v.is_const and v.shape == first.shape and v.dtype == first.dtype
            for v in values
        ):
            return None
        block.stacked[key] = values
    return block


def find_block(nodes: list[Node], users: dict[int, list[Node]]) -> Block | None:
    """The repeated stretch covering the most nodes (shortest period on ties)."""
    n = len(nodes)
    sigs = [_signature(node) for node in nodes]
    index = {id(node): i for i, node in enumerate(nodes)}
    best: Block | None = None
    covered = 0
    for period in range(1, n // MIN_REPEATS + 1):
        # run[i]: how many nodes from i on equal the node a period later, so a
        # stretch starting at i repeats 1 + run[i] // period times.
        run = [0] * (n + 1)
        for i in range(n - period - 1, -1, -1):
            run[i] = run[i + 1] + 1 if sigs[i] == sigs[i + period] else 0
        for start in range(0, n - MIN_REPEATS * period + 1):
            repeats = 1 + run[start] // period
            while repeats >= MIN_REPEATS and repeats * period > covered:
                block = _check(nodes, index, users, start, period, repeats)
                if block is not None:
                    best, covered = block, repeats * period
                    if covered == n:
                        return best
                    break
                repeats -= 1
    return best


# -- code ----------------------------------------------------------------------------------
Read = Callable[[Any, int], str]  # (operand, its index in the node) -> expression


class _Writer:
    """Generates one region's kernel: ``region(*args, out)``."""

    def __init__(self, nodes: list[Node]) -> None:
        self.nodes = nodes
        self.root = nodes[-1].out
        self.args: list[Any] = []
        self._arg_names: dict[Any, str] = {}
        self.lines: list[str] = []
        self.allocs: list[str] = []
        self._helpers: dict[str, str] = {}  # step function text -> name
        self._scalar_helpers: dict[str, str] = {}
        self.names: dict[int, str] = {}  # value id -> array holding it in the kernel
        self._free: dict[tuple[Any, ...], list[str]] = {}
        self.last_use = {v.id: i for i, node in enumerate(nodes) for v in node.value_inputs()}

    # -- operands and buffers -------------------------------------------------------
    def arg(self, a: Any) -> str:
        key = _key(a)
        if key not in self._arg_names:
            self._arg_names[key] = f"a{len(self.args)}"
            self.args.append(a)
        return self._arg_names[key]

    def read(self, a: Any, i: int = 0) -> str:
        if type(a) is Value and a.id in self.names:
            return self.names[a.id]
        return self.arg(a)

    def buffer(self, v: Value) -> str:
        pool = self._free.get((v.shape, v.dtype.str))
        if pool:
            return pool.pop()
        name = f"b{len(self.allocs)}"
        self.allocs.append(f"    {name} = np.empty({v.shape!r}, np.{v.dtype.name})")
        return name

    def release_dead(self, values: Any, upto: int) -> None:
        """Give back the arrays of values last read at or before node ``upto``."""
        for v in dict.fromkeys(values):
            name = self.names.get(v.id)
            if name is not None and name.startswith("b") and self.last_use.get(v.id, -1) <= upto:
                self._free.setdefault((v.shape, v.dtype.str), []).append(name)
                self.names[v.id] = f"<freed {name}>"

    # -- steps ----------------------------------------------------------------------
    def step(self, node: Node, dst: str, read: Read, indent: str, inline: bool) -> None:
        """Code computing ``node`` into array ``dst``: its loops written here, or
        a call of a helper function holding them (shared by equal steps, so a
        long region's compile time grows with its distinct steps only)."""
        args = [read(a, i) for i, a in enumerate(node.inputs)]
        if inline:
            body = self._body(node, args, dst, str(len(self.lines)))
            self.lines += [indent + line for line in body]
            return
        params = [f"q{i}" for i in range(len(args))]
        body = self._body(node, params, "d", "")
        text = f"def {{name}}({', '.join([*params, 'd'])}):\n" + "".join(
            f"    {line}\n" for line in body
        )
        name = self._helpers.setdefault(text, f"_step{len(self._helpers)}")
        self.lines.append(f"{indent}{name}({', '.join([*args, dst])})")

    def _body(self, node: Node, names: list[str], dst: str, tag: str) -> list[str]:
        if tiny_matmul(node):
            return self._matmul(node, names, dst, tag)
        return self._elementwise(node, names, dst, tag)

    def _matmul(self, node: Node, names: list[str], d: str, tag: str) -> list[str]:
        a, b = node.inputs
        (m, k), n = a.shape, b.shape[1]
        A, B = names
        v = f"v{tag}"
        if n <= 4:
            # Narrow: each element's sum in a register (fewer stores; LLVM
            # unrolls the literal bounds).
            return [
                f"for i in range({m}):",
                f"    for j in range({n}):",
                f"        {v} = {A}[i, 0] * {B}[0, j]",
                f"        for p in range(1, {k}):",
                f"            {v} += {A}[i, p] * {B}[p, j]",
                f"        {d}[i, j] = {v}",
            ]
        # Wider: i, p, j order, the innermost loop along rows of B and of the
        # result (vectorizable). Each element sums over p in the same order.
        return [
            f"for i in range({m}):",
            f"    for j in range({n}):",
            f"        {d}[i, j] = 0",
            f"    for p in range({k}):",
            f"        {v} = {A}[i, p]",
            f"        for j in range({n}):",
            f"            {d}[i, j] += {v} * {B}[p, j]",
        ]

    def _elementwise(self, node: Node, names: list[str], d: str, tag: str) -> list[str]:
        name = _builtin_ops()[id(node.op)][0]
        emitter = ScalarEmitter(f"s{tag}_")
        operands = []
        reads = []
        for i, a in enumerate(node.inputs):
            if type(a) is Value:
                var = f"e{tag}_{i}"
                reads.append((var, names[i], a.shape))
                operands.append(_operand(a, var))
            else:
                operands.append(_operand(a, names[i]))
        result = emitter.node(name, operands, node.static, node.out.dtype)
        if result is None:
            raise _NoForm(node.name)
        self._scalar_helpers.update(emitter._helpers)
        shape = node.out.shape

        def inner(loop_vars: list[str], pad: str) -> list[str]:
            out = [f"{pad}{var} = {arr}{index_expr(s, shape, loop_vars)}" for var, arr, s in reads]
            out += [pad + line for line in emitter.lines]
            out.append(f"{pad}{d}{index_expr(shape, shape, loop_vars)} = {result.var}")
            return out

        return loop_nest(shape, inner, indent="")

    def copy(self, src: str, dst: str, shape: tuple[int, ...], indent: str) -> None:
        def body(loop_vars: list[str], pad: str) -> list[str]:
            at = index_expr(shape, shape, loop_vars)
            return [f"{pad}{dst}{at} = {src}{at}"]

        self.lines += loop_nest(shape, body, indent=indent)

    # -- the function -----------------------------------------------------------------
    def straight(self, start: int, stop: int, inline: bool) -> None:
        """Nodes one after another, each result in a scratch array (the root in out)."""
        for at in range(start, stop):
            node = self.nodes[at]
            out = node.out
            dst = "out" if out is self.root else self.buffer(out)
            self.step(node, dst, self.read, "    ", inline)
            self.names[out.id] = dst
            self.release_dead(node.value_inputs(), at)

    def block(self, block: Block) -> None:
        """The repeated stretch: one body in a loop, the carried value swapping
        between two arrays each repetition (then copied to ``out`` if it is the
        root: cheaper than a select in the loop)."""
        body = self.nodes[block.start : block.start + block.period]
        carried = body[-1].out
        ends = self.nodes[block.stop - 1].out is self.root
        ping, pong = self.buffer(carried), self.buffer(carried)
        self.copy(self.read(block.init), ping, carried.shape, "    ")  # one type for the carry
        stacked = {key: self.arg(_stack(values)) for key, values in block.stacked.items()}
        scratch = {n.out.id: self.buffer(n.out) for n in body[:-1]}  # reused by every repetition
        self.lines += [f"    src, dst = {ping}, {pong}", f"    for it in range({block.repeats}):"]
        self.lines += [f"        w{q}_{i} = {name}[it]" for (q, i), name in stacked.items()]
        inline = block.period <= INLINE_STEPS
        for q, node in enumerate(body):

            def read(a: Any, i: int, q: int = q) -> str:
                if (q, i) in block.carry:
                    return "src"
                if (q, i) in stacked:
                    return f"w{q}_{i}"
                if type(a) is Value and a.id in scratch:
                    return scratch[a.id]
                return self.read(a)

            dst = "dst" if q == block.period - 1 else scratch[node.out.id]
            self.step(node, dst, read, "        ", inline)
        self.lines.append("        src, dst = dst, src")
        if ends:
            self.copy("src", "out", carried.shape, "    ")
        self.names[carried.id] = "out" if ends else "src"
        self.names[self.nodes[block.stop - 1].out.id] = "out" if ends else "src"
        outside = [v for node in self.nodes[block.start : block.stop] for v in node.value_inputs()]
        self.release_dead(outside, block.stop - 1)
        for node in body[:-1]:
            out = node.out
            self._free.setdefault((out.shape, out.dtype.str), []).append(scratch[out.id])

    def source(self) -> str:
        params = ", ".join([*(f"a{j}" for j in range(len(self.args))), "out"])
        steps = [f"{NJIT}\n{text.replace('{name}', name)}" for text, name in self._helpers.items()]
        lines = [NJIT, f"def region({params}):", *self.allocs, *self.lines]
        helpers = "".join(self._scalar_helpers.values())
        return f"{HEADER}{helpers}\n\n" + "\n\n".join(steps) + "\n\n" + "\n".join(lines) + "\n"


class _NoForm(Exception):
    """A node without an exact scalar form: the region is not made."""


def _stack(values: list[Value]) -> Value:
    first = values[0]
    data = np.stack([np.asarray(v.const) for v in values])
    stacked = Value(data.shape, first.dtype, first.device, const=data)
    stacked.name = f"%c{stacked.id}"
    return stacked


def _write(nodes: list[Node], users: dict[int, list[Node]]) -> tuple[str, list[Any], Block | None]:
    writer = _Writer(nodes)
    block = find_block(nodes, users) if len(nodes) >= MIN_REPEATS else None
    # Loops written inline optimize best, but numba's compile time grows faster
    # than linearly with a function's loops: long straight stretches call helpers.
    straight = len(nodes) - (block.period * block.repeats if block else 0)
    inline = straight <= INLINE_STEPS
    if block is None:
        writer.straight(0, len(nodes), inline)
    else:
        writer.straight(0, block.start, inline)
        writer.block(block)
        writer.straight(block.stop, len(nodes), inline)
    return writer.source(), writer.args, block


def _name(nodes: list[Node], block: Block | None) -> str:
    names = [n.name for n in nodes]
    if block is not None:
        body = ",".join(names[block.start : block.start + block.period])
        names = [*names[: block.start], f"({body})x{block.repeats}", *names[block.stop :]]
    return display_name("region", names)


def _cost(nodes: list[Node]) -> float:
    total = config.op_overhead_ns
    for node in nodes:
        if tiny_matmul(node):
            a, b = node.inputs
            total += a.shape[0] * a.shape[1] * b.shape[1] * _NS_PER_MAC
        else:
            total += node.out.size * _NS_PER_ELEMENT
    return total


def fuse_region(nodes: list[Node], users: dict[int, list[Node]]) -> Node | None:
    """The node running ``nodes`` (a region, root last) as one kernel."""
    try:
        source, args, block = _write(nodes, users)
    except _NoForm:
        return None
    root = nodes[-1].out
    fn = compile_kernel(source, args, root, name="region")
    if fn is None:
        return None
    op = make_op(
        _name(nodes, block),
        fn,
        root.shape,
        root.dtype,
        _cost(nodes),
        len(args),
        elementwise=False,
        source=source,
    )
    return Node(op, args, {}, [root], site=nodes[-1].site)


def run(graph: Graph) -> int:
    """Replace regions of tiny ops in place; returns how many were made."""
    users = graph.users()
    done = []
    for group in find_groups(graph, tiny, lambda group, producer: True):
        if len(group) < 2 or not any(tiny_matmul(n) for n in group):
            continue
        node = fuse_region(group, users)
        if node is not None:
            done.append((group, node))
    replace_groups(graph, done)
    return len(done)
