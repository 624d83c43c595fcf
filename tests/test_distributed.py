"""eagerrt on Ray (``ert.distributed``): remote models called like local ones.

One local Ray cluster (2 CPUs, no dashboard) serves the whole module, and each
deployment is shared by the tests that only call it: starting Ray and an actor
cost seconds. Ray is started so that it contacts nothing beyond the loopback
(``tests/ray_loopback.py``); ``./dev test`` also runs the suite in a network
namespace of its own where it can.
"""

from __future__ import annotations

import asyncio
import importlib.util
import pathlib
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import eagerrt as ert
import ray_loopback  # noqa: F401 - before Ray is imported

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    # The factories below live in this test module, which Ray's workers can't
    # import: they travel by value.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    # address="local": a cluster of the tests' own, even where another Ray runs here.
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        logging_level="error",
    )
    try:
        yield
    finally:
        ray.shutdown()


W = np.arange(12, dtype=np.float32).reshape(4, 3) / 10


def mlp_factory(scale: float) -> Any:
    weight = ert.asarray(W * scale)

    @ert.function
    def model(x: ert.Tensor) -> dict[str, ert.Tensor]:
        h = x @ weight
        return {"relu": ert.relu(h - 1), "total": ert.sum(h, axis=1)}

    return model


def local_mlp(x: np.ndarray, scale: float = 2.0) -> dict[str, np.ndarray]:
    h = x @ (W * scale)
    return {"relu": np.maximum(h - 1, 0), "total": h.sum(axis=1)}


def checked_factory() -> Any:
    @ert.function
    def model(x: ert.Tensor) -> ert.Tensor:
        if x.shape[-1] != 4:
            raise ValueError(f"the model takes 4 features, not {x.shape[-1]}")
        return ert.linalg.inv(x)  # traced for its shapes, never run on zeros

    return model


def sleepy_factory(seconds: float) -> Any:
    def model(x: ert.Tensor) -> ert.Tensor:
        time.sleep(seconds)
        return x * 2

    return model


def failing_factory() -> Any:
    raise FileNotFoundError("weights.safetensors")


@pytest.fixture(scope="module")
def mlp(ray_cluster: None) -> Iterator[Any]:
    with ert.distributed.deploy(mlp_factory, 2.0, replicas=2, num_cpus=0.25, name="mlp") as model:
        model.ready(timeout=120)  # both replicas serve (calls go to started ones first)
        yield model


@pytest.fixture(scope="module")
def checked(ray_cluster: None) -> Iterator[Any]:
    with ert.distributed.deploy(checked_factory, num_cpus=0.25, name="checked") as model:
        yield model


def x_rows(n: int, offset: float = 0.0) -> np.ndarray:
    return (np.arange(n * 4, dtype=np.float32).reshape(n, 4) + offset) / 7


# -- calls ---------------------------------------------------------------------
def test_a_call_returns_pending_tensors_with_the_traced_shapes_and_the_right_values(
    mlp: Any,
) -> None:
    x = x_rows(3)
    out = mlp(x)
    assert set(out) == {"relu", "total"}
    assert (out["relu"].shape, out["relu"].dtype) == ((3, 3), np.float32)
    assert (out["total"].shape, out["total"].dtype) == ((3,), np.float32)
    want = local_mlp(x)
    np.testing.assert_allclose(out["relu"].numpy(), want["relu"], rtol=1e-6)
    np.testing.assert_allclose(out["total"].numpy(), want["total"], rtol=1e-6)
    assert out["relu"].op == "mlp"


def test_local_ops_wait_on_remote_results_and_remote_calls_on_pending_tensors(mlp: Any) -> None:
    x = ert.asarray(x_rows(2)) + 1  # maybe pending when the remote call is made
    first = mlp(x)["relu"]
    assert not first.is_ready() or first.shape == (2, 3)
    chained = mlp(ert.concat([first, first[:, :1]], axis=1))["total"]  # remote on remote
    doubled = chained * 2  # a local op on a pending remote result
    step = local_mlp(x_rows(2) + 1)["relu"]
    want = local_mlp(np.concatenate([step, step[:, :1]], axis=1))["total"] * 2
    np.testing.assert_allclose(doubled.numpy(), want, rtol=1e-5)


@pytest.mark.anyio
async def test_remote_results_are_awaitable_on_every_event_loop(mlp: Any) -> None:
    outs = [mlp(x_rows(2, offset=i))["total"] for i in range(8)]
    got = [await t for t in outs]
    for i, value in enumerate(got):
        np.testing.assert_allclose(value, local_mlp(x_rows(2, offset=i))["total"], rtol=1e-6)


def test_calls_spread_over_the_replicas(mlp: Any) -> None:
    before = [r.calls for r in mlp._replicas]
    outs = [mlp(x_rows(1, offset=i))["total"] for i in range(16)]
    for t in outs:
        t.numpy()
    served = [r.calls - b for r, b in zip(mlp._replicas, before, strict=True)]
    assert sum(served) == 16 and min(served) >= 3, served


