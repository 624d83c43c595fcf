"""Model weights from files, without torch: safetensors in and out, PyTorch names mapped.

A safetensors file is an 8-byte little-endian header length, a JSON header naming each
tensor's dtype, shape and byte range, then the raw bytes. :func:`load_safetensors`
memory-maps the file and hands out numpy views into it, so a 90 MB model loads in
microseconds and pages in only what is used. :func:`rename` maps a checkpoint's
(PyTorch ``state_dict``) names onto a model's, :func:`expect` checks the result against
the shapes a model needs, naming every missing, unexpected and mis-shaped entry at once.

>>> import os, tempfile, numpy as np, eagerrt as ert
>>> path = os.path.join(tempfile.mkdtemp(), "tiny.safetensors")
>>> ert.weights.save_safetensors(path, {"encoder.layer.0.weight": np.eye(2, dtype="float32")})
>>> state = ert.weights.load_safetensors(path)
>>> state = ert.weights.rename(state, [(r"^encoder\\.layer\\.", "blocks.")])
>>> ert.weights.expect(state, {"blocks.0.weight": (2, 2)})
>>> state["blocks.0.weight"].tolist()
[[1.0, 0.0], [0.0, 1.0]]
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import re
import struct
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ._core import WeightsError
from .tensor import Tensor

__all__ = ["WeightsError", "expect", "load_safetensors", "rename", "save_safetensors"]

# safetensors dtype names -> numpy dtypes (little-endian, as the format stores them).
_DTYPES: dict[str, np.dtype[Any]] = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U64": np.dtype("<u8"),
    "U32": np.dtype("<u4"),
    "U16": np.dtype("<u2"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
_NAMES = {dtype: name for name, dtype in _DTYPES.items()}

#: A header larger than this is not a safetensors file (the format's own limit).
_MAX_HEADER = 100 * 1024 * 1024


def load_safetensors(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """The tensors of a safetensors file as numpy arrays, by name, in file order.

    Arrays are read-only views of a memory map of the file (nothing is copied until
    used), except ``BF16`` tensors, which numpy has no type for: they are widened to
    float32 (exactly: bfloat16 is float32's top half). The header is checked (byte
    ranges inside the file, matching shapes, no overlaps), so a truncated or corrupt
    file is a :class:`~eagerrt.WeightsError` naming the file and the tensor.

    The map (and one file descriptor) lives as long as any array from it, or any
    eagerrt tensor made from one without a copy. :func:`save_safetensors` to the same
    path is safe (it writes a new file and renames it over the old one; the arrays keep
    reading the old one), and so is deleting the file on Linux and macOS. A program that
    rewrites the file *in place* while the arrays are used makes reading them crash the
    process (SIGBUS): copy them first (``{k: v.copy() for k, v in state.items()}``).

    >>> import os, tempfile, numpy as np
    >>> path = os.path.join(tempfile.mkdtemp(), "w.safetensors")
    >>> save_safetensors(path, {"w": np.arange(6, dtype="float32").reshape(2, 3)})
    >>> load_safetensors(path)["w"].shape
    (2, 3)
    """
    path = os.fspath(path)
    try:
        with open(path, "rb") as file:
            size = os.fstat(file.fileno()).st_size
            prefix = file.read(8)
            if len(prefix) < 8:
                raise WeightsError(f"{path}: too short for a safetensors file ({size} bytes)")
            (header_size,) = struct.unpack("<Q", prefix)
            if header_size > min(_MAX_HEADER, size - 8):
                raise WeightsError(
                    f"{path}: not a safetensors file (header length {header_size}, "
                    f"file {size} bytes)"
                )
            raw_header = file.read(header_size)
            start = 8 + header_size
            # Mapped from the file whose header was read, not reopened by name: a save
            # renamed over the path meanwhile must not pair this header with its bytes.
            # A plain ndarray over the map: memmap's subclass behaviour (0-d results that
            # stay 1-d, a file handle kept per view) is not what weights should carry.
            data = (
                np.asarray(np.memmap(file, dtype=np.uint8, mode="r", offset=start))
                if size > start
                else np.empty(0, np.uint8)
            )
    except WeightsError:
        raise
    except (OSError, ValueError) as exc:  # ValueError: mmap of a file that shrank
        raise WeightsError(f"cannot read weights from {path}: {exc}") from exc
    try:
        header = json.loads(raw_header)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WeightsError(f"{path}: the safetensors header is not valid JSON: {exc}") from exc
    if not isinstance(header, dict):
        raise WeightsError(f"{path}: the safetensors header is not a JSON object")
    header.pop("__metadata__", None)

    tensors: dict[str, np.ndarray] = {}
    spans: list[tuple[int, int, str]] = []
    for name, entry in header.items():
        dtype_name, shape, begin, end = _entry(path, name, entry)
        if end > data.size:
            raise WeightsError(
                f"{path}: tensor {name!r} ends at byte {end} of a {data.size}-byte data "
                "section (the file is truncated?)"
            )
        # BF16, which numpy has no type for, is read as its bits and widened below.
        dtype = np.dtype("<u2") if dtype_name == "BF16" else _DTYPES.get(dtype_name)
        if dtype is None:
            raise WeightsError(
                f"{path}: tensor {name!r} has dtype {dtype_name}, which eagerrt can't "
                f"load; supported: {', '.join([*_DTYPES, 'BF16'])}"
            )
        if end - begin != dtype.itemsize * math.prod(shape):
            raise WeightsError(
                f"{path}: tensor {name!r} ({dtype_name}, shape {shape}) has {end - begin} bytes "
                "of data, which does not fit its shape"
            )
        array = data[begin:end].view(dtype)
        if dtype_name == "BF16":  # exactly: bfloat16 is float32's top half
            array = (array.astype(np.uint32) << 16).view(np.float32)
        spans.append((begin, end, name))
        tensors[name] = array.reshape(shape)
    spans.sort()
    for (_, end, first), (begin, _, second) in itertools.pairwise(spans):
        if begin < end:
            raise WeightsError(f"{path}: tensors {first!r} and {second!r} overlap")
    return tensors


def _entry(path: str, name: str, entry: Any) -> tuple[str, tuple[int, ...], int, int]:
    """One header entry's (dtype, shape, begin, end), checked."""
    try:
        dtype_name = entry["dtype"]
        shape = tuple(entry["shape"])
        begin, end = entry["data_offsets"]
    except (TypeError, KeyError, ValueError) as exc:
        raise WeightsError(
            f"{path}: header entry {name!r} needs 'dtype', 'shape' and 'data_offsets'"
        ) from exc
    valid = (
        isinstance(dtype_name, str)
        and all(type(d) is int and d >= 0 for d in shape)
        and type(begin) is int
        and type(end) is int
        and 0 <= begin <= end
    )
    if not valid:
        raise WeightsError(f"{path}: header entry {name!r} is malformed: {entry!r}")
    return dtype_name, shape, begin, end


