"""eagerrt on Ray: what a remote call costs, and serving beside Ray Serve.

A local Ray cluster (no dashboard, no Serve HTTP proxy) runs, in interleaved
rounds within one run:

- **fixed cost**: a tiny compiled function (``x * 2`` on 4 floats) deployed with
  ``ert.distributed.deploy``, called from sync code (``model(x).numpy()``),
  against a bare Ray actor method doing the same in numpy
  (``ray.get(actor.f.remote(x))``) and against the function in process;
- **MiniLM at batch 1** (128 tokens, the real weights, compiled): one replica
  holding the machine's cores against the same compiled model in process;
- **MLP serving** (256-512-10, float32, seeded random weights; 64 concurrent
  asyncio callers each sending single rows back to back): an
  ``ert.serving.MicroBatcher`` in the caller feeding an ``ert.distributed``
  pool of 2 replicas x 1 CPU, against Ray Serve (the anchor): the same MLP in
  PyTorch behind ``@serve.batch``, 2 replicas x 1 CPU, ``max_ongoing_requests``
  raised so that batches can form, called through a ``DeploymentHandle``.
  Requests/s, p50 and p99 latency of each;
- **MiniLM serving** (128 tokens, 32 concurrent callers, 2 replicas x 1 CPU each
  side): the batcher in front of the remote compiled MiniLM against Ray Serve
  with ``@serve.batch`` around sentence-transformers' forward (torch, one
  thread per replica);
- **faults**: ``ert.pipeline.map`` over 1,000 items through a pool of 2
  replicas with ``retries=2``, one replica killed (``ray.kill``) part way:
  items lost, whether it finished within a timeout, its wall time against the
  same pipeline with no kill.

Both serving sides stay deployed for the whole comparison (Ray's CPU count is
logical: a cluster started here gets twice the machine's cores so that it can
place both), and only one side is loaded at a time, so each side has the
machine's cores to itself while measured. Their outputs are checked against a
numpy (MLP) or in-process (MiniLM) reference.

Targets (the issue's):

- the remote MiniLM b1 call <= 1.15x the call in process;
- MLP: eagerrt on Ray >= 5x Ray Serve's requests/s;
- MiniLM serving: >= 1.1x Ray Serve's requests/s, and a p99 latency <= its p99;
- faults: 0 items lost (and no hang).

``--quick`` (the smoke run) measures the fixed cost, the MLP serving in short
rounds and the fault pipeline on 100 items; ``run(quick=True, serve=False)``,
for callers inside a Ray cluster of their own, leaves out Ray Serve.

Ray is kept on the loopback (``ert.distributed.LOOPBACK_ENVIRONMENT``);
run it inside a network namespace of its own where you can
(``unshare -n sh -c 'ip link set lo up && python benchmarks/bench_distributed.py'``).

Run: ``python benchmarks/bench_distributed.py [--quick]`` (needs the
``distributed`` and ``models`` extras, and ``ray[serve]`` for the anchor).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

from _common import (
    Samples,
    add_row,
    add_target,
    bench_main,
    example_model,
    finish,
    interleave,
    interleave_async,
    minilm_batch,
    new_result,
)

T = TypeVar("T")

#: The MLP served: 256 -> 512 -> 10, relu between.
MLP_SIZES = (256, 512, 10)


def _per_call(call: Callable[[], Any], calls: int) -> Callable[[], float]:
    def measure() -> float:
        start = time.perf_counter()
        for _ in range(calls):
            call()
        return (time.perf_counter() - start) / calls * 1e3

    return measure


def tiny_factory() -> Any:
    import eagerrt as ert

    @ert.function
    def double(x: Any) -> Any:
        return x * 2

    return double


def minilm_factory(path: str) -> Any:
    return example_model("minilm").MiniLM.from_pretrained(path).compiled


def mlp_weights(seed: int = 24) -> tuple[Any, ...]:
    """The served MLP's weights (w1, b1, w2, b2), float32, seeded."""
    import numpy as np

    rng = np.random.default_rng(seed)
    n_in, n_hidden, n_out = MLP_SIZES
    return (
        (rng.standard_normal((n_in, n_hidden)) / np.sqrt(n_in)).astype(np.float32),
        (rng.standard_normal(n_hidden) * 0.1).astype(np.float32),
        (rng.standard_normal((n_hidden, n_out)) / np.sqrt(n_hidden)).astype(np.float32),
        (rng.standard_normal(n_out) * 0.1).astype(np.float32),
    )


