"""``ert.serving``: micro-batching, so concurrent requests share one model call.

A :class:`MicroBatcher` queues the examples concurrent callers send, stacks up to
``max_batch_size`` of them into one batch (waiting at most ``max_wait`` seconds
after the oldest arrived), calls the model once and hands each caller its own
row of the result.

>>> import anyio, numpy as np, eagerrt as ert
>>> W = ert.asarray(np.eye(3, dtype="float32") * 2)
>>> @ert.function
... def model(x):                        # x: (batch, 3)
...     return ert.relu(x @ W)
>>> async def main():
...     async with ert.serving.MicroBatcher(model, max_batch_size=8) as batcher:
...         rows = [None] * 3
...         async def ask(i):
...             rows[i] = await batcher(np.full(3, i, "float32"))   # one example, (3,)
...         async with anyio.create_task_group() as tg:
...             for i in range(3):
...                 tg.start_soon(ask, i)
...     return [r.numpy().tolist() for r in rows], batcher.statistics().batch_sizes
>>> anyio.run(main)
([[0.0, 0.0, 0.0], [2.0, 2.0, 2.0], [4.0, 4.0, 4.0]], {3: 1})

Shapes. A compiled model (``ert.function``) is traced once per input shape, so a
batch is padded up to the next of a few *bucket* sizes (by default the powers of
two up to ``max_batch_size``, and ``max_batch_size`` itself): at most
``log2(max_batch_size) + 2`` traces, and at most twice the rows computed. The
padding repeats the last real example, so it is always a valid input.
``buckets=None`` runs batches at their exact size. Requests whose examples differ
in shape or dtype are batched separately (each with its own kind), so one odd
request can't fail anybody else's batch.

Failures. If the model raises (or a tensor it returns fails), every caller of
that batch, and only of that batch, gets a :class:`~eagerrt.BatchError` with the
model's exception chained. A caller cancelled before its batch forms is dropped
from the queue; one cancelled later doesn't disturb the batch, its row is just
not delivered. An example tensor is awaited before it is queued: if it failed,
its caller alone gets its :class:`~eagerrt.KernelError`. Leaving the
``async with`` block normally serves every request already queued, then stops;
leaving it with an error or a cancellation fails the requests still waiting
with a BatchError.
"""

from __future__ import annotations

import contextlib
import inspect
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, final

import anyio
import anyio.abc
import numpy as np

from ._core import ArgumentError, BatchError, UsageError
from .ops.creation import asarray
from .ops.manipulation import stack
from .pipeline import resolve
from .tensor import Tensor

__all__ = ["BatchError", "BatcherStatistics", "MicroBatcher", "pow2_buckets"]


def pow2_buckets(max_batch_size: int) -> tuple[int, ...]:
    """The default bucket sizes: powers of two below ``max_batch_size``, then it.

    >>> pow2_buckets(24)
    (1, 2, 4, 8, 16, 24)
    """
    sizes = [1 << k for k in range(max_batch_size.bit_length()) if 1 << k < max_batch_size]
    return (*sizes, max_batch_size)


@dataclass
class BatcherStatistics:
    """What a :class:`MicroBatcher` has done (``batcher.statistics()``)."""

    #: Requests answered (with a row or an error) and model calls made.
    requests: int = 0
    batches: int = 0
    #: How many batches had each number of real requests.
    batch_sizes: dict[int, int] = field(default_factory=dict)
    #: Rows added to reach a bucket size, summed over batches.
    padded_rows: int = 0
    #: Requests waiting for a batch right now.
    queued: int = 0

    @property
    def mean_batch_size(self) -> float:
        return sum(n * k for n, k in self.batch_sizes.items()) / max(self.batches, 1)


class _Request:
    __slots__ = ("arrived", "cancelled", "done", "error", "inputs", "kind", "result")

    def __init__(self, inputs: tuple[Any, ...], arrived: float) -> None:
        self.inputs = inputs
        # Examples of one kind (shapes, dtypes) stack into one batch.
        self.kind = tuple((x.shape, x.dtype) for x in inputs)
        self.arrived = arrived
        self.done = anyio.Event()
        self.result: Any = None
        self.error: BaseException | None = None
        self.cancelled = False


