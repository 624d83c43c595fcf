"""A model behind an HTTP endpoint, with and without micro-batching.

The server is plain asyncio streams (HTTP/1.1, keep-alive): ``POST /predict``
takes one example as raw float32 bytes and answers JSON ``{"label": k, "p": ...}``.
With batching on, requests go through ``ert.serving.MicroBatcher``, so the
requests that arrive together share one model call; with it off, each request
calls the model on its own (a batch of one). The load generator
(``examples/serve_load.py``) opens ``--clients`` keep-alive connections that each
send requests back to back, and prints throughput and p50/p99 latency for both.

Run it with ``python examples/serve.py`` (``--requests``, ``--clients``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pathlib
import sys
from collections.abc import Awaitable, Callable

import numpy as np

import eagerrt as ert

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from serve_load import LoadResult, run_load

FEATURES, HIDDEN, CLASSES = 256, 1024, 10
rng = np.random.default_rng(0)
W1 = ert.asarray(rng.standard_normal((FEATURES, HIDDEN), dtype=np.float32) * 0.05)
W2 = ert.asarray(rng.standard_normal((HIDDEN, HIDDEN), dtype=np.float32) * 0.03)
W3 = ert.asarray(rng.standard_normal((HIDDEN, CLASSES), dtype=np.float32) * 0.03)


@ert.function
def model(x: ert.Tensor) -> ert.Tensor:
    """(batch, 256) -> (batch, 10) class probabilities."""
    h = ert.relu(x @ W1)
    h = ert.relu(h @ W2)
    return ert.softmax(h @ W3, axis=-1)


Predict = Callable[[np.ndarray], Awaitable[np.ndarray]]


def unbatched() -> Predict:
    async def predict(x: np.ndarray) -> np.ndarray:
        return (await model(ert.asarray(x[None])))[0]  # a batch of one per request

    return predict


def batched(batcher: ert.serving.MicroBatcher) -> Predict:
    async def predict(x: np.ndarray) -> np.ndarray:
        return (await batcher(x)).numpy()  # this request's row of a shared batch

    return predict


# -- a minimal HTTP/1.1 server ---------------------------------------------------------
async def handle(
    predict: Predict, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                return  # the client closed the connection
            request_line, *header_lines = head.decode("latin-1").split("\r\n")
            headers = dict(line.split(": ", 1) for line in header_lines if ": " in line)
            body = await reader.readexactly(int(headers.get("Content-Length", "0")))
            if not request_line.startswith("POST /predict "):
                await respond(writer, 404, {"error": "POST /predict only"})
                continue
            if len(body) != FEATURES * 4:
                await respond(writer, 400, {"error": f"expected {FEATURES} float32 values"})
                continue
            try:
                p = await predict(np.frombuffer(body, dtype=np.float32))
            except ert.EagerError as error:
                await respond(writer, 500, {"error": str(error)})
                continue
            label = int(p.argmax())
            await respond(writer, 200, {"label": label, "p": round(float(p[label]), 6)})
    finally:
        writer.close()


async def respond(writer: asyncio.StreamWriter, status: int, payload: dict[str, object]) -> None:
    body = json.dumps(payload).encode()
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 500: "Internal Server Error"}
    writer.write(
        f"HTTP/1.1 {status} {reason[status]}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    await writer.drain()


async def serve_and_load(predict: Predict, requests: int, clients: int) -> LoadResult:
    server = await asyncio.start_server(
        lambda r, w: handle(predict, r, w), host="127.0.0.1", port=0
    )
    port = server.sockets[0].getsockname()[1]
    async with server:
        return await run_load("127.0.0.1", port, requests=requests, clients=clients)


async def main(requests: int, clients: int) -> None:
    # Warm up: compile the model for batch 1 and for every bucket the batcher pads to.
    for size in (1, *ert.serving.pow2_buckets(32)):
        model(ert.zeros((size, FEATURES), dtype="float32")).wait()

    off = await serve_and_load(unbatched(), requests, clients)
    async with ert.serving.MicroBatcher(model, max_batch_size=32, max_wait=0.002) as batcher:
        on = await serve_and_load(batched(batcher), requests, clients)
    stats = batcher.statistics()

    print(f"serving a {FEATURES}-{HIDDEN}-{HIDDEN}-{CLASSES} MLP over HTTP, {clients} clients")
    print(f"{'':18}{'requests/s':>12}{'p50 ms':>9}{'p99 ms':>9}")
    for name, result in [("batching off", off), ("batching on", on)]:
        print(f"{name:18}{result.throughput:12.0f}{result.p50 * 1e3:9.2f}{result.p99 * 1e3:9.2f}")
    print(
        f"batching on: {on.throughput / off.throughput:.2f}x the throughput, "
        f"mean batch {stats.mean_batch_size:.1f} over {stats.batches} model calls"
    )
    same = on.labels == off.labels
    print(f"errors: {off.errors + on.errors}; same answers with and without batching: {same}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=32)
    args = parser.parse_args()
    asyncio.run(main(args.requests, args.clients))
