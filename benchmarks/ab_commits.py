"""Two versions of eagerrt side by side: each tree's benchmark script run with
that tree's ``src`` first on ``PYTHONPATH``, one tree then the other, alternating
(A B, B A, ...) on the same machine, every timed row compared round by round.

What a redesign must show before it lands ("within 3% of before"): the median of
the per-round ratios new / old of every eagerrt figure, with each side's best.
Each script writes its result as JSON (``--json``); every row whose unit is a time
is compared (lower is better): eagerrt's rows, and the anchors' (numpy, PyTorch,
ONNX Runtime), whose ratios show how much the machine itself moved between runs.

Run: ``python benchmarks/ab_commits.py OLD_TREE [--rounds 3] [--quick]
[--scripts bench_tiny_model.py models.py ...]``, e.g. with a worktree of the
commit before: ``git worktree add /tmp/before <commit>`` then
``python benchmarks/ab_commits.py /tmp/before``.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
NEW_TREE = HERE.parent
DEFAULT_SCRIPTS = ["bench_tiny_model.py", "bench_graph.py", "bench_conv_attention.py", "models.py"]
TIME_UNITS = ("ns", "us", "ms", "s")


def _is_time(unit: Any) -> bool:
    return isinstance(unit, str) and unit.split("/")[0] in TIME_UNITS and unit != "samples/s"


def _rows(path: pathlib.Path) -> dict[str, tuple[float, str, float | None]]:
    """Each timed row: (value, unit, its ratio to the script's own baseline in the
    same run, paired by rounds where the script pairs them)."""
    result = json.loads(path.read_text())["result"]
    rows = {}
    for row in result.get("rows", []):
        label, value, unit = row.get("measure"), row.get("value"), row.get("unit")
        if label and isinstance(value, (int, float)) and _is_time(unit):
            ratio = row.get("paired_ratio") or row.get("ratio")
            rows[label] = (float(value), unit, float(ratio) if ratio else None)
    return rows


def _run(script: str, tree: pathlib.Path, quick: bool, out: pathlib.Path) -> dict[str, Any]:
    bench = tree / "benchmarks"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree / "src"), str(bench)]))
    cmd = [sys.executable, str(bench / script), "--json", str(out), *(["--quick"] if quick else [])]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(
            f"{script} of {tree} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        )
    return _rows(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old_tree", type=pathlib.Path, help="the other tree (a worktree's root)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--scripts", nargs="*", default=DEFAULT_SCRIPTS)
    args = parser.parse_args()
    sides = {"old": args.old_tree.resolve(), "new": NEW_TREE}
    # label -> side -> values (and ratios to the run's baseline), one per round
    seen: dict[tuple[str, str], dict[str, list[float]]] = {}
    ratios: dict[tuple[str, str], dict[str, list[float]]] = {}
    units: dict[tuple[str, str], str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = ["old", "new"] if r % 2 == 0 else ["new", "old"]
            for script in args.scripts:
                for side in order:
                    out = pathlib.Path(tmp) / f"{script}.{side}.{r}.json"
                    for label, (value, unit, ratio) in _run(
                        script, sides[side], args.quick, out
                    ).items():
                        key = (script, label)
                        seen.setdefault(key, {"old": [], "new": []})[side].append(value)
                        if ratio is not None:
                            ratios.setdefault(key, {"old": [], "new": []})[side].append(ratio)
                        units[key] = unit
                print(f"round {r + 1}/{args.rounds}: {script} done", file=sys.stderr, flush=True)
    print(f"old: {sides['old']}\nnew: {sides['new']}\n{args.rounds} rounds, alternating\n")
    print(
        "| script | row | old (best) | new (best) | new / old, median of rounds | "
        "the same, of each one's ratio to its run's own baseline |"
    )
    print("|---|---|---|---|---|---|")
    for (script, label), values in seen.items():
        pairs = list(zip(values["old"], values["new"], strict=False))
        if not pairs:
            continue
        ratio = statistics.median(n / o for o, n in pairs if o > 0)
        unit = units[(script, label)]
        by_run = ratios.get((script, label), {"old": [], "new": []})
        relative = [n / o for o, n in zip(by_run["old"], by_run["new"], strict=False) if o > 0]
        against = f"{statistics.median(relative):.3f}" if relative else ""
        print(
            f"| {script} | {label} | {min(values['old']):.4g} {unit} | "
            f"{min(values['new']):.4g} {unit} | {ratio:.3f} | {against} |"
        )


if __name__ == "__main__":
    main()
