"""eagerrt as an einops backend: ``einops.rearrange(t, "b c h w -> b (h w) c")`` on tensors.

einops' top-level functions find a tensor's backend among the subclasses of its
``AbstractBackend`` whose ``framework_name`` module is imported. So the
subclass must exist once einops does, whichever of the two is imported first,
without ``import eagerrt`` importing einops: :func:`install` (called by ``import
eagerrt``) defines it at once if einops is already loaded, else waits for
einops' backend module to load (an import hook that removes itself then).

Every method is eagerrt ops, so the results are tensors and run asynchronously
like any other op (``einops.array_api`` works as well, through the Array API).

>>> import einops, numpy as np, eagerrt as ert
>>> t = ert.asarray(np.arange(24.0).reshape(2, 3, 4))
>>> y = einops.rearrange(t, "b c (h w) -> b (h w c)", h=2)
>>> type(y).__name__, y.shape
('Tensor', (2, 12))
>>> einops.reduce(t, "b c x -> b", "max").numpy().tolist()
[11.0, 23.0]
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
from collections.abc import Sequence
from types import ModuleType
from typing import Any

__all__ = ["EagerrtBackend", "install"]

#: The backend class, once einops is loaded (None before).
EagerrtBackend: Any = None

_BACKENDS_MODULE = "einops._backends"
_lock = threading.Lock()


def _define(backends: ModuleType) -> None:
    """Define the backend class, a subclass of einops' ``AbstractBackend``."""
    global EagerrtBackend
    with _lock:
        if EagerrtBackend is not None:
            return
        import eagerrt as ert

        class _Backend(backends.AbstractBackend):  # type: ignore[name-defined]
            framework_name = "eagerrt"

            def is_appropriate_type(self, tensor: Any) -> bool:
                return isinstance(tensor, ert.Tensor)

            def from_numpy(self, x: Any) -> Any:
                return ert.asarray(x)

            def to_numpy(self, x: Any) -> Any:
                return x.numpy()

            def arange(self, start: int, stop: int) -> Any:
                return ert.arange(start, stop)

            def shape(self, x: Any) -> tuple[int, ...]:
                return tuple(x.shape)

            def reshape(self, x: Any, shape: Sequence[int]) -> Any:
                return ert.reshape(x, tuple(shape))

            def transpose(self, x: Any, axes: Sequence[int]) -> Any:
                return ert.permute_dims(x, tuple(axes))

            def reduce(self, x: Any, operation: str, axes: Sequence[int]) -> Any:
                return getattr(ert, operation)(x, axis=tuple(axes))

            def stack_on_zeroth_dimension(self, tensors: list[Any]) -> Any:
                return ert.stack(tensors)

            def add_axis(self, x: Any, new_position: int) -> Any:
                return ert.expand_dims(x, axis=new_position)

            def tile(self, x: Any, repeats: Sequence[int]) -> Any:
                return ert.tile(x, tuple(repeats))

            def concat(self, tensors: list[Any], axis: int) -> Any:
                return ert.concat(tensors, axis=axis)

            def is_float_type(self, x: Any) -> bool:
                return bool(x.dtype.kind in "fc")

            def einsum(self, pattern: str, *x: Any) -> Any:
                return ert.einsum(pattern, *x)

        _Backend.__name__ = _Backend.__qualname__ = "EagerrtBackend"
        _Backend.__module__ = __name__
        EagerrtBackend = _Backend


class _DefineAfterLoad(importlib.abc.Loader):
    """einops' backend module's own loader, then :func:`_define` on the module."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        _define(module)


class _Hook(importlib.abc.MetaPathFinder):
    """Waits for einops' backend module to be imported; then steps aside."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != _BACKENDS_MODULE:
            return None
        if self in sys.meta_path:  # find the real spec without this hook, and only once
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _DefineAfterLoad(spec.loader)
        return spec


_hook = _Hook()


def install() -> None:
    """Make eagerrt an einops backend now (einops loaded) or when einops loads."""
    backends = sys.modules.get(_BACKENDS_MODULE)
    if backends is not None:
        _define(backends)
    elif _hook not in sys.meta_path:
        sys.meta_path.insert(0, _hook)