def save_safetensors(
    path: str | os.PathLike[str],
    tensors: Mapping[str, Any],
    metadata: Mapping[str, str] | None = None,
) -> None:
    """Write ``tensors`` (numpy arrays, eagerrt tensors, anything ``np.asarray`` takes)
    to a safetensors file that torch's and Hugging Face's loaders read too.

    Eagerrt tensors are awaited (blocking) for their data, so call this off the event
    loop, or pass arrays you already have. The file is written beside ``path`` and
    renamed over it, so a save that fails leaves the old file whole, and arrays loaded
    from the old file (even those being saved) stay valid.
    """
    arrays: list[tuple[str, np.ndarray]] = []
    for name, value in tensors.items():
        if not isinstance(name, str):
            raise WeightsError(f"tensor names must be strings, not {name!r}")
        if name == "__metadata__":
            raise WeightsError("'__metadata__' names the file's metadata, not a tensor")
        host = value.numpy() if isinstance(value, Tensor) else value
        array = np.asarray(host, order="C")  # (ascontiguousarray makes 0-d 1-d)
        dtype = array.dtype.newbyteorder("<") if array.dtype.byteorder == ">" else array.dtype
        if dtype not in _NAMES:
            raise WeightsError(
                f"tensor {name!r} has dtype {array.dtype}, which safetensors can't store"
            )
        arrays.append((name, array.astype(dtype, copy=False)))
    header: dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    for name, array in arrays:
        header[name] = {
            "dtype": _NAMES[array.dtype],
            "shape": list(array.shape),
            "data_offsets": [offset, offset + array.nbytes],
        }
        offset += array.nbytes
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # the data section starts 8-byte aligned
    # Written beside the target and renamed over it: arrays loaded from the old file map
    # it, and truncating it in place would kill the process (SIGBUS) when they are read,
    # this save's own reads included. A save that fails leaves the old file as it was.
    path = os.fspath(path)
    folder, base = os.path.split(path)
    partial = os.path.join(folder, f".{base}.{uuid.uuid4().hex}.partial")
    try:
        with open(partial, "xb") as file:
            file.write(struct.pack("<Q", len(encoded)))
            file.write(encoded)
            for _, array in arrays:
                file.write(array.data.cast("B") if array.size else b"")
        os.replace(partial, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        if isinstance(exc, OSError):
            raise WeightsError(f"cannot write weights to {path}: {exc}") from exc
        raise


def rename(
    state: Mapping[str, Any], rules: Iterable[tuple[str, str]] | Mapping[str, str]
) -> dict[str, Any]:
    """``state`` with each name rewritten by the regex substitutions ``rules``, pairs
    ``(pattern, replacement)`` or a dict of them (applied in order, each to the result
    of the last); values untouched.

    Two names that end up the same are an error rather than one silently dropped.

    >>> rename({"bert.encoder.layer.0.attention.self.query.weight": 1},
    ...        [(r"^bert\\.", ""), (r"\\.attention\\.self\\.", ".attn.")])
    {'encoder.layer.0.attn.query.weight': 1}
    """
    pairs = list(rules.items() if isinstance(rules, Mapping) else rules)
    compiled: list[tuple[re.Pattern[str], str]] = []
    for rule in pairs:
        if not (
            isinstance(rule, (tuple, list))
            and len(rule) == 2
            and all(isinstance(part, str) for part in rule)
        ):
            raise WeightsError(f"a rename rule is a (pattern, replacement) pair, got {rule!r}")
        try:
            compiled.append((re.compile(rule[0]), rule[1]))
        except re.error as exc:
            raise WeightsError(f"rename pattern {rule[0]!r} is not a regex: {exc}") from exc
    renamed: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for name, value in state.items():
        new = name
        for pattern, replacement in compiled:
            new = pattern.sub(replacement, new)
        if new in renamed:
            raise WeightsError(f"{origin[new]!r} and {name!r} are both renamed to {new!r}")
        renamed[new] = value
        origin[new] = name
    return renamed


def expect(
    state: Mapping[str, Any],
    shapes: Mapping[str, tuple[int, ...]],
    *,
    ignore: str | None = None,
) -> None:
    """Check that ``state`` has exactly the names in ``shapes``, each with that shape.

    Names matching the regex ``ignore`` may be there or not (PyTorch's
    ``num_batches_tracked``, say). One :class:`~eagerrt.WeightsError` lists every missing,
    unexpected and mis-shaped name, so a wrong checkpoint is diagnosed in one go.

    >>> import numpy as np
    >>> try:
    ...     expect({"w": np.zeros((2, 3))}, {"w": (3, 2), "b": (2,)})
    ... except WeightsError as error:
    ...     print(error)
    the weights don't fit the model: missing: 'b'; wrong shape: 'w' is (2, 3), the model needs (3, 2)
    """
    skip = re.compile(ignore) if ignore is not None else None
    missing = [name for name in shapes if name not in state]
    unexpected = [name for name in state if name not in shapes and not (skip and skip.search(name))]
    wrong = [
        f"{name!r} is {tuple(np.shape(state[name]))}, the model needs {tuple(shape)}"
        for name, shape in shapes.items()
        if name in state and tuple(np.shape(state[name])) != tuple(shape)
    ]
    problems = []
    if missing:
        problems.append("missing: " + ", ".join(map(repr, missing)))
    if unexpected:
        problems.append("unexpected: " + ", ".join(map(repr, unexpected)))
    if wrong:
        problems.append("wrong shape: " + "; ".join(wrong))
    if problems:
        raise WeightsError("the weights don't fit the model: " + "; ".join(problems))
