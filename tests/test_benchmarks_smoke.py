"""Smoke test of benchmarks/: each benchmark runs (tiny sizes) and reports well-formed results.

Speed is never asserted here: the figures are for benchmarks/run_all.py to print.
"""

from __future__ import annotations

import copy
import functools
import importlib
import importlib.util
import json
import math
import os
import sys
from typing import Any

import pytest

BENCH_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")

# Benchmark module -> keyword arguments making its run() take a fraction of a second.
TINY: dict[str, dict[str, Any]] = {
    "bench_tiny_model": {"n_ops": 10, "rounds": 2, "reps": 3},
    "bench_parallel_branches": {"n": 20_000, "chain_len": 2, "rounds": 2, "sin_n": 20_000},
    "bench_io_overlap": {"batches": 3, "n": 20_000, "io_ms": 1.0, "in_flight": 2, "rounds": 2},
    "bench_await_overhead": {"n_ready": 500, "n_hops": 20, "rounds": 2},
    "bench_conv_attention": {"conv_shape": (2, 4, 9, 9), "conv_out": 4, "attn_shape": (1, 2, 8, 8)},
    "bench_graph": {"n_ops": 5, "batch": 2, "sizes": (8, 6, 4), "rounds": 2, "reps": 2},
    "bench_profiler": {"n_ops": 10, "rounds": 2, "reps": 3},
    "bench_reliability": {
        "fuzz_cases": 3,
        "storm_tasks": 30,
        "coroutines": 100,
        "memory_arrivals": (50, 200),
        "rounds": 1,
    },
    # ResNet-50 left out: its torch model and ONNX export alone take seconds (the same
    # code as ResNet-18's, with another model class).
    "models": {
        "models": ("resnet18", "minilm"),
        "batches": (1,),
        "length": 16,
        "concurrent": 2,
        "rounds": 1,
        "settle": 0.0,
    },
    "bench_in_place": {"rows": 20, "cols": 30, "rounds": 2},
    # ResNet-18 on a few images (ResNet-50 and MiniLM: the same code, seconds more).
    "bench_bf16": {"resnet18_images": 4, "resnet50_images": 0, "minilm_copies": 0},
    # A Ray cluster of its own, on the loopback (the benchmark sets that up); no Ray
    # Serve: the remote call's fixed cost and a 100-item pipeline losing a replica.
    "bench_distributed": {"serve": False, "rounds": 1, "calls": 10},
}


def _import(name: str) -> Any:
    if BENCH_DIR not in sys.path:
        sys.path.insert(0, BENCH_DIR)
    # By file: benchmarks/models.py and the examples/models package share a name.
    return importlib.import_module("run_all").load_benchmark(name)


@functools.cache
def _tiny_result(module_name: str) -> dict[str, Any]:
    """Each benchmark's tiny run, made once: the tests below read it (copies)."""
    return _import(module_name).run(quick=True, **TINY[module_name])


def tiny_result(module_name: str) -> dict[str, Any]:
    return copy.deepcopy(_tiny_result(module_name))


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _check_result(result: dict[str, Any], quick: bool = True) -> None:
    assert {"name", "title", "quick", "params", "rows", "figures", "targets", "notes"} <= set(
        result
    )
    assert isinstance(result["name"], str) and result["name"]
    assert result["quick"] is quick
    assert result["rows"], "a benchmark must report at least one row"
    for row in result["rows"]:
        assert isinstance(row["measure"], str) and row["measure"]
        assert _number(row["value"]), row
        assert isinstance(row["unit"], str)
        for key in ("ratio", "paired_ratio"):
            assert row[key] is None or _number(row[key]), row
    assert result["figures"]
    for key, value in result["figures"].items():
        assert _number(value), (key, value)
    for key, target in result["targets"].items():
        assert isinstance(target["passed"], bool), key
        assert _number(target["value"]) and _number(target["limit"]), key
        assert target["op"] in ("<=", ">=")
    json.dumps(result)  # what run_all writes to results/latest.json


@pytest.mark.parametrize("module_name", sorted(TINY))
def test_benchmark_runs_and_reports(module_name: str) -> None:
    assert callable(_import(module_name).main)
    _check_result(tiny_result(module_name))


def test_the_distributed_benchmark_loses_no_item_when_a_replica_dies() -> None:
    result = tiny_result("bench_distributed")
    assert result["figures"]["tiny_remote_vs_bare_ray"] > 0
    assert result["targets"]["fault_items_lost"]["passed"], result["targets"]


def test_expected_targets_are_reported() -> None:
    tiny = tiny_result("bench_tiny_model")
    assert "eager_vs_numpy" in tiny["targets"]
    if _import("bench_tiny_model").torch is not None:
        assert "eager_vs_torch" in tiny["targets"]
    assert {"speedup", "sin_vs_threads"} <= set(tiny_result("bench_parallel_branches")["targets"])
    assert "wall_vs_max" in tiny_result("bench_io_overlap")["targets"]
    models = tiny_result("models")
    for label in ("resnet18", "minilm"):
        assert f"{label}_b1_compiled_vs_torch" in models["targets"]
        runtimes = [n for n in ("onnxruntime", "openvino") if importlib.util.find_spec(n)]
        if runtimes:  # issue 23's fp32 target: the faster of the fp32 inference runtimes
            assert f"{label}_b1_compiled_vs_fp32_anchor" in models["targets"]
        if "openvino" in runtimes:  # both precisions, and which one the default chose
            for name in ("openvino_fp32", "openvino_default"):
                assert f"{label}_b1_{name}_ms" in models["figures"]
            assert models["params"][f"{label}_openvino_fp32_precision"] == "f32"
            assert f"{label}_openvino_default_precision" in models["params"]
    accuracy = tiny_result("bench_bf16")
    if accuracy["figures"]:  # (MKL installed)
        assert {"resnet18_cosine", "resnet18_top1"} <= set(accuracy["targets"])
        assert accuracy["targets"]["resnet18_top1"]["passed"]


