"""Epilogue fusion: a matmul (or linear, conv2d) and the elementwise work on
its result become one node.

``relu(x @ W + b)`` is a product and then an elementwise group (see
:mod:`.fusion`) reading it. When the product's result is read only by that
group and has the group's shape and dtype, one node does both: the product is
written into the output buffer (BLAS through the op's out form), then the
fused loop runs over that buffer in place: one pass over the result, no
temporaries::

    %1 = matmul(%in0, %c2) : float32[32, 512]
    %5 = fused[add,relu](%1, %c4)              ->  %5 = fused[matmul,add,relu](%in0, %c2, %c4)

linear (and a matmul big enough to share its rows) runs the loop on each
block of rows as soon as it is written; conv2d on each run of images as soon
as they are done: in cache, on the thread that computed them. A product
without an out form allocates its result as it would eagerly; the fused loop
then reads it and writes the planned buffer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...._core import config
from ....devices import cpu
from ....graph.cost_model import node_cost
from ....graph.ir import Graph, Node, Value
from ....graph.kernels import kernel_for, out_form_for
from ....ops.registry import get_op
from ..codegen import load_source
from ..out_forms import in_bf16, matmul_by_rows
from ..pooled_linear import PooledLinear, driver_source, pool_applies
from .fusion import (
    build_program,
    compile_kernel,
    display_name,
    elementwise_ok,
    find_groups,
    fused_cost,
    group_inputs,
    make_op,
    numba_signature,
    replace_groups,
    same_size,
    users_kernel,
)

__all__ = ["run"]

#: The ops whose product an epilogue can take over, by id.
_PRODUCERS = {id(get_op(name)) for name in ("matmul", "linear", "conv2d")}


def _product(v: Any, group: list[Node], users: dict[int, list[Node]], outputs: set[int]) -> bool:
    """Whether ``v`` is a product the group can take over: made by a product
    op on the CPU, read only by the group, of the group's shape and dtype."""
    if type(v) is not Value or v.node is None or v.id in outputs:
        return False
    node = v.node
    if id(node.op) not in _PRODUCERS or len(node.outputs) != 1:
        return False
    root = group[-1].out
    if v.shape != root.shape or v.dtype != root.dtype or v.dtype.kind != "f":
        return False
    if v.device is not cpu or users_kernel(node.op):
        return False
    members = {id(n) for n in group}
    return all(id(u) in members for u in users.get(v.id, ()))


def _blocks_of(out: Value, rest: list[Any], whole: Callable[[Value], bool]) -> list[bool] | None:
    """Whether each operand of an epilogue run on blocks of ``out`` is sliced like
    the block (True: it has the result's shape) or passed whole (False: a weak
    scalar, or a value ``whole`` accepts); None if some operand is neither."""
    modes = []
    for a in rest:
        if type(a) is not Value:
            modes.append(False)  # a weak scalar
        elif a.shape == out.shape and not a.is_const:
            modes.append(True)  # a computed or input value: a C-contiguous buffer
        elif whole(a):
            modes.append(False)
        else:
            return None
    return modes


def _row_blocks(product: Node, rest: list[Any]) -> list[bool] | None:
    """For a product that computes its result in blocks of rows (linear, and a
    matmul by a matrix big enough to share: see ``out_forms.matmul_by_rows``), whether
    each other operand of the epilogue is read by rows or whole (a bias-like
    operand, broadcast over all but the last dimension); None where the
    epilogue can't run on blocks of rows."""
    if product.name != "linear" and not (product.name == "matmul" and matmul_by_rows(product)):
        return None
    out = product.out
    if out.ndim < 2 or out.shape[-2] < 2:
        return None  # blocks are viewed as (1, ..., rows, n): dimension -2 must be a real one
    return _blocks_of(out, rest, lambda a: all(d == 1 for d in a.shape[:-1]))


def _image_blocks(product: Node, rest: list[Any]) -> list[bool] | None:
    """For a conv2d, which computes its result in blocks of images (see
    ``conv.ImageEpilogue``), whether each other operand of the epilogue is read
    by images or whole (one image or fewer dimensions, as a per-channel scale);
    None where the epilogue can't run on runs of images."""
    out = product.out
    if product.name != "conv2d" or out.ndim != 4:
        return None
    return _blocks_of(out, rest, lambda a: a.ndim < out.ndim or a.shape[0] == 1)


