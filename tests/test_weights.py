"""ert.weights: safetensors files in and out without torch, names mapped and checked."""

from __future__ import annotations

import json
import pathlib
import struct

import numpy as np
import pytest

import eagerrt as ert

DTYPES = ["float64", "float32", "float16", "int64", "int32", "int16", "int8", "uint8", "bool"]


def write_raw(path: pathlib.Path, header: dict, data: bytes) -> None:
    encoded = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + data)


def test_round_trip_keeps_names_dtypes_shapes_and_values(tmp_path: pathlib.Path) -> None:
    rng = np.random.default_rng(0)
    tensors = {f"t.{dtype}": (rng.random((3, 4, 2)) * 100).astype(dtype) for dtype in DTYPES}
    tensors["scalar"] = np.array(2.5, dtype="float32")
    tensors["empty"] = np.zeros((0, 7), dtype="float32")
    tensors["from_eagerrt"] = ert.asarray(np.arange(6, dtype="float32").reshape(2, 3)) * 2
    path = tmp_path / "w.safetensors"
    ert.weights.save_safetensors(path, tensors, metadata={"format": "pt"})
    loaded = ert.weights.load_safetensors(path)
    assert list(loaded) == list(tensors)
    for name, value in tensors.items():
        expected = value.numpy() if isinstance(value, ert.Tensor) else value
        assert loaded[name].dtype == expected.dtype and loaded[name].shape == expected.shape
        np.testing.assert_array_equal(loaded[name], expected)