def test_asyncio_gather_over_remote_tensors(mlp: Any) -> None:
    async def main() -> list[np.ndarray]:
        return await asyncio.gather(*(mlp(x_rows(1, offset=i))["relu"] for i in range(4)))

    got = asyncio.run(main())
    assert [g.shape for g in got] == [(1, 3)] * 4


def test_large_results_arrive_without_a_copy_and_eagerrt_never_writes_into_them(
    mlp: Any,
) -> None:
    x = x_rows(100_000)  # 1.2 MB of results: Ray hands them over from its object store
    out = mlp(x)["relu"]
    value = out.numpy()
    assert not value.flags.writeable
    out += 1  # in place on eagerrt's side: a new buffer, Ray's stays as it was
    np.testing.assert_allclose(out.numpy(), local_mlp(x)["relu"] + 1, rtol=1e-5)
    np.testing.assert_allclose(value, local_mlp(x)["relu"], rtol=1e-5)


def test_an_onnx_model_loaded_on_the_replica_from_a_path(
    ray_cluster: None, tmp_path: pathlib.Path
) -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Relu", ["xw"], ["y"])],
        "remote",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["batch", 3])],
        [numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    path = tmp_path / "remote.onnx"
    path.write_bytes(model.SerializeToString())
    with ert.distributed.deploy(ert.onnx.load, str(path), num_cpus=0.25) as remote:
        x = rng.standard_normal((5, 4)).astype(np.float32)
        y = remote(x)
        assert (y.shape, y.dtype) == ((5, 3), np.float32)
        np.testing.assert_allclose(y.numpy(), np.maximum(x @ w, 0), rtol=1e-5)


# -- errors ----------------------------------------------------------------------
def test_the_models_own_error_is_read_on_await_naming_the_callers_line(checked: Any) -> None:
    x = np.eye(4) * 2
    np.testing.assert_allclose(checked(x).numpy(), np.eye(4) / 2)
    t = checked(np.ones((4, 4)))  # singular: the kernel fails on the replica
    with pytest.raises(np.linalg.LinAlgError) as info:
        t.numpy()
    assert isinstance(info.value, ert.KernelError)
    assert "checked" in str(info.value) and "test_distributed.py" in str(info.value)


def test_a_pipeline_stage_on_a_pool_names_the_failing_item(checked: Any) -> None:
    items = [np.eye(4), np.eye(4) * 2, np.ones((4, 4)), np.eye(4)]

    async def main() -> list[Any]:
        return await ert.pipeline.map(checked, items, name="invert").collect()

    with pytest.raises(ert.PipelineError) as info:
        asyncio.run(main())
    assert (info.value.stage, info.value.index) == ("invert", 2)
    assert isinstance(info.value.__cause__, np.linalg.LinAlgError)


def test_a_wrong_shape_raises_at_the_call(checked: Any) -> None:
    with pytest.raises(ValueError, match="4 features"):
        checked(np.ones((5, 5)))


def test_a_failing_factory_fails_calls_with_replica_lost(ray_cluster: None) -> None:
    with ert.distributed.deploy(failing_factory, num_cpus=0.25, name="broken") as model:
        with pytest.raises(ert.distributed.ReplicaLost, match="FileNotFoundError"):
            model(np.ones(2))
        with pytest.raises(ert.distributed.ReplicaLost, match="FileNotFoundError"):
            model.ready(timeout=60)
        deadline = time.monotonic() + 30
        while model.replicas and time.monotonic() < deadline:
            time.sleep(0.05)
        assert model.replicas == 0  # not replaced: another replica's factory fails too
        with pytest.raises(ert.distributed.ReplicaLost, match=r"weights\.safetensors"):
            model(np.ones(2))


def test_a_dead_replica_fails_exactly_its_calls_and_is_replaced(ray_cluster: None) -> None:
    with ert.distributed.deploy(
        sleepy_factory, 0.2, replicas=2, num_cpus=0.25, name="sleepy"
    ) as model:
        x = np.ones(3, np.float32)
        model.ready(timeout=120)  # so that calls go to both
        model(x).numpy()
        outs = [model(x) for _ in range(8)]
        victim = model._replicas[0]
        ray.kill(victim.actor)
        results = []
        for t in outs:
            try:
                results.append(t.numpy())
            except ert.KernelError as e:
                results.append(e)
        lost = [r for r in results if isinstance(r, Exception)]
        assert lost and len(lost) < len(outs)
        for e in lost:
            assert isinstance(e, ert.distributed.ReplicaLost)
            assert "sleepy" in str(e) and "test_distributed.py" in str(e)
        for r in results:
            if not isinstance(r, Exception):
                np.testing.assert_array_equal(r, x * 2)
        deadline = time.monotonic() + 60
        while victim in model._replicas or model.replicas < 2:
            assert time.monotonic() < deadline, "the lost replica was not replaced"
            time.sleep(0.05)
        np.testing.assert_array_equal(model(x).numpy(), x * 2)


def test_a_pipeline_over_a_pool_with_retries_loses_no_item_when_a_replica_dies(
    ray_cluster: None,
) -> None:
    with ert.distributed.deploy(
        sleepy_factory, 0.01, replicas=2, num_cpus=0.25, retries=2, name="stage"
    ) as model:
        model.ready(timeout=120)
        model(np.zeros(2, np.float32)).numpy()
        killed: list[bool] = []

        def kill_once(i: int) -> int:
            if i == 40 and not killed:
                killed.append(True)
                ray.kill(model._replicas[0].actor)
            return i

        async def main() -> list[np.ndarray]:
            stage = ert.pipeline.map(kill_once, range(200)).map(
                lambda i: model(np.full(2, i, np.float32)), concurrency=8
            )
            return await stage.collect()

        got = asyncio.run(main())
        assert killed
        assert [int(g[0]) for g in got] == [2 * i for i in range(200)]


# -- the pool --------------------------------------------------------------------
def test_resize_grows_and_shrinks_the_pool(ray_cluster: None) -> None:
    with ert.distributed.deploy(sleepy_factory, 0.0, num_cpus=0.25, name="sized") as model:
        model.resize(3)
        assert model.replicas == 3
        outs = [model(np.ones(2)) for _ in range(9)]
        model.resize(1)  # maybe while the new two still start: killed starting, not broken
        assert model.replicas == 1
        for t in outs:
            np.testing.assert_array_equal(t.numpy(), 2 * np.ones(2))  # nothing in flight lost
        np.testing.assert_array_equal(model(np.ones(2)).numpy(), 2 * np.ones(2))
        model.ready(timeout=120)
        ray.kill(model._replicas[0].actor)  # the one left dies: the pool starts another
        deadline = time.monotonic() + 120
        while True:
            try:
                np.testing.assert_array_equal(model(np.ones(2)).numpy(), 2 * np.ones(2))
                break
            except ert.distributed.ReplicaLost:  # a call that went to the dying one
                assert time.monotonic() < deadline
        model.ready(timeout=120)
        assert model.replicas == 1
        with pytest.raises(ert.UsageError):
            model.resize(0)
    with pytest.raises(ert.UsageError, match="shut down"):
        model(np.ones(2))


def test_a_replica_the_cluster_cannot_place_is_an_error_not_a_hang(ray_cluster: None) -> None:
    with (
        ert.distributed.deploy(sleepy_factory, 0.0, num_cpus=64, start_timeout=0.5) as model,
        pytest.raises(ert.distributed.ReplicaLost, match="num_cpus=64"),
    ):
        model(np.ones(2))


def busy_threads_factory() -> Any:
    def measure(x: ert.Tensor) -> np.ndarray:
        a = np.ones((1024, 1024), np.float32)
        start, cpu = time.perf_counter(), time.process_time()
        for _ in range(8):
            (ert.asarray(a) @ a).numpy()
        return np.float64((time.process_time() - cpu) / (time.perf_counter() - start))

    return measure


def test_a_one_cpu_replica_runs_eagerrt_mkl_and_numba_on_one_thread(ray_cluster: None) -> None:
    with ert.distributed.deploy(busy_threads_factory, num_cpus=1, name="threads") as model:
        (counts,) = model.thread_counts()
        assert counts["eagerrt"] == counts["numba"] == 1
        assert counts["mkl"] in (None, 1) and counts["openblas"] in (None, 1)
        # Products of 1024x1024 matrices keep as many cores busy as they are allowed.
        assert float(model(np.zeros(1)).numpy()) < 1.3


# -- the examples -----------------------------------------------------------------
def _example(filename: str) -> Any:
    """examples/<filename>, imported; its functions travel to Ray's workers by value."""
    path = pathlib.Path(__file__).resolve().parents[1] / "examples" / filename
    name = path.stem
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    sys.modules[name] = example  # cloudpickle finds it by name
    spec.loader.exec_module(example)
    ray.cloudpickle.register_pickle_by_value(example)
    return example


def test_the_scale_out_example_batches_and_pipelines_on_the_pool(ray_cluster: None) -> None:
    example = _example("ray_scale_out.py")
    out = asyncio.run(example.main(requests=64))
    rows = out["rows"]
    want = example.build_classifier(0)(ert.asarray(rows)).numpy()
    np.testing.assert_allclose(np.stack([np.asarray(a) for a in out["answers"]]), want, rtol=1e-5)
    np.testing.assert_array_equal(out["labels"], np.argmax(want, axis=1))


# Ray Serve 2.60's own models use a pydantic spelling pydantic 2 deprecates.
@pytest.mark.filterwarnings("ignore:Using extra keyword arguments on `Field`")
def test_the_serve_example_batches_requests_through_an_eagerrt_model(ray_cluster: None) -> None:
    example = _example("ray_serve.py")
    try:
        out = asyncio.run(example.main(requests=48))
    finally:
        example.serve.shutdown()
    want = example.build_classifier(0)(ert.asarray(out["rows"])).numpy()
    np.testing.assert_allclose(np.stack(out["answers"]), want, rtol=1e-5)


# -- without Ray -------------------------------------------------------------------
def test_import_eagerrt_does_not_import_ray() -> None:
    code = "import sys, eagerrt, eagerrt.distributed; assert 'ray' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_deploy_without_ray_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ert.UsageError, match=r"eagerrt\[distributed\]"):
        ert.distributed.deploy(mlp_factory, 1.0)