def _by_images(product_into: Any, n_product: int, modes: list[bool], ew: Any) -> Any:
    """``form(*product_args, *rest, out)``: the convolution, with ``ew``
    run on each run of images [first, end) as soon as the convolution has
    written them (in cache, on the thread that finished them). Runs are slices
    of the leading dimension, C-contiguous as the whole buffers are."""

    def form(*args: Any) -> None:
        out = args[-1]

        def epilogue(first: int, end: int) -> None:
            if first == 0 and end == len(out):  # every image (batch 1): no views to make
                ew(*args[n_product:])  # the rest and out: reads the images from out, in place
                return
            rest = zip(args[n_product:-1], modes, strict=True)
            operands = [a[first:end] if by_images else a for a, by_images in rest]
            ew(*operands, out[first:end])

        product_into(*args[:n_product], out, epilogue=epilogue)

    return form


def _by_rows(product_into: Any, n_product: int, modes: list[bool], ew: Any, pooled: Any) -> Any:
    """``form(*product_args, *rest, out)``: the product, with ``ew`` run on
    each block of rows as soon as the product has written it (in cache, and on
    whichever thread computed the block). Blocks are views of shape (1, ..., rows,
    n), which the loop nest handles: it takes its bounds from ``out``, operands by
    rows have ``out``'s shape and the others broadcast over every dimension but
    the last. With ``pooled`` (a linear's :class:`~eagerrt.backends.cpu.pooled_linear.PooledLinear`
    running the epilogue's generated driver) the whole is one pool kernel where
    it can run."""

    def form(*args: Any) -> None:
        out = args[-1]
        if pooled is not None and pooled(args[0], args[1], args[n_product:-1], out):
            return
        n = out.shape[-1]
        lead = (1,) * (out.ndim - 2)
        rows = out.reshape(-1, n)
        rest = [
            a.reshape(-1, n) if by_rows else a
            for a, by_rows in zip(args[n_product:-1], modes, strict=True)
        ]

        def epilogue(start: int, stop: int) -> None:
            block = (*lead, stop - start, n)
            o = rows[start:stop].reshape(block)
            operands = [
                a[start:stop].reshape(block) if by_rows else a
                for a, by_rows in zip(rest, modes, strict=True)
            ]
            ew(*operands, o)  # reads the product's block from o, in place

        product_into(*args[:n_product], out, epilogue=epilogue)

    return form


def _wrapper(
    product: Node,
    kernel: Any,
    out_form: Any,
    n_product: int,
    slot: int,
    rest: list[Any],
    ew: Any,
    pooled: Any = None,
) -> Any:
    """``form(*product_args, *rest, out)``: the product (``kernel``, or its
    out form where it has one), then ``ew`` over it (see :func:`_by_rows` for
    ``pooled``)."""
    if out_form is not None and (modes := _row_blocks(product, rest)) is not None:
        return _by_rows(out_form, n_product, modes, ew, pooled)
    if out_form is not None and (modes := _image_blocks(product, rest)) is not None:
        return _by_images(out_form, n_product, modes, ew)
    names = [f"e{i}" for i in range(len(rest))]
    params = [f"p{i}" for i in range(n_product)] + names
    if out_form is not None:
        first = f"    product({', '.join(params[:n_product])}, out)"
        ew_args = names  # ew reads the product from out, in place
    else:
        static = "".join(f", {k}=static[{k!r}]" for k in product.static)
        first = f"    r = product({', '.join(params[:n_product])}{static})"
        ew_args = [*names[:slot], "r", *names[slot:]]
    source = (
        f"def form({', '.join([*params, 'out'])}):\n"
        f"{first}\n    ew({', '.join([*ew_args, 'out'])})\n"
    )
    namespace: dict[str, Any] = {
        "product": out_form if out_form is not None else kernel,
        "ew": ew,
        "static": dict(product.static),
    }
    exec(compile(source, f"<eagerrt epilogue {product.name}>", "exec"), namespace)
    return namespace["form"]


def _foldable_bias(product: Node, value: Value) -> Value | None:
    """A linear's bias the epilogue can add as it reads the product (a (n,)
    vector of the product's dtype), or None."""
    if product.name != "linear" or len(product.inputs) != 3:
        return None
    bias = product.inputs[2]
    if type(bias) is not Value or bias.shape != value.shape[-1:] or bias.dtype != value.dtype:
        return None
    return bias


