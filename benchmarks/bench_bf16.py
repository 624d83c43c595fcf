"""bfloat16 products: how close a model compiled with ``precision="bfloat16"``
stays to the same model in float32 (issue 23's accuracy targets).

Models, each compiled twice from the same weights (float32, and bfloat16
products with float32 accumulation):

* ResNet-18 for CIFAR (``examples/models/resnet.py``) on 256 random images:
  the cosine of each image's logits to float32's (the tables show 1 - cosine in
  parts per million: the target, cosine >= 0.9999, is at most 100), and how
  often the top class agrees;
* ResNet-50 at 224x224 (``examples/models/resnet50.py``) on random images, the
  same figures, beside PyTorch's own bfloat16-operand arithmetic on the same
  network (weights and each product's input rounded to bfloat16, summed in
  float32): what the arithmetic itself costs this network;
* all-MiniLM-L6-v2 (``examples/models/minilm.py``, real weights) on real
  sentences: each embedding's cosine to float32's, and the largest change in a
  pairwise similarity.

Both ResNets have random weights (torch's initialization, batch-norm statistics
randomized), which amplify a product's rounding far more than trained ones do:
the PyTorch row shows how much of the ResNet-50 figure is the arithmetic's.

Where the CPU has neither AMX-BF16 nor AVX512-BF16, eagerrt refuses bfloat16
(it would be slower than float32): the figures are then measured with the CPU
check passed over, MKL emulating the same products, and say so in the notes.
Speed is measured in ``benchmarks/models.py`` (its bfloat16 rows, on CPUs that
have the instructions).

Run: ``python benchmarks/bench_bf16.py [--quick]`` (needs the ``models`` and
``mkl`` extras).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import Iterator
from typing import Any

import numpy as np

import eagerrt as ert
from _common import add_row, add_target, bench_main, example_model, finish, new_result
from eagerrt.backends.cpu import bf16, blas

SENTENCES = [
    "The cat sits outside on the warm stones.",
    "A man is playing a guitar in the street.",
    "I love eating pasta with fresh tomatoes.",
    "The new movie is awesome, everyone says so.",
    "The cat plays in the garden all afternoon.",
    "A woman watches television after work.",
    "The new film is so great that we saw it twice.",
    "Do you like pizza with pineapple?",
    "Stock markets fell sharply on Monday morning.",
    "The weather will be sunny and warm tomorrow.",
    "He has played the violin since he was six.",
    "Quantum computers store information in qubits.",
    "She is reading a long book in the library.",
    "Traffic was heavy on the bridge this morning.",
    "The committee postponed its decision until May.",
    "Bake the bread for forty minutes at high heat.",
]


@contextlib.contextmanager
def _bf16_products(result: dict[str, Any]) -> Iterator[None]:
    """bfloat16 allowed: as it is where the CPU has the instructions; else with
    the CPU check passed over (MKL then emulates the same products), noted."""
    name, present = bf16.cpu_features()
    if present:
        yield
        return
    result["notes"].append(
        f"this CPU ({name}) has neither AMX-BF16 nor AVX512-BF16, so eagerrt refuses bfloat16 "
        "here; these figures were measured with that check passed over and MKL emulating the "
        "same bfloat16 products (accuracy only: emulated speed means nothing)"
    )
    real = bf16.cpu_features
    bf16.cpu_features = lambda: (name, frozenset(bf16.FEATURES))  # type: ignore[assignment]
    try:
        yield
    finally:
        bf16.cpu_features = real  # type: ignore[assignment]


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = a.reshape(len(a), -1).astype(np.float64), b.reshape(len(b), -1).astype(np.float64)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


async def _resnet(
    result: dict[str, Any], label: str, images: int, batch: int, size: int
) -> tuple[np.ndarray, np.ndarray, Any, np.ndarray]:
    """Logits of ``images`` random images, float32 and bfloat16, the torch model
    and the images."""
    reference = example_model("torch_reference")
    if label == "resnet18":
        torch_model: Any = reference.random_resnet18(seed=0)
        model = example_model("resnet").ResNet18.from_state_dict(
            reference.numpy_state_dict(torch_model)
        )
    else:
        torch_model = reference.random_resnet50(seed=0)
        model = example_model("resnet50").ResNet50.from_state_dict(
            reference.numpy_state_dict(torch_model)
        )
    exact = ert.function(model.__call__)
    reduced = ert.function(model.__call__, precision="bfloat16")
    rng = np.random.default_rng(1)
    f32, b16, inputs = [], [], []
    for _ in range(max(1, images // batch)):
        inputs.append(rng.standard_normal((batch, 3, size, size)).astype(np.float32))
        x = ert.asarray(inputs[-1])
        f32.append(np.asarray(await (await exact(x))))
        b16.append(np.asarray(await (await reduced(x))))
    return np.concatenate(f32), np.concatenate(b16), torch_model, np.concatenate(inputs)


#: Cosines are near 1: the tables show 1 - cosine, in parts per million.
PPM = 1e6


def _report_logits(result: dict[str, Any], label: str, f32: np.ndarray, b16: np.ndarray) -> None:
    cos = _cosines(f32, b16)
    agree = float((f32.argmax(1) == b16.argmax(1)).mean())
    fig = result["figures"]
    fig[f"{label}_cosine_min"], fig[f"{label}_top1_agreement"] = float(cos.min()), agree
    worst, median = (1 - cos.min()) * PPM, (1 - float(np.median(cos))) * PPM
    add_row(result, f"{label}: 1 - logits' cosine to float32, worst of {len(f32)}", worst, "ppm")
    add_row(result, f"{label}: 1 - logits' cosine to float32, median", median, "ppm")
    add_row(result, f"{label}: same top class as float32", agree * 100, "%")
    add_target(result, f"{label}_cosine", f"{label}: 1 - lowest logits cosine (cosine >= 0.9999)",
               worst, 100, "<=")  # fmt: skip
    add_target(result, f"{label}_top1", f"{label}: top-1 agreement with float32",
               agree, 0.99, ">=")  # fmt: skip


def _torch_bf16_operands(torch_model: Any, images: np.ndarray) -> np.ndarray:
    """PyTorch's model with each convolution's and linear layer's weight and
    input rounded to bfloat16, products summed in float32: the arithmetic
    eagerrt's bfloat16 plans do, in another implementation."""
    import torch

    model = copy.deepcopy(torch_model).eval()
    with torch.inference_mode():
        for module in model.modules():
            if isinstance(module, (torch.nn.Conv2d, torch.nn.Linear)):
                module.weight.copy_(module.weight.to(torch.bfloat16).float())
                module.register_forward_pre_hook(
                    lambda _, args: (args[0].to(torch.bfloat16).float(), *args[1:])
                )
        return model(torch.from_numpy(images)).numpy()


