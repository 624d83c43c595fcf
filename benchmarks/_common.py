"""Shared helpers for the benchmarks: interleaved timing, results, tables, CLI.

The reference machine is small and shared (2 cores, noisy neighbours), so no
benchmark reports an absolute time on its own. Every figure is a ratio to a
baseline measured in the same process, in the same run, with the candidates
interleaved round by round (the order rotates each round) so that drift in the
machine's speed hits all of them alike. Each candidate is summarised by its best
round (noise on a shared machine only ever adds time), and the ratios are also
given as the median of the per-round paired ratios, as a check on the best-of
figure.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import json
import math
import os
import pathlib
import platform
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

__all__ = [
    "Samples",
    "add_row",
    "add_target",
    "bench_main",
    "finish",
    "format_result",
    "interleave",
    "interleave_async",
    "machine_info",
    "markdown_table",
    "new_result",
    "now_ns",
    "print_result",
    "result_rows",
    "target_rows",
]

now_ns = time.perf_counter_ns


class Samples:
    """Per-round timings of several candidates, measured side by side."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = list(names)
        self.rounds: list[dict[str, float]] = []

    def add_round(self, values: Mapping[str, float]) -> None:
        self.rounds.append(dict(values))

    def of(self, name: str) -> list[float]:
        return [r[name] for r in self.rounds]

    def best(self, name: str) -> float:
        return min(self.of(name))

    def median(self, name: str) -> float:
        return statistics.median(self.of(name))

    def ratio(self, name: str, base: str) -> float:
        """best(name) / best(base)."""
        return self.best(name) / self.best(base)

    def paired_ratio(self, name: str, base: str) -> float:
        """The median over rounds of name/base measured in the same round."""
        return statistics.median(r[name] / r[base] for r in self.rounds)

    def to_json(self) -> dict[str, Any]:
        return {
            n: {"best": self.best(n), "median": self.median(n), "samples": self.of(n)}
            for n in self.names
        }


def _order(names: list[str], round_index: int) -> list[str]:
    k = round_index % len(names)
    return names[k:] + names[:k]


def interleave(candidates: Mapping[str, Callable[[], float]], rounds: int) -> Samples:
    """Run each ``candidate() -> measured figure`` once per round, order rotating."""
    names = list(candidates)
    samples = Samples(names)
    for i in range(rounds):
        samples.add_round({n: candidates[n]() for n in _order(names, i)})
    return samples


async def interleave_async(
    candidates: Mapping[str, Callable[[], float | Awaitable[float]]],
    rounds: int,
    warm_up: bool = False,
) -> Samples:
    """:func:`interleave` inside a running event loop; candidates may be async.

    ``warm_up`` runs each candidate once first and discards it (compilation,
    caches, thread start-up).
    """
    names = list(candidates)
    if warm_up:
        for n in names:
            v = candidates[n]()
            if inspect.isawaitable(v):
                await v
    samples = Samples(names)
    for i in range(rounds):
        values = {}
        for n in _order(names, i):
            v = candidates[n]()
            if inspect.isawaitable(v):
                v = await v
            values[n] = v
        samples.add_round(values)
    return samples


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "processor": _cpu_model(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
    }
    for mod in ("numpy", "numba", "torch", "uvloop", "eagerrt"):
        try:
            info[mod] = __import__(mod).__version__
        except Exception:  # not installed, or broken: say so rather than fail
            info[mod] = None
    return info


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _load_snapshot() -> tuple[float, float, float] | None:
    """(wall s, this process's CPU s, whole machine's busy CPU s), or None off Linux."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()[1:]
    except OSError:
        return None
    # user nice system idle iowait irq softirq steal ...: busy = all but idle, iowait
    ticks = [int(x) for x in fields[:8]]
    busy = sum(ticks) - ticks[3] - ticks[4]
    own = os.times()
    return time.monotonic(), own.user + own.system, busy / os.sysconf("SC_CLK_TCK")


def _load_since(start: tuple[float, float, float] | None) -> dict[str, float] | None:
    end = _load_snapshot()
    if start is None or end is None:
        return None
    wall = end[0] - start[0]
    own = end[1] - start[1]
    machine = end[2] - start[2]
    cpus = os.cpu_count() or 1
    return {
        "wall_s": round(wall, 2),
        "own_cpu_s": round(own, 2),
        "machine_busy_cpu_s": round(machine, 2),
        # The share of the machine's CPU time that other processes took meanwhile.
        "other_processes_cpu_share": round(max(0.0, machine - own) / (wall * cpus), 3)
        if wall > 0
        else 0.0,
    }


#: A benchmark run while other processes took more than this share of the
#: machine's CPU gets a note saying its figures are not trustworthy.
BUSY_SHARE = 0.10


def finish(result: dict[str, Any]) -> dict[str, Any]:
    """Close a result made by :func:`new_result`: record how busy the machine was."""
    load = _load_since(result.pop("_load_start", None))
    result["load"] = load
    if load is not None and load["other_processes_cpu_share"] > BUSY_SHARE:
        result["notes"].append(
            f"other processes used {load['other_processes_cpu_share']:.0%} of the machine's CPU "
            "during this benchmark: its figures are unreliable; rerun on a quiet machine"
        )
    return result


def new_result(name: str, title: str, quick: bool, params: Mapping[str, Any]) -> dict[str, Any]:
    """The common shape of every benchmark's ``run()`` result; end with :func:`finish`."""
    return {
        "_load_start": _load_snapshot(),
        "name": name,
        "title": title,
        "quick": quick,
        "params": dict(params),
        # One row per measured thing: what the tables print.
        "rows": [],
        # Every figure by key (numbers only), for the JSON and the tests.
        "figures": {},
        # Pass/fail of the targets, by key.
        "targets": {},
        "notes": [],
    }


