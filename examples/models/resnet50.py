"""ResNet-50 for ImageNet (224x224 images) in eagerrt, from torchvision's weights.

The layout is torchvision's ``resnet50``: a 7x7 stride-2 convolution with batch norm and
ReLU, a 3x3 stride-2 max pool, four stages of 3, 4, 6 and 3 bottleneck blocks (a 1x1
convolution down to the block's width, a 3x3 one carrying the stage's stride, a 1x1 one
up to four times the width, each with batch norm, and a 1x1 strided convolution with
batch norm as the shortcut where the shape changes), a global average pool and a linear
classifier (2048 -> 1000). Weights come from a ``state_dict`` under torchvision's names
(numpy arrays, as ``torchvision.models.resnet50().state_dict()`` or
``torch_reference.ResNet50`` have them) or a safetensors file holding them, loaded
without torch.

As in :mod:`resnet` (whose :class:`~resnet.ConvBN` layers it reuses), batch norm is
folded into the convolution before it when the model is built, unless
``fold_batch_norm=False``. ``device=`` places every weight on one device (``"cuda"``,
``"teststream:0"``; the CPU by default): the images must be there too, and every op
then runs there. ``await model(x)`` runs the network eagerly and ``model.compiled`` is
the same code under :func:`eagerrt.function`.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

import eagerrt as ert

from .resnet import ConvBN

__all__ = ["STAGES", "Bottleneck", "ResNet50", "state_dict_shapes"]

#: (bottleneck width, blocks, stride of the first block) of each stage.
STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))
#: A block's output channels are this many times its width.
EXPANSION = 4
#: Channels out of the stem.
STEM = 64


def state_dict_shapes(classes: int = 1000) -> dict[str, tuple[int, ...]]:
    """The names and shapes of torchvision's ``resnet50().state_dict()``
    (``num_batches_tracked`` left out): 267 arrays for 1000 classes."""
    shapes: dict[str, tuple[int, ...]] = {}

    def conv_bn(conv: str, bn: str, out: int, inputs: int, k: int) -> None:
        shapes[f"{conv}.weight"] = (out, inputs, k, k)
        for stat in ("weight", "bias", "running_mean", "running_var"):
            shapes[f"{bn}.{stat}"] = (out,)

    conv_bn("conv1", "bn1", STEM, 3, 7)
    inputs = STEM
    for stage, (width, blocks, stride) in enumerate(STAGES, start=1):
        out = width * EXPANSION
        for index in range(blocks):
            block = f"layer{stage}.{index}"
            conv_bn(f"{block}.conv1", f"{block}.bn1", width, inputs, 1)
            conv_bn(f"{block}.conv2", f"{block}.bn2", width, width, 3)
            conv_bn(f"{block}.conv3", f"{block}.bn3", out, width, 1)
            if index == 0 and (stride != 1 or inputs != out):
                conv_bn(f"{block}.downsample.0", f"{block}.downsample.1", out, inputs, 1)
            inputs = out
    shapes["fc.weight"] = (classes, inputs)
    shapes["fc.bias"] = (classes,)
    return shapes


@dataclass(frozen=True)
class Bottleneck:
    """1x1 reduce, 3x3 (with the stride), 1x1 expand, each conv + batch norm, and the
    shortcut: the identity or ``downsample`` (a strided 1x1 conv + batch norm)."""

    conv1: ConvBN
    conv2: ConvBN
    conv3: ConvBN
    downsample: ConvBN | None

    def __call__(self, x: ert.Tensor) -> ert.Tensor:
        y = ert.relu(self.conv1(x))
        y = ert.relu(self.conv2(y))
        y = self.conv3(y)
        return ert.relu(y + (x if self.downsample is None else self.downsample(x)))


class ResNet50:
    """ResNet-50 for (N, 3, H, W) float32 images (224x224 for ImageNet; any size from
    32x32 works): ``await model(x)`` is the (N, classes) logits, computed eagerly;
    ``await model.compiled(x)`` the same through graph mode. ``x`` must be on
    :attr:`device`, where the weights are."""

    def __init__(
        self,
        stem: ConvBN,
        blocks: list[Bottleneck],
        fc_weight: ert.Tensor,
        fc_bias: ert.Tensor,
    ) -> None:
        self.stem = stem
        self.blocks = blocks
        self.fc_weight = fc_weight
        self.fc_bias = fc_bias

    @property
    def device(self) -> ert.Device:
        """Where the weights are, and where the model's inputs must be."""
        device: ert.Device = self.fc_weight.device
        return device

    @classmethod
    def from_state_dict(
        cls,
        state: Mapping[str, Any],
        *,
        fold_batch_norm: bool = True,
        device: str | ert.Device | None = None,
    ) -> ResNet50:
        """The model with torchvision's ``resnet50().state_dict()`` weights (arrays by
        torchvision's names; ``num_batches_tracked`` is ignored), every weight placed on
        ``device`` (the CPU by default). A name missing, unexpected or of the wrong shape
        raises :class:`eagerrt.WeightsError` listing them all."""
        fc = state.get("fc.weight")
        classes = int(np.shape(fc)[0]) if fc is not None and np.ndim(fc) == 2 else 1000
        ert.weights.expect(state, state_dict_shapes(classes), ignore=r"\.num_batches_tracked$")

        def load(conv: str, bn: str, stride: int) -> ConvBN:
            return ConvBN.load(state, conv, bn, stride, fold_batch_norm, device)

        stem = load("conv1", "bn1", 2)
        blocks, inputs = [], STEM
        for stage, (width, count, stride) in enumerate(STAGES, start=1):
            out = width * EXPANSION
            for index in range(count):
                name = f"layer{stage}.{index}"
                step = stride if index == 0 else 1
                downsample = None
                if index == 0 and (stride != 1 or inputs != out):
                    downsample = load(f"{name}.downsample.0", f"{name}.downsample.1", step)
                blocks.append(
                    Bottleneck(
                        load(f"{name}.conv1", f"{name}.bn1", 1),
                        load(f"{name}.conv2", f"{name}.bn2", step),
                        load(f"{name}.conv3", f"{name}.bn3", 1),
                        downsample,
                    )
                )
                inputs = out
        return cls(
            stem,
            blocks,
            ert.asarray(np.asarray(state["fc.weight"], np.float32), device=device),
            ert.asarray(np.asarray(state["fc.bias"], np.float32), device=device),
        )

    @classmethod
    def from_safetensors(
        cls,
        path: str | os.PathLike[str],
        *,
        fold_batch_norm: bool = True,
        device: str | ert.Device | None = None,
    ) -> ResNet50:
        """The model with the weights of a safetensors file holding torchvision's
        ``state_dict`` names (read through :func:`eagerrt.weights.load_safetensors`),
        placed on ``device``."""
        return cls.from_state_dict(
            ert.weights.load_safetensors(path), fold_batch_norm=fold_batch_norm, device=device
        )

    async def __call__(self, x: ert.Tensor) -> ert.Tensor:
        """The logits of a batch of (N, 3, H, W) images on :attr:`device`."""
        y = ert.max_pool2d(ert.relu(self.stem(x)), 3, 2, 1)
        for block in self.blocks:
            y = block(y)
        pooled = ert.mean(y, axis=(2, 3))  # adaptive average pool to 1x1: (N, 2048)
        return ert.linear(pooled, self.fc_weight, self.fc_bias)

    @functools.cached_property
    def compiled(self) -> Any:
        """This model through graph mode (:func:`eagerrt.function`): traced on the first
        call per input shape, then run as one compiled plan."""
        return ert.function(self.__call__)
