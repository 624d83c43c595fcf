"""ResNet-50 (torchvision's layout) in eagerrt against PyTorch's: the same random weights
under torchvision's ``state_dict`` names (batch-norm statistics included) give the same
logits eagerly and compiled; a state dict that doesn't fit is refused.

torchvision is not needed: ``torch_reference.ResNet50`` has its layout and names. The
images are small (64x64) to keep the test quick; the network is the same at any size."""

from __future__ import annotations

import numpy as np
import pytest

import eagerrt as ert

torch = pytest.importorskip("torch", reason="the models extra (torch) is not installed")

from models import resnet50, torch_reference  # noqa: E402

SIZE = 64


@pytest.fixture
def anyio_backend() -> str:
    """A whole model is slow to run on three loops: the loops are tested elsewhere."""
    return "asyncio"


@pytest.fixture(scope="module")
def reference() -> torch_reference.ResNet50:
    return torch_reference.random_resnet50(seed=0)


@pytest.fixture(scope="module")
def state(reference: torch_reference.ResNet50) -> dict[str, np.ndarray]:
    return torch_reference.numpy_state_dict(reference)


def images(batch: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, 3, SIZE, SIZE), dtype=np.float32)


def torch_logits(reference: torch_reference.ResNet50, x: np.ndarray) -> np.ndarray:
    with torch.inference_mode():
        return reference(torch.from_numpy(x)).numpy()


def assert_logits_match(got: np.ndarray, want: np.ndarray) -> None:
    """Equal to 1e-4 of the logits' scale. Float32 rounding alone, through 53 layers
    summing up to 4608 products each, moves logits of magnitude ~4 by ~1e-4: PyTorch's
    own float32 result is that far from its float64 one."""
    assert got.shape == want.shape and got.dtype == np.float32
    scale = max(1.0, float(np.max(np.abs(want))))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 * scale)
    # The random network separates its classes: a wrong layer would not stay this close.
    assert np.ptp(want) > 1.0


def test_state_dict_names_and_shapes_are_torchvisions(
    state: dict[str, np.ndarray],
) -> None:
    real = {k: v.shape for k, v in state.items() if not k.endswith("num_batches_tracked")}
    assert resnet50.state_dict_shapes() == real
    assert len(real) == 267  # torchvision's resnet50: 320 entries, 53 of them counters
    assert real["layer1.0.downsample.0.weight"] == (256, 64, 1, 1)
    assert real["layer4.2.conv2.weight"] == (512, 512, 3, 3)
    assert real["fc.weight"] == (1000, 2048)


@pytest.mark.anyio
async def test_eager_and_compiled_match_pytorch(
    state: dict[str, np.ndarray], reference: torch_reference.ResNet50
) -> None:
    model = resnet50.ResNet50.from_state_dict(state, device="cpu")
    assert model.device is ert.get_device("cpu")
    x = images(1)
    want = torch_logits(reference, x)
    eager = await model(ert.asarray(x))
    assert eager.shape == (1, 1000)
    assert_logits_match(await eager, want)
    compiled = await model.compiled(ert.asarray(x))
    assert compiled.shape == (1, 1000)
    assert_logits_match(await compiled, want)
    again = await model.compiled(ert.asarray(images(1, seed=2)))  # the warm plan
    assert_logits_match(await again, torch_logits(reference, images(1, seed=2)))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: s.pop("layer3.5.bn3.running_var"), "missing: 'layer3.5.bn3.running_var'"),
        (
            lambda s: s.update({"layer2.0.conv2.weight": np.zeros((128, 128, 1, 1), "f4")}),
            "wrong shape: 'layer2.0.conv2.weight' is (128, 128, 1, 1), "
            "the model needs (128, 128, 3, 3)",
        ),
        (
            lambda s: s.update({"linear.weight": np.zeros((10, 2048), "f4")}),
            "unexpected: 'linear.weight'",
        ),
    ],
    ids=["missing", "wrong-shape", "unexpected"],
)
def test_a_state_dict_that_does_not_fit_is_refused(
    state: dict[str, np.ndarray], edit: object, message: str
) -> None:
    state = dict(state)
    edit(state)  # type: ignore[operator]
    with pytest.raises(ert.WeightsError) as raised:
        resnet50.ResNet50.from_state_dict(state)
    assert message in str(raised.value)