def add_row(
    result: dict[str, Any],
    measure: str,
    value: float,
    unit: str,
    ratio: float | None = None,
    vs: str = "",
    paired: float | None = None,
) -> None:
    result["rows"].append(
        {
            "measure": measure,
            "value": value,
            "unit": unit,
            "ratio": ratio,
            "vs": vs,
            "paired_ratio": paired,
        }
    )


def add_target(
    result: dict[str, Any], key: str, description: str, value: float, limit: float, op: str
) -> bool:
    """Record ``value <op> limit`` as a target; returns whether it passed."""
    if op == "<=":
        passed = value <= limit
    elif op == ">=":
        passed = value >= limit
    else:
        raise ValueError(op)
    result["targets"][key] = {
        "description": description,
        "value": value,
        "limit": limit,
        "op": op,
        "passed": bool(passed),
    }
    return bool(passed)


def _fmt(value: float | None, unit: str = "") -> str:
    if value is None:
        return ""
    if not math.isfinite(value):
        return str(value)
    if unit in ("x", "ratio"):
        return f"{value:.2f}x"
    if abs(value) >= 100:
        text = f"{value:,.0f}"
    elif abs(value) >= 10:
        text = f"{value:.1f}"
    else:
        text = f"{value:.2f}"
    return f"{text} {unit}".strip()


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=False)]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    out = [line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out.extend(line(r) for r in rows)
    return "\n".join(out)


def result_rows(result: Mapping[str, Any]) -> list[list[str]]:
    rows = []
    for r in result["rows"]:
        ratio = f"{_fmt(r['ratio'], 'x')} {r['vs']}".strip() if r["ratio"] is not None else ""
        paired = _fmt(r["paired_ratio"], "x")
        rows.append([r["measure"], _fmt(r["value"], r["unit"]), ratio, paired])
    return rows


def target_rows(result: Mapping[str, Any]) -> list[list[str]]:
    return [
        [
            t["description"],
            f"{t['value']:.2f}",
            f"{t['op']} {t['limit']:g}",
            "PASS" if t["passed"] else "MISS",
        ]
        for t in result["targets"].values()
    ]


def format_result(result: Mapping[str, Any]) -> str:
    parts = [f"### {result['title']}" + (" (quick)" if result["quick"] else ""), ""]
    params = ", ".join(f"{k}={v}" for k, v in result["params"].items())
    parts += [f"params: {params}", ""]
    parts.append(
        markdown_table(
            ["measure", "value", "ratio", "median paired ratio"],
            result_rows(result),
        )
    )
    if result["targets"]:
        parts += ["", markdown_table(["target", "value", "goal", "result"], target_rows(result))]
    for note in result["notes"]:
        parts += ["", f"note: {note}"]
    return "\n".join(parts)


def print_result(result: Mapping[str, Any]) -> None:
    print(format_result(result))
    print()


def bench_main(run: Callable[..., dict[str, Any]], argv: Sequence[str] | None = None) -> None:
    """The command line of one benchmark script: ``[--quick] [--json PATH]``."""
    parser = argparse.ArgumentParser(description=(run.__doc__ or "").strip().splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    parser.add_argument("--json", metavar="PATH", help="also write the result as JSON here")
    args = parser.parse_args(argv)
    result = run(quick=args.quick)
    print_result(result)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine_info(), "result": result}, f, indent=2)
    sys.stdout.flush()


def example_model(name: str) -> Any:
    """The module ``examples/models/<name>.py``, imported from the package
    ``example_models`` (with benchmarks/ on the path, ``models`` is the benchmark
    of that name, so the examples' own package name would clash)."""
    package = "example_models"
    if package not in sys.modules:
        folder = pathlib.Path(__file__).resolve().parents[1] / "examples" / "models"
        spec = importlib.util.spec_from_file_location(
            package, folder / "__init__.py", submodule_search_locations=[str(folder)]
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[package] = module
        spec.loader.exec_module(module)
    return importlib.import_module(f"{package}.{name}")


def minilm_batch(batch: int, length: int) -> tuple[Any, Any]:
    """MiniLM's token ids and attention mask for a benchmark batch (seeded by its
    size): random ids after [CLS], and, as real batches are padded, every other row
    ending a quarter early."""
    import numpy as np

    rng = np.random.default_rng(batch)
    ids = rng.integers(1000, 29000, (batch, length), dtype=np.int64)
    mask = np.ones((batch, length), np.int64)
    for row in range(1, batch, 2):
        ids[row, length - length // 4 :] = 0
        mask[row, length - length // 4 :] = 0
    ids[:, 0] = 101  # [CLS]
    return ids, mask
