"""Graph mode: compile an async model with ``ert.function`` and see what it did.

Run: ``python examples/graph_mode.py``. It prints the compiled plan of a small
MLP, times eager against compiled calls, shows that a compiled call allocates
no arrays once warm, and what happens with Python control flow on a value.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np

import eagerrt as ert

rng = np.random.default_rng(0)
W1 = ert.asarray(rng.standard_normal((784, 512), dtype=np.float32) * 0.05)
b1 = ert.zeros(512, dtype="float32")
W2 = ert.asarray(rng.standard_normal((512, 10), dtype=np.float32) * 0.05)


async def mlp(x: ert.Tensor) -> ert.Tensor:
    return ert.softmax(ert.relu(x @ W1 + b1) @ W2, axis=-1)


compiled_mlp = ert.function(mlp)  # the same function, traced once per input signature


@ert.function
async def clipped_score(x: ert.Tensor) -> ert.Tensor:
    score = x.sum(axis=-1)
    # `if score > 0:` would raise ert.TracingError (the value isn't known while
    # tracing); a data-dependent choice is written with ert.where or ert.cond:
    return ert.cond(score.sum() > 0, lambda s: s, lambda s: -s, score)


async def main() -> None:
    x = ert.asarray(rng.random((32, 784), dtype=np.float32))
    eager = await (await mlp(x))
    compiled = await (await compiled_mlp(x))  # first call: trace, optimize, lower
    print("compiled == eager:", bool(np.allclose(eager, compiled, rtol=1e-5, atol=1e-7)))

    explained = compiled_mlp.explain(x).splitlines()
    start = explained.index("optimized graph:")
    print("\n".join(explained[start : start + 12]))
    print(next(line for line in explained if line.startswith("memory plan")))

    for name, fn in (("eager", mlp), ("compiled", compiled_mlp)):
        t0 = time.perf_counter()
        for _ in range(200):
            await (await fn(x))
        print(f"{name:>8}: {(time.perf_counter() - t0) / 200 * 1e6:8.1f} us per call")

    try:

        @ert.function
        def branchy(x: ert.Tensor) -> ert.Tensor:
            return x if x.sum() > 0 else -x

        branchy(x)
    except ert.TracingError as exc:
        print("TracingError:", str(exc).splitlines()[-1])
    print("cond:", (await (await clipped_score(x - 0.5)))[:3].round(3))


if __name__ == "__main__":
    asyncio.run(main())