def mlp_reference(x: Any, w1: Any, b1: Any, w2: Any, b2: Any) -> Any:
    import numpy as np

    return np.maximum(x @ w1 + b1, 0) @ w2 + b2


def mlp_factory(w1: Any, b1: Any, w2: Any, b2: Any) -> Any:
    """The MLP as an ``ert.function`` (runs on each replica)."""
    import eagerrt as ert

    W1, B1, W2, B2 = (ert.asarray(a) for a in (w1, b1, w2, b2))

    @ert.function
    def mlp(x: Any) -> Any:
        return ert.relu(x @ W1 + B1) @ W2 + B2

    return mlp


def run(
    quick: bool = False, *, rounds: int = 0, calls: int = 0, serve: bool = True
) -> dict[str, Any]:
    """A remote compiled call against the same call in process and a bare Ray call;
    serving against Ray Serve; a pipeline losing a replica."""
    rounds = rounds or (3 if quick else 7)
    calls = calls or (50 if quick else 300)
    result = new_result(
        "distributed",
        "eagerrt on Ray vs in process and Ray Serve",
        quick,
        {"rounds": rounds, "calls": calls, "serve": serve},
    )
    from eagerrt.distributed import LOOPBACK_ENVIRONMENT

    os.environ.update(LOOPBACK_ENVIRONMENT)  # before Ray is imported
    try:
        import ray
    except ImportError as exc:
        raise SystemExit(f"bench_distributed: skipped: {exc}") from None
    import numpy as np

    import eagerrt as ert

    cores = os.cpu_count() or 2
    started_here = not ray.is_initialized()
    if started_here:
        # Logical CPUs: twice the cores, so both serving sides (each replicas x 1
        # CPU = the machine's cores) stay placed while one is measured at a time.
        # address="local": a cluster of its own, even where another Ray runs on
        # this machine (ray.init would otherwise join the one it finds).
        ray.init(
            address="local",
            num_cpus=2 * cores,
            include_dashboard=False,
            log_to_driver=False,
            logging_level="error",
        )
    # This module's factories travel by value (Ray's workers can't import it), and
    # so does _common's example_model, which minilm_factory calls there.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.cloudpickle.register_pickle_by_value(sys.modules[example_model.__module__])
    serve_module = _serve(result) if serve else None
    try:
        _fixed_cost(result, ray, ert, np, rounds, calls)
        if not quick:
            _minilm(result, ert, cores, rounds, max(5, calls // 20))
        if serve_module is not None:
            _mlp_serving(result, ert, np, serve_module, rounds=2 if quick else 5,
                         seconds=1.0 if quick else 2.0)  # fmt: skip
            if not quick:
                _minilm_serving(result, ert, np, serve_module, rounds=3, seconds=5.0)
        _pipeline_fault(result, ray, ert, np, items=100 if quick else 1000,
                        num_cpus=0.25 if quick else 1.0)  # fmt: skip
    finally:
        if serve_module is not None:
            serve_module.shutdown()
        if started_here:
            ray.shutdown()
    return finish(result)


def _serve(result: dict[str, Any]) -> Any:
    """Ray Serve, started with no HTTP proxy (handles only); None, with a note, if
    it is not installed."""
    try:
        from ray import serve
    except ImportError as exc:
        result["notes"].append(f"Ray Serve is not installed (ray[serve]): anchors skipped: {exc}")
        return None
    logging.getLogger("ray.serve").setLevel(logging.ERROR)
    serve.start(proxy_location="Disabled", logging_config={"log_level": "ERROR"})
    return serve


def _in_new_loop(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """``asyncio.run(main())``, on a thread of its own if this one runs a loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(main())
    box: list[Any] = []

    def target() -> None:
        try:
            box.append((True, asyncio.run(main())))
        except BaseException as exc:
            box.append((False, exc))

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    ok, value = box[0]
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]


def _fixed_cost(
    result: dict[str, Any], ray: Any, ert: Any, np: Any, rounds: int, calls: int
) -> None:
    @ray.remote(num_cpus=0.5)
    class Bare:
        def f(self, x: Any) -> Any:
            return x * 2

    bare = Bare.remote()
    local = tiny_factory()
    x = np.ones(4, np.float32)
    with ert.distributed.deploy(tiny_factory, num_cpus=0.5, name="tiny") as remote:
        candidates = {
            "in process": _per_call(lambda: local(x).numpy(), calls),
            "bare Ray actor": _per_call(lambda: ray.get(bare.f.remote(x)), calls),
            "eagerrt remote": _per_call(lambda: remote(x).numpy(), calls),
        }
        for measure in candidates.values():
            measure()  # warm up: the remote trace, Ray's connections
        samples = interleave(candidates, rounds)
    ray.kill(bare)
    best = {name: samples.best(name) for name in candidates}
    result["figures"].update({f"tiny_{k.replace(' ', '_')}_ms": v for k, v in best.items()})
    for name in ("in process", "bare Ray actor"):
        add_row(result, f"tiny: {name}", best[name], "ms/call")
    ratio = best["eagerrt remote"] / best["bare Ray actor"]
    add_row(result, "tiny: eagerrt remote", best["eagerrt remote"], "ms/call", ratio,
            "bare Ray actor", samples.paired_ratio("eagerrt remote", "bare Ray actor"))  # fmt: skip
    result["figures"]["tiny_remote_vs_bare_ray"] = ratio


def _minilm(result: dict[str, Any], ert: Any, cores: int, rounds: int, calls: int) -> None:
    torch_reference = example_model("torch_reference")
    minilm_module = example_model("minilm")
    import ray

    ray.cloudpickle.register_pickle_by_value(minilm_module)
    path = str(torch_reference.minilm_path())
    local = minilm_factory(path)
    ids, mask = minilm_batch(1, 128)
    loop = asyncio.new_event_loop()

    async def once() -> Any:
        return await (await local(ert.asarray(ids), ert.asarray(mask)))

    def in_process() -> Any:
        return loop.run_until_complete(once())

    with ert.distributed.deploy(minilm_factory, path, num_cpus=cores, name="minilm") as remote:
        want = in_process()
        got = remote(ids, mask).numpy()
        assert np_allclose(got, want), "the remote MiniLM's embeddings differ"
        candidates = {
            "in process": _per_call(in_process, calls),
            "remote": _per_call(lambda: remote(ids, mask).numpy(), calls),
        }
        for measure in candidates.values():
            measure()
        samples = interleave(candidates, rounds)
    loop.close()
    best = {name: samples.best(name) for name in candidates}
    ratio = best["remote"] / best["in process"]
    add_row(result, "MiniLM b1: in process (compiled)", best["in process"], "ms/call")
    add_row(result, "MiniLM b1: remote, one replica", best["remote"], "ms/call", ratio,
            "in process", samples.paired_ratio("remote", "in process"))  # fmt: skip
    result["figures"]["minilm_remote_vs_in_process"] = ratio
    add_target(result, "minilm_overhead", "remote MiniLM b1 <= 1.15x in process", ratio, 1.15, "<=")


# -- serving: eagerrt (a MicroBatcher feeding a pool) against Ray Serve ------------------


class _Load:
    """Closed-loop load: ``callers`` tasks each sending one request at a time, back
    to back, for ``seconds``; each round's µs per request (for :class:`Samples`:
    less is better) and its latencies."""

    def __init__(
        self, call: Callable[[Any], Awaitable[Any]], inputs: Sequence[Any], callers: int,
        seconds: float,
    ) -> None:  # fmt: skip
        self.call, self.inputs, self.callers, self.seconds = call, inputs, callers, seconds
        self.latencies: list[list[float]] = []  # per round, seconds

    async def __call__(self) -> float:
        latencies: list[float] = []
        clock = time.perf_counter
        start = clock()
        deadline = start + self.seconds

        async def caller(k: int) -> None:
            i = k
            while clock() < deadline:
                sent = clock()
                await self.call(self.inputs[i % len(self.inputs)])
                latencies.append(clock() - sent)
                i += self.callers

        await asyncio.gather(*(caller(k) for k in range(self.callers)))
        elapsed = clock() - start
        self.latencies.append(latencies)
        return elapsed / len(latencies) * 1e6

    async def warm_up(self, seconds: float) -> None:
        """A round of ``seconds``, not kept."""
        kept = self.seconds
        self.seconds = seconds
        try:
            await self()
        finally:
            self.seconds = kept
            self.latencies.pop()

    def percentile(self, q: float) -> float:
        """The best round's ``q``-th latency percentile in ms (noise only adds time)."""
        import numpy as np

        return min(float(np.percentile(r, q)) * 1e3 for r in self.latencies)


def _serving_rows(
    result: dict[str, Any], label: str, samples: Samples, loads: dict[str, _Load], key: str
) -> tuple[float, float]:
    """Rows for one serving comparison; (throughput ratio, p99 ratio), eagerrt / Serve."""
    rps = {name: 1e6 / samples.best(name) for name in loads}
    p50 = {name: load.percentile(50) for name, load in loads.items()}
    p99 = {name: load.percentile(99) for name, load in loads.items()}
    ratio = rps["eagerrt"] / rps["Ray Serve"]
    p99_ratio = p99["eagerrt"] / p99["Ray Serve"]
    add_row(result, f"{label}: Ray Serve @serve.batch", rps["Ray Serve"], "req/s")
    add_row(result, f"{label}: eagerrt MicroBatcher -> pool", rps["eagerrt"], "req/s", ratio,
            "Ray Serve", samples.paired_ratio("Ray Serve", "eagerrt"))  # fmt: skip
    for name in loads:
        add_row(result, f"{label}: {name} p50", p50[name], "ms")
    for name in loads:
        vs = ("Ray Serve", p99_ratio) if name == "eagerrt" else ("", None)
        add_row(result, f"{label}: {name} p99", p99[name], "ms", vs[1], vs[0])
    result["figures"].update(
        {
            f"{key}_eagerrt_rps": rps["eagerrt"],
            f"{key}_serve_rps": rps["Ray Serve"],
            f"{key}_eagerrt_p50_ms": p50["eagerrt"],
            f"{key}_serve_p50_ms": p50["Ray Serve"],
            f"{key}_eagerrt_p99_ms": p99["eagerrt"],
            f"{key}_serve_p99_ms": p99["Ray Serve"],
            f"{key}_vs_serve": ratio,
            f"{key}_p99_vs_serve": p99_ratio,
        }
    )
    return ratio, p99_ratio


def _counts_since(before: dict[int, int], after: dict[int, int]) -> dict[int, int]:
    """How many batches of each size a batcher ran since ``before``."""
    return {n: k - before.get(n, 0) for n, k in after.items() if k > before.get(n, 0)}


def _mean_batch(sizes: dict[int, int]) -> float:
    return sum(n * k for n, k in sizes.items()) / max(sum(sizes.values()), 1)


def _compare(
    batcher: Any,
    asks: dict[str, Callable[[Any], Awaitable[Any]]],
    examples: Sequence[Any],
    want: Any,
    tolerance: tuple[float, float],
    callers: int,
    seconds: float,
    rounds: int,
    warm_up: float,
) -> tuple[Samples, dict[str, _Load], dict[int, int]]:
    """Each side checked against ``want`` on the first examples, warmed up (the
    replicas' traces, Serve's routers), then loaded in interleaved rounds; the
    samples, the loads (their latencies) and the batch sizes of the measured rounds."""
    import numpy as np

    loads = {name: _Load(ask, examples, callers, seconds) for name, ask in asks.items()}
    sizes: dict[int, int] = {}

    async def main() -> Samples:
        async with batcher:
            for ask in asks.values():
                got = np.stack([np.asarray(await ask(e)) for e in examples[: len(want)]])
                np.testing.assert_allclose(got, want, rtol=tolerance[0], atol=tolerance[1])
            for load in loads.values():
                await load.warm_up(min(seconds, warm_up))
            before = dict(batcher.statistics().batch_sizes)
            measured = await interleave_async(loads, rounds)
            sizes.update(_counts_since(before, batcher.statistics().batch_sizes))
            return measured

    return _in_new_loop(main), loads, sizes


def _batch_figures(
    result: dict[str, Any], key: str, sizes: dict[int, int], batch: int, seconds: float, rounds: int
) -> None:
    result["params"][f"{key}_seconds_per_round"] = seconds
    result["params"][f"{key}_rounds"] = rounds
    result["figures"][f"{key}_mean_batch"] = _mean_batch(sizes)
    result["figures"][f"{key}_full_batch_share"] = sizes.get(batch, 0) / max(sum(sizes.values()), 1)


def _warm_pool(remote: Any, buckets: Sequence[int], make: Callable[[int], tuple[Any, ...]]) -> None:
    """Every batch shape the batcher may send, once on each replica: the first call
    of a shape blocks on a round trip for its result's shapes, and each replica
    traces each shape once."""
    for size in buckets:
        args = make(size)
        outs = [remote(*args) for _ in range(remote.replicas)]
        for out in outs:
            out.numpy()


def _mlp_serving(
    result: dict[str, Any], ert: Any, np: Any, serve: Any, *, rounds: int, seconds: float
) -> None:
    callers, batch, replicas = 64, 64, 2
    weights = mlp_weights()
    rows = np.random.default_rng(7).standard_normal((256, MLP_SIZES[0])).astype(np.float32)
    want = mlp_reference(rows, *weights)

    @serve.deployment(
        num_replicas=replicas, ray_actor_options={"num_cpus": 1}, max_ongoing_requests=128
    )
    class TorchMLP:
        def __init__(self, w1: Any, b1: Any, w2: Any, b2: Any) -> None:
            import torch

            torch.set_num_threads(1)
            self.torch = torch
            self.net = torch.nn.Sequential(
                torch.nn.Linear(*w1.shape), torch.nn.ReLU(), torch.nn.Linear(*w2.shape)
            )
            with torch.no_grad():
                for layer, w, b in ((self.net[0], w1, b1), (self.net[2], w2, b2)):
                    layer.weight.copy_(torch.from_numpy(w.T.copy()))
                    layer.bias.copy_(torch.from_numpy(b))

        # Batches and wait as eagerrt's batcher's. Serve's throughput here is bound
        # by its per-request cost, not by these: batch 16/32/64, waits 0-10 ms and
        # max_ongoing_requests 32/128 measured alike (200-265 req/s, a busy machine).
        @serve.batch(max_batch_size=batch, batch_wait_timeout_s=0.002)
        async def __call__(self, rows: list[Any]) -> list[Any]:
            import numpy as np

            with self.torch.inference_mode():
                out = self.net(self.torch.from_numpy(np.stack(rows))).numpy()
            return list(out)

    handle = serve.run(TorchMLP.bind(*weights), name="mlp_anchor", route_prefix=None)
    with ert.distributed.deploy(
        mlp_factory, *weights, replicas=replicas, num_cpus=1, name="mlp"
    ) as remote:
        # Up to one batch in flight per replica. With 64 callers and batches of 64
        # there is mostly one full batch to send at a time (mean batch ~64), so
        # 1 to 4 measured alike within this machine's noise (5,100-7,600 req/s,
        # batches of 32 too); 2 lets a batch start on the idle replica whenever
        # callers are waiting while the other computes.
        batcher = ert.serving.MicroBatcher(
            remote, max_batch_size=batch, max_wait=0.002, max_concurrent_batches=replicas
        )
        assert batcher.buckets is not None
        _warm_pool(remote, batcher.buckets, lambda n: (rows[:n],))

        async def ask_eagerrt(row: Any) -> Any:
            return await batcher(row)

        async def ask_serve(row: Any) -> Any:
            return await handle.remote(row)

        asks = {"eagerrt": ask_eagerrt, "Ray Serve": ask_serve}
        samples, loads, sizes = _compare(
            batcher, asks, list(rows), want[:4], (1e-4, 1e-5), callers, seconds, rounds, 1.0
        )
    serve.delete("mlp_anchor")
    _batch_figures(result, "mlp", sizes, batch, seconds, rounds)
    ratio, _ = _serving_rows(result, "MLP 64 callers", samples, loads, "mlp")
    add_target(result, "mlp_vs_serve", "eagerrt on Ray >= 5x Ray Serve (MLP, 64 callers)",
               ratio, 5.0, ">=")  # fmt: skip


def _minilm_serving(
    result: dict[str, Any], ert: Any, np: Any, serve: Any, *, rounds: int, seconds: float
) -> None:
    import ray

    callers, batch, replicas = 32, 16, 2
    torch_reference = example_model("torch_reference")
    ray.cloudpickle.register_pickle_by_value(example_model("minilm"))
    path = str(torch_reference.minilm_path())
    ids, mask = minilm_batch(callers, 128)
    examples = list(zip(ids, mask, strict=True))

    @serve.deployment(
        num_replicas=replicas, ray_actor_options={"num_cpus": 1}, max_ongoing_requests=64
    )
    class TorchMiniLM:
        def __init__(self, path: str) -> None:
            import torch
            from sentence_transformers import SentenceTransformer

            torch.set_num_threads(1)
            self.torch = torch
            # torch_reference.sentence_transformer(), from the path the driver found
            self.model = SentenceTransformer(path, device="cpu")

        # Each replica gets ~16 of the 32 callers: batches of 16, as eagerrt's.
        @serve.batch(max_batch_size=batch, batch_wait_timeout_s=0.005)
        async def __call__(self, examples: list[tuple[Any, Any]]) -> list[Any]:
            import numpy as np

            torch = self.torch
            features = {
                "input_ids": torch.from_numpy(np.stack([e[0] for e in examples])),
                "attention_mask": torch.from_numpy(np.stack([e[1] for e in examples])),
            }
            with torch.inference_mode():
                out = self.model(features)["sentence_embedding"].numpy()
            return list(out)

    handle = serve.run(TorchMiniLM.bind(path), name="minilm_anchor", route_prefix=None)
    with ert.distributed.deploy(
        minilm_factory, path, replicas=replicas, num_cpus=1, name="minilm_pool"
    ) as remote:
        # As for the MLP: one batch in flight per replica.
        batcher = ert.serving.MicroBatcher(
            remote, max_batch_size=batch, max_wait=0.005, max_concurrent_batches=replicas
        )
        assert batcher.buckets is not None
        _warm_pool(remote, batcher.buckets, lambda n: (ids[:n], mask[:n]))
        want = remote(ids[:4], mask[:4]).numpy()

        async def ask_eagerrt(example: tuple[Any, Any]) -> Any:
            return await batcher(*example)

        async def ask_serve(example: tuple[Any, Any]) -> Any:
            return await handle.remote(example)

        asks = {"eagerrt": ask_eagerrt, "Ray Serve": ask_serve}
        samples, loads, sizes = _compare(
            batcher, asks, examples, want, (1e-3, 1e-4), callers, seconds, rounds, 2.0
        )
    serve.delete("minilm_anchor")
    _batch_figures(result, "minilm", sizes, batch, seconds, rounds)
    ratio, p99_ratio = _serving_rows(result, "MiniLM 32 callers", samples, loads, "minilm_serving")
    add_target(result, "minilm_vs_serve", "eagerrt on Ray >= 1.1x Ray Serve (MiniLM, 32 callers)",
               ratio, 1.1, ">=")  # fmt: skip
    add_target(result, "minilm_p99_vs_serve", "eagerrt p99 <= Ray Serve p99 (MiniLM)",
               p99_ratio, 1.0, "<=")  # fmt: skip


# -- faults: a replica killed under a pipeline ---------------------------------------------


def _pipeline_fault(
    result: dict[str, Any], ray: Any, ert: Any, np: Any, *, items: int, num_cpus: float
) -> None:
    """The same pipeline twice on one pool: once undisturbed, then with a replica
    killed when a third of the items have been read."""
    weights = mlp_weights()
    timeout = 120.0
    blocks = np.random.default_rng(11).standard_normal((items, 8, MLP_SIZES[0])).astype(np.float32)
    want = mlp_reference(blocks, *weights)
    with ert.distributed.deploy(
        mlp_factory, *weights, replicas=2, num_cpus=num_cpus, retries=2, name="fault"
    ) as remote:
        # The shapes' round trip, then a call on each replica (each traces the
        # model on its first call), before the clock.
        remote(blocks[0]).numpy()
        for out in [remote(blocks[0]) for _ in range(2)]:
            out.numpy()

        def once(kill: bool) -> tuple[int, bool, float, float]:
            """(items lost, finished in time, wall s, longest stall s) of one run."""
            killed: list[Any] = []
            done: list[float] = []

            def source(i: int) -> int:
                if kill and i == items // 3 and not killed:
                    victim = remote._replicas[0]
                    killed.append(victim)
                    ray.kill(victim.actor)
                return i

            async def call(i: int) -> Any:
                out = await remote(blocks[i])
                done.append(time.perf_counter())
                return out

            async def main() -> list[Any]:
                stage = ert.pipeline.map(source, range(items)).map(call, concurrency=8)
                return await asyncio.wait_for(stage.collect(), timeout)

            start = time.perf_counter()
            try:
                got: list[Any] = _in_new_loop(main)
                finished = True
            except TimeoutError:
                got, finished = [], False
            wall = time.perf_counter() - start
            assert not kill or killed, "the replica was never killed"
            lost = sum(
                1
                for i in range(items)
                if i >= len(got)
                or not np.allclose(np.asarray(got[i]), want[i], rtol=1e-4, atol=1e-5)
            )
            stamps = [start, *sorted(done)]
            stall = max(b - a for a, b in itertools.pairwise(stamps))
            return lost, finished, wall, stall

        calm = once(kill=False)
        lost, finished, wall, stall = once(kill=True)
    result["params"]["fault_items"] = items
    result["figures"].update(
        {
            "fault_items_lost": lost,
            "fault_finished": float(finished),
            "fault_wall_s": wall,
            "fault_calm_wall_s": calm[2],
            "fault_longest_stall_s": stall,
            "fault_calm_longest_stall_s": calm[3],
        }
    )
    add_row(result, f"pipeline {items} items, no kill", calm[2] * 1e3, "ms")
    add_row(result, f"pipeline {items} items, 1 of 2 killed", wall * 1e3, "ms",
            wall / calm[2], "no kill")  # fmt: skip
    # Where the time goes: the longest wait between two items finishing.
    add_row(result, "pipeline with a kill: longest stall", stall * 1e3, "ms")
    add_row(result, "pipeline with a kill: items lost", lost, "items")
    if not finished:
        result["notes"].append(f"the pipeline with a replica killed hung (> {timeout:g} s)")
    add_target(result, "fault_items_lost", "items lost with 1 of 2 replicas killed (and no hang)",
               lost if finished else float(items), 0.0, "<=")  # fmt: skip


def np_allclose(a: Any, b: Any) -> bool:
    import numpy as np

    return bool(np.allclose(a, b, rtol=1e-5, atol=1e-6))


def main(argv: list[str] | None = None) -> None:
    bench_main(run, argv)


if __name__ == "__main__":
    main()
