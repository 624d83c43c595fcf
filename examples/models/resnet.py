"""ResNet-18 for 32x32 images (the CIFAR variant) in eagerrt, from PyTorch's weights.

The network is an async function of eagerrt ops, so it runs eagerly (``await model(x)``)
and compiled (``await model.compiled(x)``, an :func:`eagerrt.function` of the same code).
Weights come from a PyTorch ``state_dict`` (numpy arrays under PyTorch's names, as
``torch_reference.ResNet18CIFAR`` has them) or from a safetensors file, loaded without
torch through :mod:`eagerrt.weights`.

Batch norm runs in inference form. By default it is folded into the convolution before
it when the model is built (scale the conv's weights, add a bias), so an eager call runs
one op per layer, as graph mode's own batch-norm folding does for the traced graph;
``fold_batch_norm=False`` keeps every ``ert.batch_norm`` call in the model instead.

Run: ``python examples/models/resnet.py [weights.safetensors]`` (random weights without
one): it classifies a random batch eagerly and compiled and times both.
"""

from __future__ import annotations

import asyncio
import functools
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

import eagerrt as ert

#: (out channels, stride) of the first block of each stage; each stage has two blocks.
STAGES = ((64, 1), (128, 2), (256, 2), (512, 2))
#: PyTorch's BatchNorm2d default.
BN_EPS = 1e-5


def state_dict_shapes(classes: int = 10) -> dict[str, tuple[int, ...]]:
    """The names and shapes a ResNet-18 CIFAR ``state_dict`` has (PyTorch's names,
    ``num_batches_tracked`` left out).

    >>> shapes = state_dict_shapes()
    >>> shapes["conv1.weight"], shapes["layer2.0.shortcut.0.weight"], shapes["linear.weight"]
    ((64, 3, 3, 3), (128, 64, 1, 1), (10, 512))
    >>> len(shapes)
    102
    """
    shapes: dict[str, tuple[int, ...]] = {}

    def conv_bn(conv: str, bn: str, out: int, inputs: int, k: int) -> None:
        shapes[f"{conv}.weight"] = (out, inputs, k, k)
        for stat in ("weight", "bias", "running_mean", "running_var"):
            shapes[f"{bn}.{stat}"] = (out,)

    conv_bn("conv1", "bn1", 64, 3, 3)
    inputs = 64
    for stage, (out, stride) in enumerate(STAGES, start=1):
        for index in range(2):
            block = f"layer{stage}.{index}"
            conv_bn(f"{block}.conv1", f"{block}.bn1", out, inputs, 3)
            conv_bn(f"{block}.conv2", f"{block}.bn2", out, out, 3)
            if index == 0 and (stride != 1 or inputs != out):
                conv_bn(f"{block}.shortcut.0", f"{block}.shortcut.1", out, inputs, 1)
            inputs = out
    shapes["linear.weight"] = (classes, 512)
    shapes["linear.bias"] = (classes,)
    return shapes


