"""One replica of a deployed model: the Ray actor that builds it and runs its calls.

The actor builds the model once, from the factory and arguments it was deployed
with (a path to load weights from, or an ``ObjectRef`` of them in Ray's object
store), so weights never travel with a call. It is a *threaded* actor: calls run
on a few of Ray's threads at once (``max_concurrency``), each waiting for its
tensors while eagerrt's workers compute them, so calls to one replica overlap.
Not an async actor: Ray's round trip to one measured 1-2 ms slower here (4.6-6.2
against 2.9-3.8 ms for a 4-float call), and an async model (an ``ert.function``
of an ``async def``) runs on an event loop of the calling thread's own instead.

Arrays cross the process boundary as numpy arrays (Ray's object store hands
large ones over without a copy, read-only, as eagerrt's own are); a call's
results go back flattened, the caller knowing their structure from
:meth:`Replica.spec`.

This module never imports Ray: :mod:`eagerrt.distributed.remote_model` makes the
actor class from :class:`Replica` with ``ray.remote``.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import threading
from collections.abc import Callable
from typing import Any

import numba
import numpy as np

from .. import _core
from ..backends.cpu import blas, threads
from ..graph import pytree
from ..graph.function import Function
from ..ops.creation import asarray
from ..tensor import Tensor

__all__ = ["LOOPBACK_ENVIRONMENT", "ArraySpec", "Replica", "ReplicaLost", "thread_environment"]

#: The environment variables that size a process's thread pools: eagerrt's
#: workers, numba's loops, MKL, OpenBLAS and OpenMP. Ray sets only
#: ``OMP_NUM_THREADS`` in its workers; everything else would size itself from
#: the node's cores (a 1-CPU actor on a 64-core node starting 128 threads).
THREAD_VARIABLES = (
    "EAGERRT_NUM_THREADS",
    "NUMBA_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "OMP_NUM_THREADS",
)


def thread_environment(num_cpus: float) -> dict[str, str]:
    """The environment that holds a process to the ``num_cpus`` Ray granted it
    (at least one thread each).

    >>> thread_environment(2)["NUMBA_NUM_THREADS"]
    '2'
    """
    threads = str(max(1, int(num_cpus)))
    return dict.fromkeys(THREAD_VARIABLES, threads)


#: The environment that keeps a one-machine Ray cluster on the loopback, for
#: machines that must send nothing beyond it (eagerrt's tests and benchmarks).
#: Ray probes the network at start-up even with its dashboard and usage
#: statistics off: a UDP socket towards a public resolver to learn its own
#: address (from the driver and its runtime-environment agent), and
#: cloud-metadata requests from its dashboard process, which no setting
#: disables. With these its address is 127.0.0.1 (every listener binds the
#: loopback) and the metadata requests go to a closed local port through a
#: proxy; checked with strace in a loopback-only network namespace: no
#: ``connect()`` beyond 127.0.0.0/8 and ::1. Set them before Ray is imported
#: (it reads the first then).
LOOPBACK_ENVIRONMENT = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    "http_proxy": "http://127.0.0.1:9",
    "no_proxy": "127.0.0.1,localhost,::1",
}


class ReplicaLost(_core.EagerError, RuntimeError):
    """A replica of a deployed model died with this call in flight (its process
    or its node was lost; ``__cause__`` is Ray's error; the pool has started
    another), or no replica could build the model (the factory failed)."""


#: (shape, dtype name) of an array argument or result.
ArraySpec = tuple[tuple[int, ...], str]


class _ShapeDtype:
    """An array by its shape and dtype only: an argument :meth:`Replica.spec`
    is asked about, or a traced output standing for its tensor."""

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> None:
        self.shape, self.dtype = shape, dtype


def example_arguments(leaves: list[Any]) -> list[Any]:
    """The leaves as :meth:`Replica.spec` takes them: arrays by shape and dtype."""
    return [
        _ShapeDtype(leaf.shape, leaf.dtype) if isinstance(leaf, Tensor | np.ndarray) else leaf
        for leaf in leaves
    ]


class Replica:
    """The model ``factory(*args, **kwargs)`` builds, serving calls."""

    def __init__(self, factory: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]):
        # A failing factory is kept, not raised: Ray would report it as the
        # actor's death, with the factory's exception flattened to text.
        self.failure: ReplicaLost | None = None
        try:
            self.model = factory(*args, **kwargs)
            if not callable(self.model):
                raise _core.UsageError(
                    f"the factory {factory!r} returned {type(self.model).__name__}, "
                    "not a callable model"
                )
        except Exception as exc:
            self.failure = ReplicaLost(
                f"no replica could build the model: {type(exc).__name__}: {exc}"
            )
            self.failure.__cause__ = exc

    def ready(self) -> ReplicaLost | None:
        """Answers once the model is built: None, or why it could not be."""
        return self.failure

    def call(self, tree: Any, *leaves: Any) -> list[np.ndarray]:
        """The model on ``unflatten(tree, leaves)`` (arrays as tensors): its
        results' arrays, flattened. (The leaves come as arguments of their own:
        Ray sends a numpy argument without pickling it, not one inside a list;
        measured 0.5 ms less per call.)"""
        try:
            return self._run(list(leaves), tree)[0]
        except _core.KernelError as exc:
            # A KernelError is also of its cause's type only in this process (its
            # class is made here): the caller gets the cause itself, of a type
            # that pickles (np.linalg.LinAlgError for a singular matrix), with
            # where it failed here as a note.
            cause = exc.__cause__
            if not isinstance(cause, Exception):
                raise
            cause.add_note(f"on a replica: {exc}")
            raise cause from None

    def spec(self, leaves: list[Any], tree: Any) -> tuple[Any, list[ArraySpec]]:
        """The structure and the arrays' shapes and dtypes of the model's result
        for arguments of these shapes and dtypes (``_ShapeDtype`` leaves). An
        ``ert.function`` is traced for them (compiled, not run); another model
        is run once on zeros of them."""
        if self.failure is not None:
            raise self.failure
        zeros = [
            np.zeros(leaf.shape, leaf.dtype) if isinstance(leaf, _ShapeDtype) else leaf
            for leaf in leaves
        ]
        if isinstance(self.model, Function):
            args, kwargs = pytree.unflatten(tree, [_as_input(leaf) for leaf in zeros])
            compiled = self.model.compiled_for(*args, **kwargs)
            specs = [_ShapeDtype(v.shape, v.dtype) for v in compiled.graph.outputs]
            out_leaves, out_tree = pytree.flatten(compiled.finish(specs))  # type: ignore[arg-type]
            return out_tree, [_spec_of(leaf) for leaf in out_leaves]
        arrays, out_tree = self._run(zeros, tree)
        return out_tree, [(a.shape, a.dtype.str) for a in arrays]

    def threads(self) -> dict[str, int | None]:
        """The thread counts in force in this process (what a ``num_cpus``
        deployment is checked by)."""
        mkl = blas._active()
        openblas = threads._blas_local()
        return {
            "eagerrt": _core.config.num_threads,
            "numba": numba.get_num_threads(),
            "mkl": None if mkl is None else mkl.max_threads(),
            "openblas": None if openblas is None else threads._blas_default_threads,
            "cpu_count": os.cpu_count(),
        }

    def _run(self, leaves: list[Any], tree: Any) -> tuple[list[np.ndarray], Any]:
        if self.failure is not None:
            raise self.failure
        args, kwargs = pytree.unflatten(tree, [_as_input(leaf) for leaf in leaves])
        result = self.model(*args, **kwargs)
        if inspect.isawaitable(result):
            result = _event_loop().run_until_complete(_awaited(result))
        out_leaves, out_tree = pytree.flatten(result)
        return [_as_array(leaf) for leaf in out_leaves], out_tree


def _spec_of(leaf: Any) -> ArraySpec:
    if isinstance(leaf, _ShapeDtype):
        return leaf.shape, leaf.dtype.str
    array = np.asarray(leaf)  # a constant the function returns as it is
    return array.shape, array.dtype.str


def _as_input(leaf: Any) -> Any:
    return asarray(leaf) if isinstance(leaf, np.ndarray) else leaf


def _as_array(leaf: Any) -> np.ndarray:
    return leaf.numpy() if isinstance(leaf, Tensor) else np.asarray(leaf)


async def _awaited(result: Any) -> Any:
    return await result


_loops = threading.local()


def _event_loop() -> asyncio.AbstractEventLoop:
    """This thread's event loop for async models (Ray's threads have none)."""
    loop: asyncio.AbstractEventLoop | None = getattr(_loops, "loop", None)
    if loop is None:
        loop = _loops.loop = asyncio.new_event_loop()
    return loop
