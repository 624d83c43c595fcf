"""Array API conformance: run data-apis/array-api-tests against numpy and eagerrt.

The suite itself is third-party code and is not vendored here: point this
script at a checkout of it (with its ``array-api`` submodule), e.g.::

    git clone --recurse-submodules https://github.com/data-apis/array-api-tests \
        /work/conformance/array-api-tests
    python benchmarks/conformance.py [SUITE_DIR]

``SUITE_DIR`` defaults to ``$ARRAY_API_TESTS_DIR`` or
``/work/conformance/array-api-tests``. The suite needs ``hypothesis``,
``pytest``, ``ndindex`` and ``pytest-json-report`` in the interpreter that runs
this script; ``pytest-timeout`` enables the per-test timeout and
``pytest-xdist`` (when installed) spreads the tests over ``--jobs`` workers.

Each library gets one pytest run with identical options (fixed Hypothesis
``--max-examples``, ``--derandomize`` so that the examples are a function of the
test alone, a fresh Hypothesis database, the same API version and extension
switches). Outcomes come from ``--junitxml``. The report, written to
``benchmarks/results/conformance.md`` (and the raw outcomes to
``conformance.json``), has each library's pass rate, a per-test-file table side
by side, and the failures of the last library grouped by their first error
line.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

DEFAULT_SUITE = "/work/conformance/array-api-tests"
RESULTS_DIR = Path(__file__).resolve().parent / "results"
OUTCOMES = ("passed", "failed", "error", "skipped")


@dataclass
class TestResult:
    nodeid: str
    file: str
    outcome: str  # one of OUTCOMES
    message: str = ""  # first error line (failures, errors) or skip reason


@dataclass
class LibraryRun:
    library: str
    returncode: int
    seconds: float
    command: list[str]
    results: list[TestResult] = field(default_factory=list)
    stderr_tail: str = ""

    def counts(self, file: str | None = None) -> Counter:
        return Counter(r.outcome for r in self.results if file is None or r.file == file)


def pass_rate(counts: Counter) -> float | None:
    ran = counts["passed"] + counts["failed"] + counts["error"]
    return counts["passed"] / ran if ran else None


def fmt_rate(rate: float | None) -> str:
    return "n/a" if rate is None else f"{100 * rate:.1f}%"


# ---------------------------------------------------------------- running


def suite_missing_message(suite: Path) -> str:
    return (
        f"array-api-tests not found at {suite}\n"
        "It is third-party code and is not vendored in this repository. Obtain it with\n"
        "    git clone --recurse-submodules https://github.com/data-apis/array-api-tests "
        f"{suite}\n"
        "(the array-api submodule holds the spec stubs the suite reads), then pass its "
        "path as the first argument or set ARRAY_API_TESTS_DIR.\n"
        "It also needs: pip install hypothesis pytest ndindex pytest-json-report "
        "pytest-timeout"
    )


def check_suite(suite: Path) -> str | None:
    if not (suite / "array_api_tests").is_dir() or not (suite / "conftest.py").is_file():
        return suite_missing_message(suite)
    if not (suite / "array-api" / "src" / "array_api_stubs").is_dir():
        return (
            f"{suite} has no array-api/src/array_api_stubs: the array-api submodule is "
            "missing (git submodule update --init inside the suite)."
        )
    missing = [
        mod
        for mod in ("hypothesis", "pytest", "ndindex", "pytest_jsonreport")
        if importlib.util.find_spec(mod) is None
    ]
    if missing:
        return f"missing Python packages for the suite: {', '.join(missing)}"
    return None


def pytest_command(args: argparse.Namespace, junit: Path) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "array_api_tests",
        "-p",
        "no:cacheprovider",
        "-q",
        "-rN",
        "--tb=line",
        f"--max-examples={args.max_examples}",
        "--derandomize",
        "--disable-deadline",
        f"--junitxml={junit}",
        "-o",
        "junit_family=xunit1",
        "-W",
        "ignore",
    ]
    if importlib.util.find_spec("pytest_timeout") is not None and args.timeout > 0:
        cmd += [f"--timeout={args.timeout}", "--timeout-method=thread"]
    if args.jobs > 1 and importlib.util.find_spec("xdist") is not None:
        cmd += ["-n", str(args.jobs)]
    if args.disable_extension:
        cmd += ["--disable-extension", *args.disable_extension]
    if args.skips_file:
        cmd += ["--skips-file", str(Path(args.skips_file).resolve())]
    cmd += args.pytest_args
    return cmd


def run_library(library: str, args: argparse.Namespace, suite: Path) -> LibraryRun:
    with tempfile.TemporaryDirectory(prefix="conformance-") as tmp:
        junit = Path(tmp) / "junit.xml"
        cmd = pytest_command(args, junit)
        env = dict(os.environ)
        env.update(
            ARRAY_API_TESTS_MODULE=library,
            ARRAY_API_TESTS_VERSION=args.api_version,
            # a fresh example database: earlier failures must not be replayed
            HYPOTHESIS_STORAGE_DIRECTORY=str(Path(tmp) / "hypothesis"),
            PYTHONHASHSEED="0",
        )
        print(f"[conformance] {library}: {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
        start = time.perf_counter()
        try:
            proc = subprocess.run(
                cmd,
                cwd=suite,
                env=env,
                capture_output=True,
                text=True,
                timeout=args.run_timeout,
            )
            returncode, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
        except subprocess.TimeoutExpired as exc:
            returncode = -1
            stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
            stderr = f"run killed after {args.run_timeout}s"
        seconds = time.perf_counter() - start
        run = LibraryRun(library, returncode, seconds, cmd)
        if junit.exists():
            run.results = parse_junit(junit)
        tail = (stdout + "\n" + stderr).strip().splitlines()[-15:]
        run.stderr_tail = "\n".join(tail)
        c = run.counts()
        print(
            f"[conformance] {library}: {c['passed']} passed, {c['failed']} failed, "
            f"{c['error']} errors, {c['skipped']} skipped in {seconds:.0f}s "
            f"(pass rate {fmt_rate(pass_rate(c))})",
            file=sys.stderr,
            flush=True,
        )
        return run


# ---------------------------------------------------------------- parsing

_E_LINE = re.compile(r"^E\s+(\w[\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Failed)\b.*)$")


def first_error_line(elem: ET.Element) -> str:
    """The first informative line of a failure/error element."""
    message = (elem.get("message") or "").strip()
    text = elem.text or ""
    first = message.splitlines()[0].strip() if message else ""
    generic = not first or first.startswith(("ExceptionGroup", "BaseExceptionGroup"))
    generic = generic or "Hypothesis found" in first
    if generic or first in ("AssertionError", "assert False"):
        for line in text.splitlines():
            m = _E_LINE.match(line.strip())
            if m and not m.group(1).startswith(("ExceptionGroup", "BaseExceptionGroup")):
                return m.group(1).strip()
    if first:
        return first
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return "(no message)"


def parse_junit(path: Path) -> list[TestResult]:
    results = []
    for case in ET.parse(path).getroot().iter("testcase"):
        file = case.get("file") or ""
        classname = case.get("classname") or ""
        name = case.get("name") or ""
        if not file:
            file = classname.replace(".", "/") + ".py" if classname else "?"
        nodeid = f"{file}::{name}"
        outcome, message = "passed", ""
        for child in case:
            tag = child.tag
            if tag in ("failure", "error"):
                outcome = "failed" if tag == "failure" else "error"
                message = first_error_line(child)
                break
            if tag == "skipped":
                outcome = "skipped"
                message = (child.get("message") or "").strip().splitlines()[0:1]
                message = message[0] if message else ""
                if child.get("type") == "pytest.xfail":
                    message = "xfail: " + message
        results.append(TestResult(nodeid, file, outcome, message))
    return results


# ---------------------------------------------------------------- grouping

_NORMALISERS = [
    # "eagerrt is missing the elementwise function hypot()" -> one group per kind
    (
        re.compile(
            r"(is missing the (?:[\w ]+? )?(?:function|method|attribute|extension function)) \S+"
        ),
        r"\1 <name>",
    ),
    (
        re.compile(
            r"^(AssertionError: )?\S+ not found in (array module|array object|\w+ extension)\b.*"
        ),
        r"<name> not found in \2",
    ),
    (re.compile(r"0x[0-9a-fA-F]+"), "0x…"),
    (re.compile(r"(?<![\w.])-?\d+(\.\d+)?(e[-+]?\d+)?"), "N"),
]


def group_key(message: str) -> str:
    key = message
    for pattern, repl in _NORMALISERS:
        key = pattern.sub(repl, key)
    return key[:200]


def test_name(nodeid: str) -> str:
    return nodeid.split("::", 1)[-1]


def failure_groups(run: LibraryRun) -> list[tuple[str, list[TestResult]]]:
    groups: dict[str, list[TestResult]] = defaultdict(list)
    for r in run.results:
        if r.outcome in ("failed", "error"):
            groups[group_key(r.message)].append(r)
    return sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))


# ---------------------------------------------------------------- report


def md_escape(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def render(runs: list[LibraryRun], args: argparse.Namespace, suite: Path) -> str:
    libs = [r.library for r in runs]
    out = ["# Array API conformance (data-apis/array-api-tests)", ""]
    out.append(
        f"Suite: `{suite}`{suite_revision(suite)}; API version {args.api_version}; "
        f"`--max-examples={args.max_examples} --derandomize --disable-deadline`; "
        f"per-test timeout {args.timeout}s; extensions disabled: "
        f"{', '.join(args.disable_extension) or 'none (tested when the library has them)'}; "
        f"skips file: {args.skips_file or 'none'}; "
        f"python {platform.python_version()}, {os.cpu_count()} cpus."
    )
    out.append("")
    out.append(
        "Pass rate = passed / (passed + failed + errors); skips are counted apart "
        "(extensions a library lacks, tests gated on a newer API version, tests the "
        "suite itself marks skip)."
    )
    out.append("")
    out.append("| library | pass rate | passed | failed | errors | skipped | wall | pytest rc |")
    out.append("|---|---|---|---|---|---|---|---|")
    for run in runs:
        c = run.counts()
        out.append(
            f"| {run.library} | **{fmt_rate(pass_rate(c))}** | {c['passed']} | {c['failed']} "
            f"| {c['error']} | {c['skipped']} | {run.seconds:.0f}s | {run.returncode} |"
        )
    out.append("")
    for run in runs:
        if not run.results:
            out += [
                f"**{run.library}: no results.** Last output:",
                "",
                "```",
                run.stderr_tail,
                "```",
                "",
            ]

    files = sorted({r.file for run in runs for r in run.results})
    out.append("## Per test file")
    out.append("")
    header = (
        "| file | " + " | ".join(f"{lib} pass/fail/err/skip | {lib} rate" for lib in libs) + " |"
    )
    out.append(header)
    out.append("|---|" + "---|---|" * len(libs))
    for file in files:
        cells = []
        for run in runs:
            c = run.counts(file)
            cells.append(f"{c['passed']}/{c['failed']}/{c['error']}/{c['skipped']}")
            cells.append(fmt_rate(pass_rate(c)))
        out.append(f"| {Path(file).name} | " + " | ".join(cells) + " |")
    out.append("")

    if len(runs) >= 2:
        base, target = runs[0], runs[-1]
        base_outcome = {r.nodeid: r.outcome for r in base.results}
        regress = [
            r
            for r in target.results
            if r.outcome in ("failed", "error") and base_outcome.get(r.nodeid) == "passed"
        ]
        out.append(
            f"{len(regress)} tests fail on {target.library} but pass on {base.library}; "
            f"{sum(1 for r in target.results if r.outcome in ('failed', 'error')) - len(regress)} "
            f"fail on both (or did not run on {base.library})."
        )
        out.append("")

    for run in runs[1:] if len(runs) > 1 else runs:
        groups = failure_groups(run)
        out.append(f"## {run.library} failures by first error line ({len(groups)} groups)")
        out.append("")
        out.append("| # | count | first error line (normalised) | tests |")
        out.append("|---|---|---|---|")
        for i, (key, members) in enumerate(groups, 1):
            names = ", ".join(f"`{test_name(m.nodeid)}`" for m in members[:6])
            if len(members) > 6:
                names += f", … (+{len(members) - 6})"
            out.append(f"| {i} | {len(members)} | {md_escape(key)} | {md_escape(names)} |")
        out.append("")
    base = runs[0]
    if len(runs) > 1:
        failing = [r for r in base.results if r.outcome in ("failed", "error")]
        out.append(f"## {base.library} failures (anchor)")
        out.append("")
        for r in failing:
            out.append(f"- `{test_name(r.nodeid)}`: {md_escape(r.message)[:200]}")
        out.append("")
    return "\n".join(out)


def suite_revision(suite: Path) -> str:
    rev = suite / "REVISION"
    if rev.is_file():
        return f" ({rev.read_text().strip().splitlines()[0]})"
    try:
        sha = subprocess.run(
            ["git", "-C", str(suite), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return f" (commit {sha})" if sha else ""
    except (OSError, subprocess.CalledProcessError):
        return ""


# ---------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "suite",
        nargs="?",
        default=os.environ.get("ARRAY_API_TESTS_DIR", DEFAULT_SUITE),
        help="array-api-tests checkout (default: $ARRAY_API_TESTS_DIR or %(default)s)",
    )
    p.add_argument(
        "--libs", default="numpy,eagerrt", help="comma-separated modules (first = anchor)"
    )
    p.add_argument("--api-version", default="2024.12")
    p.add_argument("--max-examples", type=int, default=20)
    p.add_argument("--timeout", type=int, default=120, help="per-test timeout, seconds")
    p.add_argument(
        "--run-timeout", type=int, default=1800, help="kill a library's whole run after this"
    )
    p.add_argument("--jobs", type=int, default=2, help="pytest-xdist workers, if installed")
    p.add_argument("--disable-extension", nargs="*", default=[], metavar="EXT")
    p.add_argument("--skips-file", default=None)
    p.add_argument("--out", default=str(RESULTS_DIR / "conformance.md"))
    p.add_argument(
        "pytest_args", nargs=argparse.REMAINDER, help="after --: passed through to pytest"
    )
    args = p.parse_args(argv)
    if args.pytest_args and args.pytest_args[0] == "--":
        args.pytest_args = args.pytest_args[1:]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    suite = Path(args.suite).resolve()
    problem = check_suite(suite)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    runs = [run_library(lib.strip(), args, suite) for lib in args.libs.split(",") if lib.strip()]
    report = render(runs, args, suite)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report + "\n")
    raw = {
        "suite": str(suite),
        "options": {k: v for k, v in vars(args).items() if k != "suite"},
        "runs": [
            {
                **{k: v for k, v in asdict(r).items() if k != "results"},
                "results": [asdict(t) for t in r.results],
            }
            for r in runs
        ],
    }
    out.with_suffix(".json").write_text(json.dumps(raw, indent=1) + "\n")
    print(f"[conformance] report: {out}", file=sys.stderr)
    for run in runs:
        c = run.counts()
        print(
            f"{run.library}: {fmt_rate(pass_rate(c))} "
            f"({c['passed']} passed, {c['failed']} failed, {c['error']} errors, "
            f"{c['skipped']} skipped)"
        )
    return 0 if all(r.results for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
