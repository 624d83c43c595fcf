"""A model on a pool of Ray actors: called like a local one, batched, in a pipeline.

``ert.distributed.deploy`` puts the model on replicas that each build it once
(here from a seed; a real model loads its weights from a path). Calls return
tensors at once; the caller keeps its event loop free and overlaps its own
work with the replicas'. Two ways to feed the pool, both shown:

- a ``MicroBatcher`` in the caller, so that single-row requests cross the
  process boundary as batches (a Ray call costs a fraction of a millisecond:
  batch before you send);
- an ``ert.pipeline`` stage that calls the pool, with calls lost to a dying
  replica sent again (``retries``), so no item is lost.

Run it with ``python examples/ray_scale_out.py`` (needs ``pip install
'eagerrt[distributed]'``); it starts a local Ray cluster, or joins the one
``RAY_ADDRESS`` names.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

import eagerrt as ert

FEATURES, HIDDEN, CLASSES = 64, 256, 10


def build_classifier(seed: int) -> Any:
    """Runs on each replica: the model, its weights made (or loaded) there once."""
    rng = np.random.default_rng(seed)
    w1 = ert.asarray(rng.standard_normal((FEATURES, HIDDEN), dtype=np.float32) * 0.1)
    w2 = ert.asarray(rng.standard_normal((HIDDEN, CLASSES), dtype=np.float32) * 0.1)

    @ert.function
    def classify(x: ert.Tensor) -> ert.Tensor:
        """(batch, 64) -> (batch, 10) class probabilities."""
        return ert.softmax(ert.relu(x @ w1) @ w2, axis=-1)

    return classify


async def main(requests: int = 256, replicas: int = 2) -> dict[str, Any]:
    import ray

    if not ray.is_initialized():
        ray.init(include_dashboard=False, log_to_driver=False)
    rng = np.random.default_rng(1)
    rows = rng.standard_normal((requests, FEATURES), dtype=np.float32)
    with ert.distributed.deploy(
        build_classifier, 0, replicas=replicas, num_cpus=0.5, retries=2, name="classifier"
    ) as classifier:
        # One call: a tensor at once, its shape from the model's trace.
        probabilities = classifier(rows[:4])
        print("a batch of 4 ->", probabilities.shape, probabilities.dtype)
        print("row sums:", np.round(await probabilities, 4).sum(axis=1))

        # Many single-row requests, batched in the caller before they travel.
        async with ert.serving.MicroBatcher(
            classifier, max_batch_size=64, max_concurrent_batches=replicas
        ) as batcher:
            answers = await asyncio.gather(*(batcher(row) for row in rows))
        sizes = batcher.statistics().batch_sizes
        print(f"{requests} single-row requests went as {sum(sizes.values())} batches: {sizes}")

        # A pipeline stage over the pool: order kept, a bounded number in flight.
        stage = ert.pipeline.map(lambda i: classifier(rows[i : i + 8]), range(0, requests, 8))
        labels = [np.argmax(np.asarray(batch), axis=1) for batch in await stage.collect()]
        print("labels of the first 8 rows:", labels[0])
    return {"answers": answers, "labels": np.concatenate(labels), "rows": rows}


if __name__ == "__main__":
    asyncio.run(main())