@final
class MicroBatcher:
    """Serve ``model`` to concurrent callers in batches (see the module's docs).

    ``model`` takes one batched tensor per input (a plain or async function, or
    an ``ert.function``) and returns a tensor, an array, or a tuple, list or dict
    of them, each with the batch as its first axis. ``await batcher(*example)``
    sends one example (no batch axis; a tensor, an array or anything
    ``numpy.asarray`` takes) and returns its row of each output, rows of
    tensors as ready tensors. ``max_concurrent_batches`` lets the next batch be
    formed and started while earlier ones still run.

    ``offload=True`` calls a model that isn't an ``async def`` on a worker
    thread, so the kernels a batch runs inline (a compiled model runs a batch
    under eagerrt's inline threshold on the calling thread) don't hold up the
    event loop; what it returns is awaited on the loop. Off by default: on the
    reference machine (2 cores, a FastAPI server beside its load generator) the
    thread hop and the GIL cost more than the ~1 ms batch (0.94x against 1.11x
    plain numpy's requests/s, ``benchmarks/bench_fastapi.py``).
    """

    def __init__(
        self,
        model: Callable[..., Any],
        *,
        max_batch_size: int = 32,
        max_wait: float = 0.002,
        buckets: Sequence[int] | str | None = "pow2",
        max_concurrent_batches: int = 1,
        offload: bool = False,
    ) -> None:
        if not callable(model):
            raise ArgumentError(f"MicroBatcher needs a model function, got {model!r}")
        if type(max_batch_size) is not int or max_batch_size < 1:
            raise ArgumentError(f"max_batch_size must be an int >= 1, got {max_batch_size!r}")
        if not isinstance(max_wait, int | float) or not max_wait >= 0:
            raise ArgumentError(
                f"max_wait must be seconds >= 0 (math.inf allowed), got {max_wait!r}"
            )
        if type(max_concurrent_batches) is not int or max_concurrent_batches < 1:
            raise ArgumentError(
                f"max_concurrent_batches must be an int >= 1, got {max_concurrent_batches!r}"
            )
        if buckets == "pow2":
            sizes: tuple[int, ...] | None = pow2_buckets(max_batch_size)
        elif buckets is None:
            sizes = None
        elif isinstance(buckets, str) or not all(type(b) is int and b > 0 for b in buckets):
            raise ArgumentError(f'buckets must be "pow2", None or positive ints, got {buckets!r}')
        else:
            sizes = tuple(sorted(set(buckets)))
            if sizes[-1] < max_batch_size:
                raise ArgumentError(
                    f"the largest bucket ({sizes[-1]}) is smaller than max_batch_size "
                    f"({max_batch_size}): a full batch would have no bucket"
                )
        self.model = model
        self.max_batch_size = max_batch_size
        self.max_wait = float(max_wait)
        self.buckets = sizes
        self.max_concurrent_batches = max_concurrent_batches
        # An async def model's work is awaited on the loop anyway: no thread hop.
        call = type(model).__call__  # an object's async __call__ (model is callable)
        is_async = inspect.iscoroutinefunction(model) or inspect.iscoroutinefunction(call)
        self.offload = bool(offload) and not is_async
        self._stats = BatcherStatistics()
        self._queue: deque[_Request] = deque()
        self._forming: list[_Request] = []  # the batch the collector is filling
        self._arrival: anyio.Event | None = None
        self._state = "new"  # -> "open" -> "closing" -> "closed"
        self._stack = contextlib.AsyncExitStack()
        self._tg: anyio.abc.TaskGroup | None = None
        self._slots: anyio.Semaphore | None = None

    def __repr__(self) -> str:
        return (
            f"<ert.serving.MicroBatcher {self._state} max_batch_size={self.max_batch_size} "
            f"max_wait={self.max_wait}>"
        )

    def statistics(self) -> BatcherStatistics:
        waiting = [*self._queue, *self._forming]
        self._stats.queued = sum(not r.cancelled for r in waiting)
        return self._stats

    # -- lifetime ----------------------------------------------------------------------
    async def __aenter__(self) -> MicroBatcher:
        if self._state != "new":
            raise UsageError(f"a MicroBatcher is entered once; this one is {self._state}")
        self._arrival = anyio.Event()
        self._slots = anyio.Semaphore(self.max_concurrent_batches)
        self._tg = await self._stack.enter_async_context(anyio.create_task_group())
        self._tg.start_soon(self._collect)
        self._state = "open"
        return self

    async def __aexit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        assert self._tg is not None
        self._state = "closing"
        if exc is not None:
            self._tg.cancel_scope.cancel()
        self._notify()  # the collector serves what is queued without waiting, then ends
        try:
            await self._stack.aclose()
        finally:
            self._state = "closed"
            for request in [*self._queue, *self._forming]:
                _answer(
                    request, error=BatchError("the MicroBatcher closed before this request ran")
                )
            self._queue.clear()
            self._forming = []

    # -- callers ------------------------------------------------------------------------
    async def __call__(self, *example: Any) -> Any:
        for x in example:  # first: the batcher may close meanwhile
            if isinstance(x, Tensor):  # a failed example: its caller's error, not its batch's
                await resolve(x)
        if self._state != "open":
            raise UsageError(
                f"this MicroBatcher is {self._state}: call it inside "
                "`async with MicroBatcher(model) as batcher:`"
            )
        if not example:
            raise ArgumentError("a MicroBatcher call needs the example's inputs, got none")
        inputs = tuple(x if isinstance(x, Tensor | np.ndarray) else np.asarray(x) for x in example)
        request = _Request(inputs, anyio.current_time())
        self._queue.append(request)
        self._notify()
        try:
            await request.done.wait()
        except BaseException:
            request.cancelled = True  # still queued: the collector drops it
            raise
        if request.error is not None:
            raise request.error
        return request.result

    def _notify(self) -> None:
        arrival, self._arrival = self._arrival, anyio.Event()
        if arrival is not None:
            arrival.set()

    # -- forming batches --------------------------------------------------------------
    async def _collect(self) -> None:
        assert self._tg is not None and self._slots is not None
        while True:
            await self._slots.acquire()
            batch: list[_Request] = []
            while not batch:
                formed = await self._form_one()
                if formed is None:  # closing and nothing left
                    self._slots.release()
                    return
                # Callers cancelled while the batch formed are left out; the rest run.
                batch = [r for r in formed if not r.cancelled]
            self._tg.start_soon(self._serve, batch)

    async def _form_one(self) -> list[_Request] | None:
        assert self._arrival is not None
        batch = self._forming = []
        while not self._take(None, batch):
            if self._state != "open":
                return None
            await self._arrival.wait()
        first = batch[0]
        deadline = first.arrived + self.max_wait
        while len(batch) < self.max_batch_size:
            self._take(first.kind, batch)
            remaining = deadline - anyio.current_time()
            if len(batch) >= self.max_batch_size or remaining <= 0 or self._state != "open":
                break
            with anyio.move_on_after(remaining):
                await self._arrival.wait()
        self._forming = []
        return batch

    def _take(self, kind: tuple[Any, ...] | None, batch: list[_Request]) -> list[_Request]:
        """Move queued requests of ``kind`` (any kind for the first) into ``batch``,
        dropping callers that were cancelled meanwhile."""
        batch[:] = [r for r in batch if not r.cancelled]
        kept: deque[_Request] = deque()
        for request in self._queue:
            if request.cancelled:
                continue
            if len(batch) < self.max_batch_size and (kind or request.kind) == request.kind:
                kind = request.kind
                batch.append(request)
            else:
                kept.append(request)
        self._queue = kept
        return batch

    # -- running a batch ----------------------------------------------------------------
    async def _serve(self, batch: list[_Request]) -> None:
        assert self._slots is not None
        n = len(batch)
        size = n if self.buckets is None else next(b for b in self.buckets if b >= n)
        stats = self._stats
        stats.batches += 1
        stats.batch_sizes[n] = stats.batch_sizes.get(n, 0) + 1
        stats.padded_rows += size - n
        try:
            columns = [[r.inputs[i] for r in batch] for i in range(len(batch[0].inputs))]
            padded = [rows + [rows[-1]] * (size - n) for rows in columns]
            inputs = [_stack_rows(rows) for rows in padded]
            if self.offload:  # boxed: an awaitable it returns is awaited here, on the loop
                (made,) = await anyio.to_thread.run_sync(lambda: (self.model(*inputs),))
            else:
                made = self.model(*inputs)
            outputs = await resolve(made)
            rows = [_row(outputs, i, size) for i in range(n)]
            for request, row in zip(batch, rows, strict=True):
                _answer(request, result=row)
        except Exception as error:
            for request in batch:
                failure = BatchError(
                    f"the model failed on a batch of {n} requests"
                    + (f" (padded to {size})" if size != n else "")
                    + f": {type(error).__name__}: {error}"
                )
                failure.__cause__ = error
                _answer(request, error=failure)
        finally:
            for request in batch:  # cancelled (the batcher is closing with an error)
                _answer(request, error=BatchError("the MicroBatcher closed while this batch ran"))
            stats.requests += n
            self._slots.release()


def _answer(request: _Request, *, result: Any = None, error: BaseException | None = None) -> None:
    if request.done.is_set():
        return
    request.result, request.error = result, error
    request.done.set()


def _stack_rows(rows: list[Any]) -> Tensor:
    if all(isinstance(r, np.ndarray) for r in rows):
        return asarray(np.stack(rows))  # one copy, no op per row
    return stack([asarray(r) for r in rows])


def _row(outputs: Any, i: int, size: int) -> Any:
    if isinstance(outputs, tuple | list):
        return type(outputs)(_row(o, i, size) for o in outputs)
    if isinstance(outputs, dict):
        return {k: _row(o, i, size) for k, o in outputs.items()}
    shape = getattr(outputs, "shape", None)
    if shape is None or len(shape) == 0 or shape[0] != size:
        what = type(outputs).__name__ if shape is None else f"shape {tuple(shape)}"
        raise ArgumentError(
            f"the model returned {what} for a batch of {size}: each output "
            "needs the batch as its first axis"
        )
    return outputs[i]
