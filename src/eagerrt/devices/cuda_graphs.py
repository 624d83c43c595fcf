"""Compiled plans on the cuda device, captured once into a CUDA graph and replayed.

A compiled function's plan (:mod:`eagerrt.graph.native_plan`) hands the cuda
device one callable that launches all its kernels on native arrays. Launching
them one by one costs the host several microseconds each (CuPy's own Python, then
the driver); a CUDA graph records the whole sequence once and replays it with one
launch, the way PyTorch's CUDA graphs and TFRT's GPU executables do.

:class:`CapturedPlan`:

1. the first call runs the kernels plainly (CuPy compiles and caches its kernels,
   cuBLAS picks its algorithms: nothing of that may happen during a capture);
2. the second call copies its inputs into buffers of the plan's own, and
   captures the kernels on the stream into a graph. The constants (weights) are
   read where they are: a weight replaced since, by a write, makes the plan
   capture again. Everything the kernels allocate comes from a memory pool of
   the plan's own, kept with the graph: the graph reads and writes those
   addresses on every replay, so no other work may be given that memory;
3. every call from then on, on the stream it was captured on, copies its
   inputs into those buffers, replays the graph, and copies the results out
   into fresh arrays (the caller owns them; the next replay overwrites the
   plan's). A call on another stream runs plainly.

A plan whose capture fails (a kernel that waits for the device, an op run on the
host) runs its kernels plainly from then on; ``capture_error`` says why.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from .device_checks import take_checks

__all__ = ["CapturedPlan"]

#: A plan's kernels: ``run(natives) -> result natives``.
Run = Callable[[list[Any]], list[Any]]


class CapturedPlan:
    """See the module docstring. ``__call__(stream, natives)`` runs on
    ``stream`` (the current CuPy stream) and returns ``(results, checks)``."""

    def __init__(self, cupy: Any, run: Run, inputs: int, *, capture: bool = True) -> None:
        self._cp = cupy
        self._run = run
        self._input_count = inputs
        self._capture_wanted = capture
        self.calls = 0
        #: Why the capture failed (the plan then runs plainly), or None.
        self.capture_error: BaseException | None = None
        self._graph: Any = None
        self._pool: Any = None
        self._inputs: list[Any] = []
        #: The constants (weights) the graph was captured reading.
        self._constants: list[Any] = []
        #: The stream it was captured on: replays stay there.
        self._stream: Any = None
        self._outputs: list[Any] = []
        self._checks: list[tuple[Any, str]] = []

    @property
    def captured(self) -> bool:
        """Whether calls replay a CUDA graph."""
        return self._graph is not None

    def __call__(self, stream: Any, natives: list[Any]) -> tuple[list[Any], list[Any]]:
        self.calls += 1
        if self._graph is None:
            if not self._capture_wanted or self.capture_error is not None or self.calls < 2:
                return self._plain(natives)
            try:
                self._capture(stream, natives)
            except Exception as exc:  # this plan runs plainly from now on
                self.capture_error = exc
                self._pool = None
                take_checks()
                return self._plain(natives)
        else:
            if stream is not self._stream:
                # The graph's buffers are ordered on the stream it was captured on;
                # a call on another stream could overwrite them while it replays.
                return self._plain(natives)
            count = self._input_count
            if any(a is not b for a, b in zip(natives[count:], self._constants, strict=True)):
                # A weight was replaced (written to) since the capture: the
                # graph reads the old one. Capture again on the next call.
                self._graph = self._pool = None
                self._constants = []
                self.calls = 1
                return self._plain(natives)
            for buffer, x in zip(self._inputs, natives[:count], strict=True):
                buffer[...] = x
        self._graph.launch(stream)
        outputs = [o.copy() for o in self._outputs]
        checks = [(flag.copy(), message) for flag, message in self._checks]
        return outputs, checks

    def _plain(self, natives: list[Any]) -> tuple[list[Any], list[Any]]:
        warm_up = self._graph is None and self.capture_error is None and self._capture_wanted
        with self._without_cub(warm_up):  # the warm-up: the kernels the capture will use
            outputs = self._run(natives)
        return outputs, take_checks()

    @contextlib.contextmanager
    def _without_cub(self, wanted: bool = True) -> Iterator[None]:
        """CuPy's reductions by its own kernels, not CUB's, inside the block (if
        ``wanted``): plain kernels are what a capture records best, and the warm-up must
        compile the same ones the capture launches (CuPy's setting is global: restored after)."""
        core = getattr(self._cp, "_core", None)
        if not wanted or core is None or not hasattr(core, "set_reduction_accelerators"):
            yield
            return
        reductions, routines = core.get_reduction_accelerators(), core.get_routine_accelerators()
        core.set_reduction_accelerators([])
        core.set_routine_accelerators([])
        try:
            yield
        finally:
            core.set_reduction_accelerators(reductions)
            core.set_routine_accelerators(routines)

    def _capture(self, stream: Any, natives: list[Any]) -> None:
        cp = self._cp
        pool = cp.cuda.MemoryPool()
        count = self._input_count
        with cp.cuda.using_allocator(pool.malloc), self._without_cub():
            # The inputs change from call to call: the graph reads copies of
            # its own. The constants are read where they are.
            inputs = [x.copy() for x in natives[:count]]
            mode = getattr(cp.cuda.runtime, "streamCaptureModeRelaxed", None)
            if mode is None:
                stream.begin_capture()
            else:
                stream.begin_capture(mode)
            try:
                outputs = self._run(inputs + natives[count:])
                checks = take_checks()
            except BaseException:
                with contextlib.suppress(Exception):  # an invalidated capture may refuse
                    stream.end_capture()  # the half-made graph is dropped
                raise
            graph = stream.end_capture()
        self._pool, self._inputs, self._graph, self._stream = pool, inputs, graph, stream
        self._constants = natives[count:]
        self._outputs, self._checks = outputs, checks
