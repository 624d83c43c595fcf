"""MKL's ``cblas_?gemm`` called from numba code, through its address.

A numba kernel that runs many small products in a parallel loop (attention's
two products per head) calls BLAS from inside the loop, on whichever worker
runs the iteration. ctypes functions can be called from numba too, but their
address becomes a constant of the compiled code, which numba then refuses to
cache on disk; here the address is an argument
(:func:`eagerrt.backends.cpu.blas.gemm_address`), so the kernel compiles once
per machine, not once per process.

Row-major only; ``a`` as stored, ``b`` as stored or transposed. Pointers are
byte addresses (``x.ctypes.data`` plus offsets) and dimensions MKL's 32-bit ints.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import types
from numba.core.extending import intrinsic

__all__ = ["ROW_MAJOR", "NO_TRANS", "TRANS", "gemm"]

#: CBLAS's enum values.
ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112


def _gemm_typer(
    typingctx: Any,
    address: Any,
    trans_b: Any,
    m: Any,
    n: Any,
    k: Any,
    alpha: Any,
    a: Any,
    lda: Any,
    b: Any,
    ldb: Any,
    beta: Any,
    c: Any,
    ldc: Any,
) -> Any:
    ints = (address, trans_b, m, n, k, a, lda, b, ldb, c, ldc)
    if not all(isinstance(t, types.Integer) for t in ints):
        return None
    if alpha not in (types.float32, types.float64) or beta != alpha:
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        i32 = ir.IntType(32)
        byte_ptr = ir.IntType(8).as_pointer()
        real = context.get_value_type(alpha)
        fnty = ir.FunctionType(
            ir.VoidType(), [i32] * 6 + [real, byte_ptr, i32, byte_ptr, i32, real, byte_ptr, i32]
        )
        tys = signature.args

        def arg(i: int) -> Any:  # alpha and beta as they are, a, b and c as pointers, else int32
            if i in (5, 10):
                return args[i]
            if i in (6, 8, 11):
                address = context.cast(builder, args[i], tys[i], types.intp)
                return builder.inttoptr(address, byte_ptr)
            return context.cast(builder, args[i], tys[i], types.int32)

        fn = builder.inttoptr(context.cast(builder, args[0], tys[0], types.intp), fnty.as_pointer())
        order, no_trans = ir.Constant(i32, ROW_MAJOR), ir.Constant(i32, NO_TRANS)
        builder.call(fn, [order, no_trans, *map(arg, range(1, 13))])
        return context.get_dummy_value()

    return types.none(address, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc), codegen


#: ``gemm(address, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)`` in
#: numba code: ``c = alpha * a @ op(b) + beta * c``, row-major, ``op(b)`` being
#: ``b`` transposed when ``trans_b`` is :data:`TRANS`; ``address`` is MKL's
#: ``cblas_sgemm`` for float32 scalars, ``cblas_dgemm`` for float64.
gemm: Any = intrinsic(_gemm_typer)