def _pool_shape(product: Node, rest: list[Any]) -> tuple[int, int, int, list[bool]] | None:
    """(m, n, k, by-rows modes) of a linear (without a bias of its own: a
    foldable one is among ``rest``) whose product and epilogue can run as one
    pool kernel (:mod:`eagerrt.backends.cpu.pooled_linear`), or None."""
    if product.name != "linear" or len(product.inputs) != 2 or in_bf16(product):
        return None  # (the pool kernels' products are float32: bfloat16 runs its own)
    modes = _row_blocks(product, rest)
    (x, w), out = product.inputs, product.out
    if modes is None or w.ndim != 2 or x.dtype != out.dtype or w.dtype != out.dtype:
        return None
    n, k = w.shape
    m = out.size // max(1, n)
    return (m, n, k, modes) if pool_applies(m, n, k, out.dtype) else None


def _pooled_driver(
    source: str, product: Node, rest: list[Any], out: Value, pool: tuple[int, int, int, Any]
) -> Any:
    """The :class:`~eagerrt.backends.cpu.pooled_linear.PooledLinear` running ``source``'s
    generated driver, compiled now for the plan's argument types; None if
    numba refuses it (the plan then runs the product and epilogue as before)."""
    import numba

    x, w = numba_signature(product.inputs, out)[:2]
    signature = (
        numba.types.int64,
        x.copy(ndim=2),  # x as the rows the product reads
        w,
        *numba_signature(rest, out),
        numba.types.Array(numba.types.int64, 1, "C"),  # the blocks' bounds
        numba.types.int64,  # column parts
    )
    try:
        driver = load_source(source).pooled
        driver.compile(signature)
    except Exception:  # never fail a compile over a fusion
        return None
    return PooledLinear(driver, *pool[:3], out.dtype)  # m, n, k


def _fuse(group: list[Node], value: Value) -> Node | None:
    product = value.node
    assert product is not None
    inputs = group_inputs(group)
    bias = _foldable_bias(product, value)
    if bias is not None:
        # The product without its bias (a throwaway node, for its kernels), and the
        # bias added by the epilogue's loop: one pass over the result, not two
        # (measured MiniLM at batch 1: 50 us a layer's linear, the bias's own pass).
        bare = Value(value.shape, value.dtype, value.device, site=value.site)
        product = Node(product.op, product.inputs[:2], product.static, [bare], site=product.site)
        if not any(a is bias for a in inputs):  # unless the epilogue reads the bias too
            inputs.append(bias)
    slot = inputs.index(value)
    program = build_program(group, inputs, None if bias is None else (value, bias))
    if program is None:
        return None
    rest = inputs[:slot] + inputs[slot + 1 :]
    # With an out form the product is written into the output buffer and the
    # epilogue reads it from there; otherwise it reads the product's own array.
    kernel = kernel_for(product)
    out_form = out_form_for(product, kernel)
    in_place = out_form is not None
    source = program.kernel_source(from_out=slot if in_place else None)
    root = group[-1].out
    pool = _pool_shape(product, rest) if in_place else None
    if pool is not None:
        source += "\n\n" + driver_source(root.ndim, pool[3])
    ew = compile_kernel(source, rest if in_place else inputs, root)
    if ew is None:
        return None
    pooled = None if pool is None else _pooled_driver(source, product, rest, root, pool)
    form = _wrapper(product, kernel, out_form, len(product.inputs), slot, rest, ew, pooled)
    form.precision = getattr(out_form, "precision", None)  # for explain()
    cost = node_cost(product) + fused_cost(group) - config.op_overhead_ns
    op = make_op(
        display_name("fused", [product.name, *program.names]),
        form,
        root.shape,
        root.dtype,
        max(cost, config.op_overhead_ns),
        len(product.inputs) + len(rest),
        elementwise=False,  # the product reads whole rows: never in place over its operands
        source=source,
    )
    return Node(op, [*product.inputs, *rest], {}, [root], site=group[-1].site)


def run(graph: Graph) -> int:
    """Fuse products with their elementwise epilogues in place; returns how many."""
    users = graph.users()
    outputs = {v.id for v in graph.outputs}
    done = []
    for group in find_groups(graph, elementwise_ok, same_size):
        value = next((v for v in group_inputs(group) if _product(v, group, users, outputs)), None)
        if value is None:
            continue
        node = _fuse(group, value)
        if node is None:
            continue
        assert value.node is not None
        done.append(([value.node, *group], node))
    replace_groups(graph, done)
    return len(done)