def test_loaded_arrays_are_read_only_views_of_the_file(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "w.safetensors"
    ert.weights.save_safetensors(path, {"w": np.ones(4, "float32")})
    w = ert.weights.load_safetensors(path)["w"]
    with pytest.raises(ValueError, match="read-only"):
        w[0] = 2.0
    # An eagerrt model takes them as they are.
    assert (ert.asarray(w) * 3).numpy().tolist() == [3.0] * 4


def test_bfloat16_is_widened_to_float32_exactly(tmp_path: pathlib.Path) -> None:
    values = np.array([1.0, -2.5, 3.140625, 2.0**100, -0.0], dtype=np.float32)
    assert np.array_equal(values.view(np.uint32) & 0xFFFF, np.zeros(5, np.uint32))
    halves = (values.view(np.uint32) >> 16).astype("<u2")
    header = {"b": {"dtype": "BF16", "shape": [5], "data_offsets": [0, 10]}}
    write_raw(tmp_path / "b.safetensors", header, halves.tobytes())
    loaded = ert.weights.load_safetensors(tmp_path / "b.safetensors")["b"]
    assert loaded.dtype == np.float32
    np.testing.assert_array_equal(loaded, values)


def test_files_written_by_the_reference_library_load_and_ours_load_there(
    tmp_path: pathlib.Path,
) -> None:
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    tensors = {"a": np.arange(12, dtype="float32").reshape(3, 4), "b": np.arange(3)}
    safetensors_numpy.save_file(tensors, str(tmp_path / "theirs.safetensors"))
    ours = ert.weights.load_safetensors(tmp_path / "theirs.safetensors")
    for name in tensors:
        np.testing.assert_array_equal(ours[name], tensors[name])
    ert.weights.save_safetensors(tmp_path / "ours.safetensors", tensors)
    theirs = safetensors_numpy.load_file(str(tmp_path / "ours.safetensors"))
    for name in tensors:
        np.testing.assert_array_equal(theirs[name], tensors[name])


@pytest.mark.parametrize(
    ("header", "data", "message"),
    [
        ({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 8, "truncated"),
        (
            {"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}},
            b"\0" * 16,
            "fit its shape",
        ),
        ({"w": {"dtype": "F8_E4M3", "shape": [4], "data_offsets": [0, 4]}}, b"\0" * 4, "F8_E4M3"),
        ({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, b"\0" * 4, "malformed"),
        ({"w": {"dtype": "F32", "shape": [1]}}, b"\0" * 4, "data_offsets"),
        (
            {
                "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]},
            },
            b"\0" * 12,
            "overlap",
        ),
    ],
)
def test_a_corrupt_file_is_a_weights_error_naming_the_tensor(
    tmp_path: pathlib.Path, header: dict, data: bytes, message: str
) -> None:
    path = tmp_path / "bad.safetensors"
    write_raw(path, header, data)
    with pytest.raises(ert.WeightsError, match=message) as caught:
        ert.weights.load_safetensors(path)
    assert "bad.safetensors" in str(caught.value)


def test_a_file_that_is_not_safetensors_is_a_weights_error(tmp_path: pathlib.Path) -> None:
    (tmp_path / "short").write_bytes(b"abc")
    (tmp_path / "huge_header").write_bytes(struct.pack("<Q", 10**9) + b"{}")
    (tmp_path / "not_json").write_bytes(struct.pack("<Q", 4) + b"\xff\xfe{]")
    (tmp_path / "list").write_bytes(struct.pack("<Q", 2) + b"[]")
    for name, message in [
        ("short", "too short"),
        ("huge_header", "not a safetensors file"),
        ("not_json", "not valid JSON"),
        ("list", "not a JSON object"),
        ("missing", "cannot read"),
    ]:
        with pytest.raises(ert.WeightsError, match=message):
            ert.weights.load_safetensors(tmp_path / name)


def test_saving_a_dtype_the_format_lacks_is_an_error(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ert.WeightsError, match="complex128"):
        ert.weights.save_safetensors(tmp_path / "c", {"z": np.zeros(2, "complex128")})
    with pytest.raises(ert.WeightsError, match="strings"):
        ert.weights.save_safetensors(tmp_path / "c", {1: np.zeros(2)})


def test_rename_applies_rules_in_order_and_refuses_collisions() -> None:
    state = {"bert.encoder.layer.0.attention.self.query.weight": 1, "bert.pooler.dense.bias": 2}
    renamed = ert.weights.rename(
        state, [(r"^bert\.", ""), (r"encoder\.layer\.(\d+)\.", r"layers.\1."), (r"self\.", "")]
    )
    assert renamed == {"layers.0.attention.query.weight": 1, "pooler.dense.bias": 2}
    with pytest.raises(ert.WeightsError, match="both renamed to 'w'"):
        ert.weights.rename({"a.w": 1, "b.w": 2}, [(r"^\w\.", "")])


def test_expect_lists_every_problem_at_once_and_honours_ignore() -> None:
    shapes = {"conv.weight": (4, 3, 3, 3), "bn.running_mean": (4,), "fc.weight": (10, 4)}
    good = {name: np.zeros(shape) for name, shape in shapes.items()}
    ert.weights.expect(
        {**good, "bn.num_batches_tracked": np.zeros(())}, shapes, ignore=r"num_batches"
    )
    bad = {"conv.weight": np.zeros((4, 3, 1, 1)), "fc.weight": np.zeros((10, 4)), "extra": 0}
    with pytest.raises(ert.WeightsError) as caught:
        ert.weights.expect(bad, shapes)
    message = str(caught.value)
    assert "missing: 'bn.running_mean'" in message
    assert "unexpected: 'extra'" in message
    assert "'conv.weight' is (4, 3, 1, 1), the model needs (4, 3, 3, 3)" in message
    assert isinstance(caught.value, ert.UsageError) and isinstance(caught.value, ValueError)


def test_import_eagerrt_and_loading_weights_need_none_of_the_heavy_packages(
    tmp_path: pathlib.Path,
) -> None:
    import subprocess
    import sys

    path = tmp_path / "w.safetensors"
    ert.weights.save_safetensors(path, {"w": np.ones(3, "float32")})
    script = (
        "import sys, eagerrt as ert\n"
        f"w = ert.weights.load_safetensors({str(path)!r})['w']\n"
        "assert (ert.asarray(w) + 1).numpy().tolist() == [2.0] * 3\n"
        "heavy = ['torch', 'onnx', 'onnxruntime', 'sentence_transformers', 'transformers',\n"
        "         'tokenizers', 'safetensors', 'matplotlib']\n"
        "print(sorted(name for name in heavy if name in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "[]"


def test_saving_over_a_loaded_file_leaves_the_loaded_arrays_intact(
    tmp_path: pathlib.Path,
) -> None:
    # load, change, save back to the same path: the usual fine-tune-and-save loop. The
    # arrays loaded first map the file; truncating it in place killed the process (SIGBUS)
    # when the save read them. A subprocess, so that a crash fails this test, not the run.
    import subprocess
    import sys

    path = tmp_path / "w.safetensors"
    script = (
        "import numpy as np, eagerrt as ert\n"
        f"path = {str(path)!r}\n"
        "ert.weights.save_safetensors(path, {'w': np.arange(1 << 16, dtype='float32')})\n"
        "state = ert.weights.load_safetensors(path)\n"
        "ert.weights.save_safetensors(path, {'extra': np.zeros(3), **state})\n"
        "assert state['w'][-1] == (1 << 16) - 1  # the old map still reads the old data\n"
        "again = ert.weights.load_safetensors(path)\n"
        "assert list(again) == ['extra', 'w'] and again['w'][-1] == (1 << 16) - 1\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert result.returncode == 0, result.stderr.decode()
    assert [p.name for p in tmp_path.iterdir()] == ["w.safetensors"]  # no temporary left


def test_a_tensor_named_like_the_metadata_entry_is_refused(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ert.WeightsError, match="__metadata__"):
        ert.weights.save_safetensors(tmp_path / "w.safetensors", {"__metadata__": np.ones(1)})


def test_a_file_replaced_while_loading_gives_the_old_files_data(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Header and data come from the same open file: a save (or any rename) landing
    # between reading the header and mapping the data can't pair one file's header with
    # the other's bytes.
    path, other = tmp_path / "w.safetensors", tmp_path / "other.safetensors"
    ert.weights.save_safetensors(path, {"w": np.arange(4, dtype="float32")})
    ert.weights.save_safetensors(other, {"v": np.full(2, 7, "int64"), "w": np.zeros(4, "f4")})
    real_loads = json.loads

    def replace_then_parse(raw: bytes) -> object:
        other.replace(path)
        return real_loads(raw)

    monkeypatch.setattr(ert.weights.json, "loads", replace_then_parse)
    state = ert.weights.load_safetensors(path)
    assert state["w"].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_rename_takes_a_mapping_of_rules_and_refuses_malformed_ones() -> None:
    state = {"ab.weight": 1, "bert.x": 2}
    # A dict {pattern: replacement} is the natural spelling: each item is one rule (iterating
    # it gave its keys, and a two-character key unpacked into pattern and replacement).
    assert ert.weights.rename(state, {"ab": "cd", r"^bert\.": ""}) == {"cd.weight": 1, "x": 2}
    with pytest.raises(ert.WeightsError, match=r"\(pattern, replacement\)"):
        ert.weights.rename(state, ["ab"])
    with pytest.raises(ert.WeightsError, match=r"'\(unclosed'"):
        ert.weights.rename(state, [("(unclosed", "")])
