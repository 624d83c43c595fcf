"""ResNet-18 (CIFAR) in eagerrt against PyTorch's: the same random weights (batch-norm
statistics included), saved by name to a safetensors file and loaded back without torch,
give the same logits eagerly and compiled; a state dict that doesn't fit is refused."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import numpy as np
import pytest

import eagerrt as ert

torch = pytest.importorskip("torch", reason="the models extra (torch) is not installed")

from models import resnet, torch_reference  # noqa: E402

EXAMPLE = pathlib.Path(resnet.__file__)


@pytest.fixture
def anyio_backend() -> str:
    """A whole model is slow to run on three loops: the loops are tested elsewhere."""
    return "asyncio"


@pytest.fixture(scope="module")
def reference() -> torch_reference.ResNet18CIFAR:
    return torch_reference.random_resnet18(seed=0)


@pytest.fixture(scope="module")
def weights_file(
    reference: torch_reference.ResNet18CIFAR, tmp_path_factory: pytest.TempPathFactory
) -> pathlib.Path:
    path = tmp_path_factory.mktemp("resnet") / "resnet18.safetensors"
    ert.weights.save_safetensors(path, torch_reference.numpy_state_dict(reference))
    return path


@pytest.fixture(scope="module")
def model(weights_file: pathlib.Path) -> resnet.ResNet18:
    return resnet.ResNet18.from_safetensors(weights_file)


def torch_logits(reference: torch_reference.ResNet18CIFAR, x: np.ndarray) -> np.ndarray:
    with torch.inference_mode():
        return reference(torch.from_numpy(x)).numpy()


def images(batch: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, 3, 32, 32), dtype=np.float32)


def assert_logits_match(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    # The random network separates the images: a wrong layer would not stay this close.
    assert np.ptp(want) > 0.1


@pytest.mark.anyio
@pytest.mark.parametrize("batch", [1, 5])
async def test_eager_and_compiled_match_pytorch(
    model: resnet.ResNet18, reference: torch_reference.ResNet18CIFAR, batch: int
) -> None:
    x = images(batch)
    want = torch_logits(reference, x)
    eager = model(ert.asarray(x))
    assert_logits_match(await (await eager), want)
    compiled = await model.compiled(ert.asarray(x))
    assert compiled.shape == (batch, 10)
    assert_logits_match(await compiled, want)
    again = await model.compiled(ert.asarray(images(batch, seed=2)))  # the warm plan
    assert_logits_match(await again, torch_logits(reference, images(batch, seed=2)))


@pytest.mark.anyio
async def test_unfolded_batch_norm_matches_pytorch(
    weights_file: pathlib.Path, reference: torch_reference.ResNet18CIFAR
) -> None:
    """With ``fold_batch_norm=False`` the model calls ``ert.batch_norm`` itself, and
    graph mode's own folding pass handles it."""
    model = resnet.ResNet18.from_safetensors(weights_file, fold_batch_norm=False)
    x = images(2)
    want = torch_logits(reference, x)
    assert_logits_match(await (await model(ert.asarray(x))), want)
    assert_logits_match(await (await model.compiled(ert.asarray(x))), want)
    assert "batch norm folding: 20 rewrites" in model.compiled.explain(ert.asarray(x))


def test_state_dict_names_and_shapes_are_pytorchs(
    reference: torch_reference.ResNet18CIFAR,
) -> None:
    state = torch_reference.numpy_state_dict(reference)
    real = {k: v.shape for k, v in state.items() if not k.endswith("num_batches_tracked")}
    assert resnet.state_dict_shapes() == real


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: s.pop("layer3.1.bn2.running_var"), "missing: 'layer3.1.bn2.running_var'"),
        (
            lambda s: s.update({"layer2.0.conv1.weight": np.zeros((128, 64, 1, 1), "f4")}),
            "wrong shape: 'layer2.0.conv1.weight' is (128, 64, 1, 1), "
            "the model needs (128, 64, 3, 3)",
        ),
        (lambda s: s.update({"fc.weight": np.zeros((10, 512), "f4")}), "unexpected: 'fc.weight'"),
    ],
    ids=["missing", "wrong-shape", "unexpected"],
)
def test_a_state_dict_that_does_not_fit_is_refused(
    reference: torch_reference.ResNet18CIFAR, edit: object, message: str
) -> None:
    state = torch_reference.numpy_state_dict(reference)
    edit(state)  # type: ignore[operator]
    with pytest.raises(ert.WeightsError) as raised:
        resnet.ResNet18.from_state_dict(state)
    assert message in str(raised.value)


def test_demo_loads_weights_without_torch(weights_file: pathlib.Path) -> None:
    """``python examples/models/resnet.py weights.safetensors`` ("resnet.py"): classifies
    with the file's weights, compiled equal to eager, and never imports torch."""
    code = (
        "import runpy, sys; sys.argv = [sys.argv[1], sys.argv[2]]; "
        "runpy.run_path(sys.argv[0], run_name='__main__'); "
        "assert 'torch' not in sys.modules, 'torch was imported'"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(EXAMPLE), str(weights_file)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "compiled == eager: True" in done.stdout
    assert f"weights from {weights_file}" in done.stdout
