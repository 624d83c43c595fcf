"""A file-to-file inference pipeline: read -> preprocess -> model -> write.

Generates 48 small input files (each a batch of 16 rows of 1024 features, .npy),
then processes them twice: one file at a time, and as an ``ert.pipeline`` in
which every stage works at once (reads of later files overlap the model's work
on earlier ones). It prints the sequential run's stage times (their sum is its
wall time) next to the pipeline's wall time, and checks that both runs wrote
the same results.

The storage is made to behave like a network filesystem: each read and each
write takes an extra 4 ms of latency (``anyio.sleep``), which local temp files
would not show.

Run it with ``python examples/pipeline.py``.
"""

from __future__ import annotations

import io
import pathlib
import tempfile
import time

import anyio
import numpy as np

import eagerrt as ert

FILES = 48
ROWS, FEATURES, HIDDEN, CLASSES = 16, 1024, 512, 10
STORAGE_LATENCY_S = 0.004

rng = np.random.default_rng(0)
W1 = ert.asarray(rng.standard_normal((FEATURES, HIDDEN), dtype=np.float32) * 0.03)
W2 = ert.asarray(rng.standard_normal((HIDDEN, HIDDEN), dtype=np.float32) * 0.04)
W3 = ert.asarray(rng.standard_normal((HIDDEN, CLASSES), dtype=np.float32) * 0.04)


@ert.function
def model(x: ert.Tensor) -> ert.Tensor:
    h = ert.relu(x @ W1)
    h = ert.relu(h @ W2)
    return ert.softmax(h @ W3, axis=-1)


# -- the stages ----------------------------------------------------------------
async def read(path: pathlib.Path) -> bytes:
    await anyio.sleep(STORAGE_LATENCY_S)
    return await anyio.Path(path).read_bytes()


async def preprocess(data: bytes) -> ert.Tensor:
    x = ert.asarray(np.load(io.BytesIO(data)))
    mean = ert.mean(x, axis=1, keepdims=True)
    std = ert.std(x, axis=1, keepdims=True)
    return (x - mean) / (std + 1e-6)  # pending: the pipeline waits for it


async def write(named: tuple[pathlib.Path, ert.Tensor]) -> pathlib.Path:
    path, probabilities = named
    buffer = io.BytesIO()
    np.save(buffer, await probabilities)
    await anyio.sleep(STORAGE_LATENCY_S)
    await anyio.Path(path).write_bytes(buffer.getvalue())
    return path


def output_path(out_dir: pathlib.Path, source: pathlib.Path) -> pathlib.Path:
    return out_dir / source.name.replace("in_", "out_")


# -- the two runs ----------------------------------------------------------------
async def sequential(paths: list[pathlib.Path], out_dir: pathlib.Path) -> dict[str, float]:
    """One file at a time; returns the seconds spent in each stage (they add up to
    the run's wall time)."""
    times = dict.fromkeys(["read", "preprocess", "model", "write"], 0.0)
    clock = time.perf_counter()

    def lap(stage: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        times[stage] += now - clock
        clock = now

    for path in paths:
        data = await read(path)
        lap("read")
        x = await preprocess(data)
        await x
        lap("preprocess")
        y = model(x)
        await y
        lap("model")
        await write((output_path(out_dir, path), y))
        lap("write")
    return times


async def pipelined(
    paths: list[pathlib.Path], out_dir: pathlib.Path
) -> tuple[float, tuple[ert.pipeline.StageStatistics, ...]]:
    async def infer(path_and_x: tuple[pathlib.Path, ert.Tensor]) -> tuple[pathlib.Path, ert.Tensor]:
        path, x = path_and_x
        return output_path(out_dir, path), model(x)

    async def load(path: pathlib.Path) -> tuple[pathlib.Path, ert.Tensor]:
        return path, await preprocess(await read(path))

    stages = (
        ert.pipeline.map(load, paths, concurrency=8, max_bytes=4 << 20, name="read+preprocess")
        .map(infer, concurrency=2, name="model")
        .map(write, concurrency=8, name="write")
    )
    start = time.perf_counter()
    async with stages as results:
        written = [path async for path in results]
        stats = results.statistics()
    assert len(written) == len(paths)
    return time.perf_counter() - start, stats


def make_inputs(directory: pathlib.Path) -> list[pathlib.Path]:
    paths = []
    for i in range(FILES):
        path = directory / f"in_{i:03d}.npy"
        np.save(path, rng.standard_normal((ROWS, FEATURES), dtype=np.float32))
        paths.append(path)
    return paths


def read_outputs(directory: pathlib.Path) -> list[np.ndarray]:
    return [np.load(p) for p in sorted(directory.glob("out_*.npy"))]


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        (root / "seq").mkdir()
        (root / "pipe").mkdir()
        paths = make_inputs(root)
        model(ert.zeros((ROWS, FEATURES), dtype="float32")).wait()  # compile once, untimed

        stage_s = await sequential(paths, root / "seq")
        pipe_s, stats = await pipelined(paths, root / "pipe")

        same = all(
            np.allclose(a, b, rtol=1e-5, atol=1e-6)
            for a, b in zip(read_outputs(root / "seq"), read_outputs(root / "pipe"), strict=True)
        )
        count = len(read_outputs(root / "pipe"))

    seq_s = sum(stage_s.values())
    stages = ", ".join(f"{name} {t * 1e3:.0f}" for name, t in stage_s.items())
    print(f"pipeline: {FILES} files, read -> preprocess -> model -> write")
    print(f"sequential run:  {seq_s * 1e3:7.1f} ms  (stage times in ms: {stages})")
    print(f"pipelined run:   {pipe_s * 1e3:7.1f} ms  (overlap: {seq_s / pipe_s:.1f}x faster)")
    for s in stats:
        print(
            f"  stage {s.name:<16} at most {s.max_running} running, "
            f"{s.max_in_flight} in flight, {s.max_bytes_in_flight / 1024:.0f} KiB held"
        )
    print(f"files written: {count}, results identical to the sequential run: {same}")


if __name__ == "__main__":
    anyio.run(main)
