"""examples/serve.py's MLP behind FastAPI (ASGI, under uvicorn), batched or not.

``POST /predict`` takes one example as raw float32 bytes and answers JSON
``{"label": k, "p": ...}``, as ``examples/serve.py`` does with plain asyncio
streams. The app is made by :func:`make_app` for one of three ways to compute:

* ``numpy``: the same MLP in hand-written numpy, one request at a time (what a
  server without eagerrt does);
* ``compiled``: the compiled model on a batch of one per request;
* ``batched``: requests go through ``ert.serving.MicroBatcher`` (opened and
  closed with the app, in its lifespan), so those that arrive together share
  one model call;
* ``none``: a fixed answer, no model: what the HTTP stack alone can serve (the
  ceiling for the others).

``python examples/serve_fastapi.py --mode batched --port 8000`` serves one;
``python examples/serve_fastapi.py`` starts each in turn on 127.0.0.1, loads it
from another process (``examples/serve_load.py``: 32 keep-alive clients) and
prints requests/s and p50/p99 latency. Needs ``fastapi`` and ``uvicorn``.
"""

# No `from __future__ import annotations`: FastAPI reads the endpoint's annotations
# at run time, and `Request` is imported inside make_app (FastAPI is optional).
import argparse
import contextlib
import pathlib
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import numpy as np

import eagerrt as ert

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from serve import CLASSES, FEATURES, W1, W2, W3, Predict, batched, model, unbatched  # noqa: E402

MODES = ("numpy", "compiled", "batched", "none")
_W = [w.numpy() for w in (W1, W2, W3)]  # the same weights, as numpy arrays


async def numpy_predict(x: np.ndarray) -> np.ndarray:
    """The MLP in plain numpy, one example."""
    h = np.maximum(x @ _W[0], 0)
    h = np.maximum(h @ _W[1], 0)
    logits = h @ _W[2]
    e = np.exp(logits - logits.max())
    return e / e.sum()


_FIXED = np.full(CLASSES, 1.0 / CLASSES, np.float32)


async def _no_model(x: np.ndarray) -> np.ndarray:
    return _FIXED


def make_app(mode: str) -> Any:
    """A FastAPI app serving ``POST /predict`` the ``mode`` way (see the module docstring)."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    predict: list[Predict] = []

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        if mode in ("numpy", "none"):
            predict.append(numpy_predict if mode == "numpy" else _no_model)
            yield
            return
        for size in (1, *ert.serving.pow2_buckets(32)):  # compile every batch shape first
            model(ert.zeros((size, FEATURES), dtype="float32")).wait()
        if mode == "compiled":
            predict.append(unbatched())
            yield
            return
        async with ert.serving.MicroBatcher(model, max_batch_size=32, max_wait=0.002) as batcher:
            predict.append(batched(batcher))
            yield

    app = FastAPI(lifespan=lifespan)

    @app.post("/predict")
    async def predict_endpoint(request: Request) -> Any:
        body = await request.body()
        if len(body) != FEATURES * 4:
            return JSONResponse({"error": f"expected {FEATURES} float32 values"}, status_code=400)
        try:
            p = await predict[0](np.frombuffer(body, dtype=np.float32))
        except ert.EagerError as error:
            return JSONResponse({"error": str(error)}, status_code=500)
        label = int(p.argmax())
        return {"label": label, "p": round(float(p[label]), 6)}

    return app


def serve(mode: str, port: int) -> None:
    """Run the app under uvicorn on 127.0.0.1 (blocks)."""
    import uvicorn

    uvicorn.run(make_app(mode), host="127.0.0.1", port=port, log_level="warning")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def server_process(mode: str, timeout: float = 60.0) -> Any:
    """A server for ``mode`` in a child process; yields its port once it listens."""
    port = free_port()
    child = subprocess.Popen(
        [sys.executable, str(HERE / "serve_fastapi.py"), "--mode", mode, "--port", str(port)]
    )
    try:
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
                break
            if child.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the {mode} server did not start (exit {child.poll()})")
            time.sleep(0.1)
        yield port
    finally:
        child.terminate()
        child.wait(timeout=30)


def load(port: int, requests: int, clients: int) -> str:
    """examples/serve_load.py against ``port``, in another process: its report line."""
    command = [sys.executable, str(HERE / "serve_load.py"), "--port", str(port)]
    command += ["--requests", str(requests), "--clients", str(clients)]
    done = subprocess.run(command, capture_output=True, text=True, check=True, timeout=600)
    return done.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=MODES, help="serve this way only (with --port)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=32)
    args = parser.parse_args()
    if args.mode:
        serve(args.mode, args.port)
        return
    print(f"a {FEATURES}-1024-1024-{CLASSES} MLP behind FastAPI, {args.clients} clients")
    for mode in MODES:
        with server_process(mode) as port:
            print(f"{mode:9} {load(port, args.requests, args.clients)}")


if __name__ == "__main__":
    main()
