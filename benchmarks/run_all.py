"""Run every benchmark, print one combined markdown report, save the figures.

Usage::

    python benchmarks/run_all.py            # full run (about a minute)
    python benchmarks/run_all.py --quick    # smoke run: fewer repeats
    python benchmarks/run_all.py --only tiny_model,await_overhead

Writes ``benchmarks/results/latest.json`` (git-ignored) with the machine, each
benchmark's figures, rows, targets and raw per-round samples. Every figure is a
ratio to a baseline measured side by side in the same run (see ``_common.py``).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import sys
import time
import types
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:  # so that `python -m` and imports from elsewhere work too
    sys.path.insert(0, HERE)

from _common import (  # noqa: E402
    format_result,
    machine_info,
    markdown_table,
    result_rows,
    target_rows,
)

#: Benchmark name -> module (each has ``run(quick) -> dict`` and ``main()``).
BENCHMARKS = {
    "tiny_model": "bench_tiny_model",
    "parallel_branches": "bench_parallel_branches",
    "io_overlap": "bench_io_overlap",
    "await_overhead": "bench_await_overhead",
    "conv_attention": "bench_conv_attention",
    "graph": "bench_graph",
    "profiler": "bench_profiler",
    "reliability": "bench_reliability",
    "in_place": "bench_in_place",
    "models": "models",
    "bf16": "bench_bf16",
    "distributed": "bench_distributed",
}


def load_benchmark(module: str) -> types.ModuleType:
    """A benchmark module, loaded from its file in benchmarks/.

    By file rather than by import name: ``models.py`` shares its name with the
    ``examples/models`` package, which tests put on the path first.
    """
    path = os.path.join(HERE, f"{module}.py")
    loaded = sys.modules.get(module)
    if loaded is not None and os.path.abspath(getattr(loaded, "__file__", None) or "") == path:
        return loaded
    key = module if loaded is None else f"_benchmark_{module}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, path)
        assert spec is not None and spec.loader is not None
        new = importlib.util.module_from_spec(spec)
        sys.modules[key] = new
        spec.loader.exec_module(new)
    return sys.modules[key]


def run_all(quick: bool = False, only: list[str] | None = None) -> dict[str, Any]:
    names = only or list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        raise SystemExit(f"unknown benchmark(s) {unknown}; known: {list(BENCHMARKS)}")
    report: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "quick": quick,
        "machine": machine_info(),
        "results": {},
        "seconds": {},
    }
    for name in names:
        module = load_benchmark(BENCHMARKS[name])
        print(f"running {name} ...", file=sys.stderr, flush=True)
        start = time.perf_counter()
        report["results"][name] = module.run(quick=quick)
        report["seconds"][name] = round(time.perf_counter() - start, 1)
    return report


def format_report(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [
        "## eagerrt benchmarks" + (" (quick)" if report["quick"] else ""),
        "",
        f"machine: {m['cpu_count']} CPUs ({m['processor']}), {m['platform']}",
        f"python {m['python']}, numpy {m['numpy']}, numba {m['numba']}, "
        f"torch {m['torch']}, uvloop {m['uvloop']}, eagerrt {m['eagerrt']}",
        f"date: {report['date']}",
        "",
        "Candidates run interleaved, round by round, in one process. Times are best-of-rounds",
        "and ratios best/best (worker round trips: medians), with the median of per-round",
        "paired ratios as a check.",
        "",
    ]
    results = report["results"].values()
    shares = [
        f"{r['name']} {r['load']['other_processes_cpu_share']:.0%}"
        for r in results
        if r.get("load")
    ]
    if shares:
        lines += [
            "CPU share taken by other processes meanwhile (should be ~0%): " + ", ".join(shares),
            "",
        ]
    summary = [[r["name"], *row] for r in results for row in target_rows(r)]
    if summary:
        lines += [
            "### Targets",
            "",
            markdown_table(["benchmark", "target", "value", "goal", "result"], summary),
            "",
        ]
    rows = [[r["name"], *row] for r in results for row in result_rows(r)]
    lines += [
        "### All figures",
        "",
        markdown_table(["benchmark", "measure", "value", "ratio", "median paired ratio"], rows),
        "",
    ]
    for r in results:
        lines += [format_result(r), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Run all eagerrt benchmarks.")
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    parser.add_argument("--only", help="comma-separated benchmark names: " + ",".join(BENCHMARKS))
    parser.add_argument(
        "--json",
        metavar="PATH",
        default=os.path.join(HERE, "results", "latest.json"),
        help="where to write the figures (default: benchmarks/results/latest.json)",
    )
    args = parser.parse_args(argv)
    only = [n.strip() for n in args.only.split(",")] if args.only else None
    report = run_all(quick=args.quick, only=only)
    print(format_report(report))
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(report, f, indent=2)
    print(f"figures written to {os.path.relpath(args.json)}", file=sys.stderr)


if __name__ == "__main__":
    main()
