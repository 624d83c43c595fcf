"""The precision of a compiled function's matrix products: a setting, as the
ecosystem spells it (PyTorch's ``torch.set_float32_matmul_precision``, JAX's
``default_matmul_precision``, OpenVINO's ``INFERENCE_PRECISION_HINT``).

``"float32"`` (the default) keeps every product exact to float32, as it always
was. ``"bfloat16"`` lets a device multiply float32 products with bfloat16
operands and float32 accumulation (the CPU: linear layers, matmuls by a 2-D
operand and convolutions on AMX or AVX512-BF16; see
:mod:`eagerrt.backends.cpu.bf16`); normalizations, softmax, sums and every
elementwise op stay float32. It is asked for globally
(``ert.config.matmul_precision``, ``EAGERRT_MATMUL_PRECISION``) or per compiled
function (``ert.function(precision=...)``), and applies to compiled plans,
where weights are converted once, when the plan is made. Eager ops always run
in float32. A device or CPU that can't run bfloat16 products at speed raises
:class:`PrecisionError` at a compiled function's first call, whether the
global setting or the function asked.

While a backend compiles a graph, ``compiling()`` holds the graph's
precision, which the backend's out forms read with ``current()``.

>>> from eagerrt._core import precision
>>> precision.canonical("bf16")
'bfloat16'
>>> with precision.compiling("bfloat16"):
...     precision.current()
'bfloat16'
>>> precision.current()
'float32'
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

from .errors import ArgumentError, UsageError

__all__ = [
    "BFLOAT16",
    "FLOAT32",
    "PRECISIONS",
    "PrecisionError",
    "canonical",
    "compiling",
    "current",
]

FLOAT32 = "float32"
BFLOAT16 = "bfloat16"
#: The precisions a compiled function's products can be asked for.
PRECISIONS = (FLOAT32, BFLOAT16)
#: Other spellings users bring from other libraries.
_ALIASES = {
    "fp32": FLOAT32,
    "f32": FLOAT32,
    "highest": FLOAT32,
    "bf16": BFLOAT16,
}


class PrecisionError(UsageError):
    """A precision was asked for that this device or CPU can't deliver at
    speed (``bfloat16`` products on a CPU without AMX-BF16 or AVX512-BF16), or
    that graph mode can't apply (a graph spanning devices)."""


def canonical(name: object) -> str:
    """``name`` as one of :data:`PRECISIONS` (accepting ``"bf16"``, ``"fp32"``,
    ``"f32"``, ``"highest"``); raises :class:`~eagerrt.ArgumentError` for
    anything else."""
    if isinstance(name, str):
        key = name.strip().lower()
        if key in PRECISIONS:
            return PRECISIONS[PRECISIONS.index(key)]  # the interned constant
        if key in _ALIASES:
            return _ALIASES[key]
    raise ArgumentError(
        f"matmul precision must be one of {PRECISIONS} (or 'bf16', 'fp32', 'f32', "
        f"'highest'), got {name!r}"
    )


_compiling: contextvars.ContextVar[str] = contextvars.ContextVar(
    "eagerrt_compile_precision", default=FLOAT32
)


@contextlib.contextmanager
def compiling(precision: str) -> Iterator[None]:
    """The precision of the graph being compiled inside the block."""
    token = _compiling.set(canonical(precision))
    try:
        yield
    finally:
        _compiling.reset(token)


def current() -> str:
    """The precision of the graph being compiled now (``"float32"`` outside
    any compile)."""
    return _compiling.get()
