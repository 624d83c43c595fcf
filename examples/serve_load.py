"""A load generator for ``examples/serve.py``'s ``POST /predict`` endpoint.

``clients`` keep-alive connections each send requests back to back (the next as
soon as the last answer arrived) until ``requests`` have been sent in all; it
reports throughput and the p50/p99 latency of single requests. Request *i*
always carries the same example, so two runs' answers can be compared.

``python examples/serve_load.py --port 8000`` loads a server that is already
running; ``examples/serve.py`` starts its own and calls :func:`run_load`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import dataclass, field

import numpy as np


@dataclass
class LoadResult:
    requests: int
    seconds: float
    latencies: list[float]
    errors: int = 0
    #: The label answered for each request id.
    labels: dict[int, int] = field(default_factory=dict)

    @property
    def throughput(self) -> float:
        return self.requests / self.seconds

    @property
    def p50(self) -> float:
        return float(np.percentile(self.latencies, 50))

    @property
    def p99(self) -> float:
        return float(np.percentile(self.latencies, 99))


def examples(requests: int, features: int) -> np.ndarray:
    return np.random.default_rng(1).standard_normal((requests, features), dtype=np.float32)


async def run_load(
    host: str, port: int, *, requests: int, clients: int, features: int = 256
) -> LoadResult:
    inputs = examples(requests, features)
    ids = iter(range(requests))  # shared: each client takes the next request id
    result = LoadResult(requests, 0.0, [])

    async def client() -> None:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            for i in ids:
                body = inputs[i].tobytes()
                start = time.perf_counter()
                writer.write(
                    b"POST /predict HTTP/1.1\r\nHost: %s\r\n"
                    b"Content-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n"
                    % (host.encode(), len(body))
                    + body
                )
                head = await reader.readuntil(b"\r\n\r\n")
                status_line, *header_lines = head.decode("latin-1").split("\r\n")
                length = next(
                    int(line.split(":", 1)[1])
                    for line in header_lines
                    if line.lower().startswith("content-length:")
                )
                payload = await reader.readexactly(length)
                result.latencies.append(time.perf_counter() - start)
                if status_line.split()[1] == "200":
                    result.labels[i] = json.loads(payload)["label"]
                else:
                    result.errors += 1
        finally:
            writer.close()
            await writer.wait_closed()

    start = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    result.seconds = time.perf_counter() - start
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    result = asyncio.run(
        run_load(args.host, args.port, requests=args.requests, clients=args.clients)
    )
    if args.json:
        figures = {"requests_per_s": result.throughput, "p50_s": result.p50, "p99_s": result.p99}
        print(json.dumps({**figures, "errors": result.errors, "labels": result.labels}))
        return
    print(
        f"{result.throughput:.0f} requests/s, p50 {result.p50 * 1e3:.2f} ms, "
        f"p99 {result.p99 * 1e3:.2f} ms, {result.errors} errors"
    )


if __name__ == "__main__":
    main()