@dataclass(frozen=True)
class ConvBN:
    """A bias-free convolution and the batch norm after it, in inference form: with
    ``scale``/``shift`` None the norm is folded into ``weight`` and ``bias``."""

    weight: ert.Tensor
    bias: ert.Tensor | None
    stride: int
    padding: int
    norm: tuple[ert.Tensor, ert.Tensor, ert.Tensor, ert.Tensor] | None  # mean, var, w, b

    @classmethod
    def load(
        cls,
        state: Mapping[str, np.ndarray],
        conv: str,
        bn: str,
        stride: int,
        fold: bool,
        device: str | ert.Device | None = None,
    ) -> ConvBN:
        """The layer from ``state``'s ``{conv}.weight`` and ``{bn}.*`` arrays, its tensors
        placed on ``device`` (the CPU by default)."""
        weight = np.asarray(state[f"{conv}.weight"], np.float32)
        mean, var, gamma, beta = (
            np.asarray(state[f"{bn}.{stat}"], np.float32)
            for stat in ("running_mean", "running_var", "weight", "bias")
        )
        padding = weight.shape[-1] // 2
        if not fold:
            norm = tuple(ert.asarray(a, device=device) for a in (mean, var, gamma, beta))
            unfolded = ert.asarray(weight, device=device)
            return cls(unfolded, None, stride, padding, norm)  # type: ignore[arg-type]
        # In float64: y = (conv(x, w) - mean) * gamma / sqrt(var + eps) + beta.
        scale = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + BN_EPS)
        folded = (weight * scale[:, None, None, None]).astype(np.float32)
        bias = (beta - mean * scale).astype(np.float32)
        return cls(
            ert.asarray(folded, device=device),
            ert.asarray(bias, device=device),
            stride,
            padding,
            None,
        )

    def __call__(self, x: ert.Tensor) -> ert.Tensor:
        y = ert.conv2d(x, self.weight, self.bias, stride=self.stride, padding=self.padding)
        if self.norm is None:
            return y
        mean, var, gamma, beta = self.norm
        return ert.batch_norm(y, mean, var, gamma, beta, eps=BN_EPS)


@dataclass(frozen=True)
class BasicBlock:
    """Two 3x3 conv + batch norm layers and the shortcut (identity or a 1x1 projection)."""

    conv1: ConvBN
    conv2: ConvBN
    shortcut: ConvBN | None

    def __call__(self, x: ert.Tensor) -> ert.Tensor:
        y = self.conv2(ert.relu(self.conv1(x)))
        return ert.relu(y + (x if self.shortcut is None else self.shortcut(x)))


class ResNet18:
    """ResNet-18 for (N, 3, 32, 32) float32 images: ``await model(x)`` is the (N, classes)
    logits, computed eagerly; ``await model.compiled(x)`` the same through graph mode.

    >>> import numpy as np
    >>> state = {name: np.full(shape, 0.01, np.float32)
    ...          for name, shape in state_dict_shapes().items()}
    >>> model = ResNet18.from_state_dict(state)
    >>> import asyncio
    >>> logits = asyncio.run(model(ert.zeros((2, 3, 32, 32), dtype="float32")))
    >>> logits.shape                          # a tensor, maybe still computing
    (2, 10)
    >>> del state["linear.bias"]
    >>> ResNet18.from_state_dict(state)
    Traceback (most recent call last):
    ...
    eagerrt.WeightsError: the weights don't fit the model: missing: 'linear.bias'
    """

    def __init__(
        self,
        stem: ConvBN,
        blocks: list[BasicBlock],
        linear_weight: ert.Tensor,
        linear_bias: ert.Tensor,
    ) -> None:
        self.stem = stem
        self.blocks = blocks
        self.linear_weight = linear_weight
        self.linear_bias = linear_bias

    @classmethod
    def from_state_dict(
        cls,
        state: Mapping[str, Any],
        *,
        fold_batch_norm: bool = True,
        device: str | ert.Device | None = None,
    ) -> ResNet18:
        """The model with PyTorch's ``ResNet18CIFAR.state_dict()`` weights (arrays by
        PyTorch's names; ``num_batches_tracked`` is ignored), every weight placed on
        ``device`` (the CPU by default; the images must be there too). A name missing,
        unexpected or of the wrong shape raises :class:`eagerrt.WeightsError` listing
        them all."""
        linear = state.get("linear.weight")
        classes = int(np.shape(linear)[0]) if linear is not None and np.ndim(linear) == 2 else 10
        ert.weights.expect(state, state_dict_shapes(classes), ignore=r"\.num_batches_tracked$")
        stem = ConvBN.load(state, "conv1", "bn1", 1, fold_batch_norm, device)
        blocks, inputs = [], 64
        for stage, (out, stride) in enumerate(STAGES, start=1):
            for index in range(2):
                name = f"layer{stage}.{index}"
                step = stride if index == 0 else 1
                shortcut = None
                if index == 0 and (stride != 1 or inputs != out):
                    shortcut = ConvBN.load(
                        state,
                        f"{name}.shortcut.0",
                        f"{name}.shortcut.1",
                        step,
                        fold_batch_norm,
                        device,
                    )
                blocks.append(
                    BasicBlock(
                        ConvBN.load(
                            state, f"{name}.conv1", f"{name}.bn1", step, fold_batch_norm, device
                        ),
                        ConvBN.load(
                            state, f"{name}.conv2", f"{name}.bn2", 1, fold_batch_norm, device
                        ),
                        shortcut,
                    )
                )
                inputs = out
        return cls(
            stem,
            blocks,
            ert.asarray(np.asarray(state["linear.weight"], np.float32), device=device),
            ert.asarray(np.asarray(state["linear.bias"], np.float32), device=device),
        )

    @classmethod
    def from_safetensors(
        cls,
        path: str | os.PathLike[str],
        *,
        fold_batch_norm: bool = True,
        device: str | ert.Device | None = None,
    ) -> ResNet18:
        """The model with the weights of a safetensors file holding PyTorch's
        ``state_dict`` names (read through :func:`eagerrt.weights.load_safetensors`),
        placed on ``device``."""
        return cls.from_state_dict(
            ert.weights.load_safetensors(path), fold_batch_norm=fold_batch_norm, device=device
        )

    async def __call__(self, x: ert.Tensor) -> ert.Tensor:
        """The logits of a batch of (N, 3, 32, 32) images."""
        y = ert.relu(self.stem(x))
        for block in self.blocks:
            y = block(y)
        pooled = ert.mean(y, axis=(2, 3))  # global average pool: (N, 512)
        return ert.linear(pooled, self.linear_weight, self.linear_bias)

    @functools.cached_property
    def compiled(self) -> Any:
        """This model through graph mode (:func:`eagerrt.function`): traced on the first
        call per input shape, then run as one compiled plan."""
        return ert.function(self.__call__)