async def _minilm(result: dict[str, Any], copies: int) -> None:
    reference = example_model("torch_reference")
    model = example_model("minilm").MiniLM.from_pretrained(reference.minilm_path())
    sentences = SENTENCES * copies
    f32 = np.asarray(await model.encode(sentences))
    with ert.config.override(matmul_precision="bfloat16"):  # the global setting's way
        b16 = np.asarray(await model.encode(sentences))
    cos = _cosines(f32, b16)
    similarity = float(np.abs(f32 @ f32.T - b16 @ b16.T).max())
    fig = result["figures"]
    fig["minilm_cosine_min"], fig["minilm_similarity_change"] = float(cos.min()), similarity
    worst = (1 - cos.min()) * PPM
    add_row(result, f"minilm: 1 - embeddings' cosine to float32, worst of {len(f32)}", worst, "ppm")
    add_row(result, "minilm: largest change in a pairwise similarity", similarity * PPM, "ppm")
    add_target(result, "minilm_cosine", "minilm: 1 - lowest embedding cosine (>= 0.9999)",
               worst, 100, "<=")  # fmt: skip
    add_target(result, "minilm_similarity", "minilm: largest pairwise similarity change (1e-3)",
               similarity * PPM, 1000, "<=")  # fmt: skip


def run(
    quick: bool = False,
    resnet18_images: int | None = None,
    resnet50_images: int | None = None,
    minilm_copies: int | None = None,
) -> dict[str, Any]:
    """bfloat16 accuracy against float32 on ResNet-18, ResNet-50 and MiniLM."""
    r18 = resnet18_images if resnet18_images is not None else (64 if quick else 256)
    r50 = resnet50_images if resnet50_images is not None else (4 if quick else 32)
    copies = minilm_copies if minilm_copies is not None else (1 if quick else 2)
    result = new_result(
        "bf16",
        "bfloat16 products: accuracy against float32",
        quick,
        {"resnet18_images": r18, "resnet50_images": r50, "minilm_sentences": copies * 16},
    )
    if blas.mkl_with_bf16() is None:
        result["notes"].append("MKL (the mkl extra) is not installed: nothing measured")
        return finish(result)

    async def measure() -> None:
        with _bf16_products(result):
            if r18:
                f32, b16, _, _ = await _resnet(result, "resnet18", r18, min(32, r18), 32)
                _report_logits(result, "resnet18", f32, b16)
            if r50:
                f32, b16, torch_model, images = await _resnet(
                    result, "resnet50", r50, min(8, r50), 224
                )
                _report_logits(result, "resnet50", f32, b16)
                theirs = _torch_bf16_operands(torch_model, images)
                cos = _cosines(f32, theirs)
                agree = float((f32.argmax(1) == theirs.argmax(1)).mean())
                result["figures"]["resnet50_torch_bf16_cosine_min"] = float(cos.min())
                result["figures"]["resnet50_torch_bf16_top1_agreement"] = agree
                add_row(
                    result, f"resnet50: PyTorch's bfloat16-operand arithmetic, 1 - cosine, "
                    f"worst of {len(theirs)}", (1 - cos.min()) * PPM, "ppm",
                )  # fmt: skip
                add_row(
                    result, "resnet50: PyTorch's bfloat16-operand arithmetic, same top class",
                    agree * 100, "%",
                )  # fmt: skip
            if copies:
                await _minilm(result, copies)

    asyncio.run(measure())
    return finish(result)


def main() -> None:
    bench_main(run)


if __name__ == "__main__":
    main()
