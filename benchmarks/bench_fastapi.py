"""A model behind FastAPI under uvicorn: eagerrt with micro-batching vs plain numpy.

``examples/serve_fastapi.py``'s servers (the 256-1024-1024-10 MLP in plain numpy
per request, compiled on a batch of one per request, compiled behind a
``MicroBatcher``, and no model at all: the HTTP stack's ceiling) run at once,
each in its own process on 127.0.0.1 with default thread settings; the load
generator (``examples/serve_load.py``: 32 keep-alive clients sending back to
back) runs in another process, against each server in turn, in interleaved
rounds. Throughput is the best round's; p50/p99 latency that round's. The
servers and the load generator share the machine's cores: on a small machine
the ceiling bounds every ratio (it is reported as a ratio to numpy too).

Target: batched >= 2x numpy's requests/s at 32 clients.

Run: ``python benchmarks/bench_fastapi.py [--quick]`` (needs fastapi and uvicorn).
"""

from __future__ import annotations

import contextlib
import json
import pathlib
import subprocess
import sys
from typing import Any

from _common import add_row, add_target, bench_main, finish, new_result

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"
MODES = ("numpy", "compiled", "batched", "none")


def _example() -> Any:
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    import serve_fastapi

    return serve_fastapi


def _load(port: int, requests: int, clients: int) -> dict[str, Any]:
    command = [sys.executable, str(EXAMPLES / "serve_load.py"), "--port", str(port), "--json"]
    command += ["--requests", str(requests), "--clients", str(clients)]
    done = subprocess.run(command, capture_output=True, text=True, check=True, timeout=600)
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def _http_implementation() -> str:
    """What uvicorn parses HTTP with here (httptools where installed, else h11)."""
    try:
        import httptools  # noqa: F401
    except ImportError:
        return "h11"
    return "httptools"


def run(
    quick: bool = False, *, requests: int = 0, clients: int = 32, rounds: int = 0
) -> dict[str, Any]:
    """FastAPI + uvicorn: requests/s and latency of numpy, compiled, batched."""
    requests = requests or (600 if quick else 3000)
    rounds = rounds or (2 if quick else 4)
    result = new_result(
        "fastapi",
        "a model behind FastAPI vs plain numpy",
        quick,
        {"requests": requests, "clients": clients},
    )
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise SystemExit(f"bench_fastapi: skipped: {exc}") from None
    example = _example()
    best: dict[str, dict[str, Any]] = {}
    with contextlib.ExitStack() as stack:
        ports = {mode: stack.enter_context(example.server_process(mode)) for mode in MODES}
        for _ in range(max(1, requests // 500)):  # warm every server up: first requests, JITs
            for mode in MODES:
                _load(ports[mode], 100, clients)
        for r in range(rounds):
            for mode in MODES[r % len(MODES) :] + MODES[: r % len(MODES)]:  # rotating order
                got = _load(ports[mode], requests, clients)
                if got["errors"]:
                    raise RuntimeError(f"{mode}: {got['errors']} requests failed")
                if mode not in best or got["requests_per_s"] > best[mode]["requests_per_s"]:
                    best[mode] = got
    fig = result["figures"]
    base = best["numpy"]["requests_per_s"]
    for mode in MODES:
        got = best[mode]
        fig[f"{mode}_requests_per_s"] = got["requests_per_s"]
        fig[f"{mode}_p50_ms"] = got["p50_s"] * 1e3
        fig[f"{mode}_p99_ms"] = got["p99_s"] * 1e3
        ratio = got["requests_per_s"] / base
        add_row(result, f"{mode}: requests/s", got["requests_per_s"], "req/s", ratio, "vs numpy")
        add_row(result, f"{mode}: p50 latency", got["p50_s"] * 1e3, "ms")
        add_row(result, f"{mode}: p99 latency", got["p99_s"] * 1e3, "ms")
    result["params"]["http"] = _http_implementation()
    result["notes"].append(
        "the load generator and the servers run on this machine: its 'other processes' "
        "CPU share is theirs"
    )
    same = best["batched"]["labels"] == best["numpy"]["labels"]
    fig["same_answers"] = float(same)
    result["notes"].append(f"batched and numpy gave the same labels: {same}")
    fig["batched_vs_numpy"] = best["batched"]["requests_per_s"] / base
    add_target(
        result,
        "batched_vs_numpy",
        "batched vs numpy requests/s",
        fig["batched_vs_numpy"],
        2.0,
        ">=",
    )
    return finish(result)


def main() -> None:
    bench_main(run)


if __name__ == "__main__":
    main()