def random_state_dict(seed: int = 0, classes: int = 10) -> dict[str, np.ndarray]:
    """Random weights under PyTorch's names (He-initialized convolutions, batch-norm
    statistics away from 0/1), for demos and benchmarks that have no checkpoint."""
    rng = np.random.default_rng(seed)
    state: dict[str, np.ndarray] = {}
    for name, shape in state_dict_shapes(classes).items():
        if len(shape) > 1:
            fan_in = int(np.prod(shape[1:]))
            state[name] = rng.normal(0.0, (2.0 / fan_in) ** 0.5, shape).astype(np.float32)
        elif name.endswith(("running_var", "bn1.weight", "bn2.weight", "shortcut.1.weight")):
            state[name] = rng.uniform(0.5, 1.5, shape).astype(np.float32)
        else:
            state[name] = rng.uniform(-0.2, 0.2, shape).astype(np.float32)
    return state


async def demo(path: str | None) -> None:
    if path is None:
        model = ResNet18.from_state_dict(random_state_dict())
        print("ResNet-18 (CIFAR), random weights")
    else:
        model = ResNet18.from_safetensors(path)
        print(f"ResNet-18 (CIFAR), weights from {path}")
    images = ert.asarray(np.random.default_rng(1).random((8, 3, 32, 32), dtype=np.float32))
    eager = await (await model(images))
    compiled = await (await model.compiled(images))  # first call traces and compiles
    print("classes:", eager.argmax(axis=1).tolist())
    print("compiled == eager:", bool(np.allclose(eager, compiled, rtol=1e-4, atol=1e-4)))
    for name, fn in (("eager", model), ("compiled", model.compiled)):
        t0 = time.perf_counter()
        for _ in range(3):
            await (await fn(images))
        print(f"{name:>8}: {(time.perf_counter() - t0) / 3 * 1e3:7.1f} ms per batch of 8")


if __name__ == "__main__":
    asyncio.run(demo(sys.argv[1] if len(sys.argv) > 1 else None))
