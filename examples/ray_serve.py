"""An eagerrt model inside a Ray Serve deployment, batched with ``@serve.batch``.

Ray Serve owns the requests (HTTP or deployment handles, from many processes),
routes them to replicas and scales them; ``@serve.batch`` gathers each replica's
concurrent requests into one call. Inside that call the model is an
``ert.function``, and ``await`` on its result keeps the replica's event loop
free while eagerrt's workers compute: Serve goes on accepting requests and
forming the next batch, instead of stalling behind a blocking forward pass (the
question Ray's users keep asking about CPU inference in async actors).

Which shape to pick: with Serve when requests come from many clients or over
HTTP and Serve's routing and autoscaling are wanted; ``ert.distributed.deploy``
with a ``MicroBatcher`` in the caller (``examples/ray_scale_out.py``) when one
Python process (a pipeline, a batch job, a server of your own) is the client:
it batches before the process boundary and skips Serve's router.

Run it with ``python examples/ray_serve.py`` (needs ``pip install
'eagerrt[distributed]'``). It starts Serve without its HTTP proxy and calls
the deployment through a handle.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
from ray import serve

import eagerrt as ert

FEATURES, HIDDEN, CLASSES = 64, 256, 10


def build_classifier(seed: int) -> Any:
    """The model, its weights made (or loaded) once per replica."""
    rng = np.random.default_rng(seed)
    w1 = ert.asarray(rng.standard_normal((FEATURES, HIDDEN), dtype=np.float32) * 0.1)
    w2 = ert.asarray(rng.standard_normal((HIDDEN, CLASSES), dtype=np.float32) * 0.1)

    @ert.function
    def classify(x: ert.Tensor) -> ert.Tensor:
        return ert.softmax(ert.relu(x @ w1) @ w2, axis=-1)

    return classify


@serve.deployment(num_replicas=2, ray_actor_options={"num_cpus": 0.5}, max_ongoing_requests=64)
class Classifier:
    def __init__(self, seed: int) -> None:
        self.model = build_classifier(seed)

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.005)
    async def predict(self, rows: list[np.ndarray]) -> list[np.ndarray]:
        probabilities = await self.model(ert.asarray(np.stack(rows)))  # the loop stays free
        return list(probabilities)

    async def __call__(self, row: np.ndarray) -> np.ndarray:
        return await self.predict(row)


async def main(requests: int = 128) -> dict[str, Any]:
    import ray

    if not ray.is_initialized():
        ray.init(include_dashboard=False, log_to_driver=False)
    serve.start(proxy_location="Disabled")  # no HTTP proxy: calls come through a handle
    app = Classifier.bind(0)  # type: ignore[attr-defined]  # serve.deployment's class
    handle = serve.run(app, name="classifier", route_prefix=None)
    rows = np.random.default_rng(1).standard_normal((requests, FEATURES), dtype=np.float32)
    try:
        answers = await asyncio.gather(*(handle.remote(row) for row in rows))
    finally:
        serve.delete("classifier")
    print(f"{requests} requests, labels of the first 8:", np.argmax(answers[:8], axis=1))
    return {"answers": answers, "rows": rows}


if __name__ == "__main__":
    asyncio.run(main())
