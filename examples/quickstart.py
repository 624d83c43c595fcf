"""eagerrt in two minutes: awaitable tensors, overlap, errors at your own line.

Run it with ``./dev demo``.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np

import eagerrt as ert

rng = np.random.default_rng(0)
weights = (
    rng.standard_normal((784, 256)).astype("float32") * 0.05,
    np.zeros(256, dtype="float32"),
    rng.standard_normal((256, 10)).astype("float32") * 0.05,
)
W1, b1, W2 = (ert.asarray(a) for a in weights)


def model(x: ert.Tensor) -> ert.Tensor:
    h = ert.relu(x @ W1 + b1)  # returns at once: h.shape and h.dtype are known now
    return ert.softmax(h @ W2, axis=-1)


async def fetch_batch(i: int) -> np.ndarray:
    """Stand-in for I/O: a network read or a disk load."""
    await asyncio.sleep(0.02)
    return rng.random((512, 784), dtype=np.float32)


async def main() -> None:
    # 1. Metadata now, data on await.
    x = ert.asarray(rng.random((32, 784), dtype=np.float32))
    y = model(x)
    print(f"1. model(x) -> {y!r}")
    probabilities = await y  # a read-only numpy.ndarray
    print(
        f"   await -> {type(probabilities).__name__}, rows sum to {probabilities.sum(axis=1)[:3]}"
    )

    # 2. Overlap I/O with compute: each batch's ops are launched without waiting;
    #    they run on worker threads while the loop awaits the next batch's input.
    start = time.perf_counter()
    launched = [model(ert.asarray(await fetch_batch(i))) for i in range(8)]
    io_done = time.perf_counter() - start
    results = [await out for out in launched]
    took = time.perf_counter() - start
    print(
        f"2. 8 batches: I/O {io_done * 1000:.0f} ms, I/O + compute {took * 1000:.0f} ms "
        f"({len(results)} results of shape {results[0].shape})"
    )

    # 3. A bad shape fails at the call, naming your line.
    try:
        ert.ones((3, 5)) @ W1
    except ert.ShapeError as err:
        print(f"3. call-time error:\n   {err}".replace("\n  ", "\n     "))

    # 4. A kernel failure surfaces when read, naming the op and where it was made.
    bad = ert.take(ert.arange(5), ert.asarray([9]))
    try:
        await (bad + 1)
    except ert.KernelError as err:
        print(f"4. run-time error:\n   {err}".replace("\n  ", "\n     "))

    print(f"5. {ert.stats()}")


if __name__ == "__main__":
    asyncio.run(main())