def test_models_time_a_bf16_plan_where_the_cpu_has_bf16(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    import asyncio

    import torch

    from eagerrt.backends.cpu import bf16, blas

    if blas.mkl_with_bf16() is None:
        pytest.skip("bfloat16 products need MKL (the mkl extra)")
    models = _import("models")
    monkeypatch.setattr(bf16, "cpu_features", lambda: ("test CPU", frozenset()))
    contenders, _ = models.resnet_contenders(torch, models.Anchors(), str(tmp_path))
    assert "compiled_bf16" not in contenders  # a CPU without bfloat16: no such row
    # As on a CPU with AVX512-BF16 (MKL emulates the products here: what is tested is
    # that the row is there and its output checked, by cosine).
    monkeypatch.setattr(bf16, "cpu_features", lambda: ("test CPU", frozenset({"avx512bf16"})))
    contenders, inputs = models.resnet_contenders(torch, models.Anchors(), str(tmp_path))
    result = models.new_result("models", "models", True, {})
    checked = {name: contenders[name] for name in ("torch", "compiled", "compiled_bf16")}
    asyncio.run(models._check_outputs(result, "resnet18", checked, inputs(2)))
    figures = result["figures"]
    assert 0.999 <= figures["resnet18_compiled_bf16_min_cosine"] <= 1.0 + 1e-6
    # Rounded products: further from PyTorch than the float32 plan.
    assert (
        figures["resnet18_compiled_bf16_max_abs_error"] > figures["resnet18_compiled_max_abs_error"]
    )


def test_run_all_formats_and_saves(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run_all = _import("run_all")
    assert set(run_all.BENCHMARKS.values()) == set(TINY)
    # run_all.main over every benchmark's tiny result (made once, above): what is
    # tested here is run_all's calling, formatting and saving, not the runs again.
    for module_name in run_all.BENCHMARKS.values():
        monkeypatch.setattr(_import(module_name), "run", _tiny_run(module_name))
    out = tmp_path / "latest.json"
    run_all.main(["--quick", "--json", str(out)])
    printed = capsys.readouterr().out
    assert "| benchmark" in printed and "### Targets" in printed
    report = json.loads(out.read_text())
    assert report["quick"] is True
    assert report["machine"]["cpu_count"] >= 1
    assert set(report["results"]) == set(run_all.BENCHMARKS)
    for result in report["results"].values():
        _check_result(result)


#: benchmarks/models_cuda.py (a GPU benchmark, not in run_all) at its tiniest, on the
#: thread-backed stream device and PyTorch's CPU: the same code paths minus CuPy.
MODELS_CUDA_TINY: dict[str, Any] = {
    "device": "teststream:0",
    "torch_device": "cpu",
    "batches": (1,),
    "image": 32,
    "length": 16,
    "rounds": 1,
    "reps": 1,
}


def test_models_cuda_runs_on_the_stream_test_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every model and contender is built, checked and timed; a contender that fails (here
    MiniLM's eager one, made to) is a row naming its error, and the rest still runs."""
    module = _import("models_cuda")
    assert callable(module.main)
    original = module._eagerrt_contenders

    def one_failing(model: Any, compiled: Any, place: Any) -> Any:
        contenders = original(model, compiled, place)
        if type(model).__name__ == "MiniLM":

            async def broken(x: Any) -> Any:
                raise RuntimeError("injected failure")

            contenders[0].run = broken
        return contenders

    monkeypatch.setattr(module, "_eagerrt_contenders", one_failing)
    result = module.run(quick=True, **MODELS_CUDA_TINY)
    _check_result(result)
    targets, figures = result["targets"], result["figures"]
    for name in ("eager", "compiled"):
        assert targets[f"resnet50_b1_{name}_accuracy"]["passed"], figures
    assert "resnet50_b1_compiled_vs_torch" in targets
    assert figures["resnet50_b1_torch_max_abs_diff"] < 1e-3  # the default vs no TF32
    assert targets["minilm_b1_compiled_accuracy"]["passed"]
    assert "minilm_b1_compiled_vs_torch" in targets
    assert "minilm_b1_eager_best_ms" not in figures
    failed = [row["measure"] for row in result["rows"] if row["unit"] == "error"]
    assert failed == ["MiniLM, batch 1, eagerrt eager: FAILED: RuntimeError: injected failure"]
    assert result["errors"][0]["where"] == "MiniLM, batch 1, eagerrt eager"


def _tiny_run(module_name: str) -> Any:
    def tiny(quick: bool = False) -> dict[str, Any]:
        assert quick, "run_all --quick must ask for quick runs"
        return tiny_result(module_name)

    return tiny


def test_bench_fastapi_runs_its_servers_and_reports() -> None:
    # Not in run_all (it starts four servers); here at its tiniest.
    pytest.importorskip("fastapi", reason="fastapi and uvicorn are in the test extra")
    pytest.importorskip("uvicorn", reason="fastapi and uvicorn are in the test extra")
    result = _import("bench_fastapi").run(quick=True, requests=40, clients=4, rounds=1)
    _check_result(result)
    assert result["figures"]["same_answers"] == 1.0
    assert "batched_vs_numpy" in result["targets"]
