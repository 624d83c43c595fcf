"""Random DAG fuzzing (issue 7): random programs over the op set, in every mode
(eager, sync, deterministic, compiled) on every loop (none, asyncio, uvloop,
trio), with injected failing and slow kernels, equal numpy's sequential
evaluation; errors reach exactly the dependents of a failing node and name its
op; every case runs under a timeout and leaves nothing behind.

The programs live in ``dag_fuzz.py`` (also used by the figures script). Quick
variants run here; ``EAGERRT_RELIABILITY_LONG=1`` runs many more and bigger.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from . import dag_fuzz
from .conftest import LONG, scale
from .dag_fuzz import LOOPS, MODES, Dag, Stmt, generate, run_case, run_fuzz, warm_up
from .leaks import no_leaks


class HypothesisChooser:
    """The generator's decisions, drawn by hypothesis (so failures shrink)."""

    def __init__(self, data: st.DataObject) -> None:
        self.data = data

    def integer(self, lo: int, hi: int) -> int:
        return self.data.draw(st.integers(lo, hi))

    def choice(self, options: Any) -> Any:
        return self.data.draw(st.sampled_from(list(options)))

    def chance(self, percent: int) -> bool:
        return self.data.draw(st.integers(0, 99)) < percent


@pytest.fixture(scope="module", autouse=True)
def _warm() -> None:
    warm_up()


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("mode", MODES)
@settings(
    max_examples=scale(6, 150),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_random_programs_match_numpy(mode: str, loop: str, data: st.DataObject) -> None:
    dag = generate(HypothesisChooser(data), max_stmts=scale(8, 24), fault_percent=20)
    seed = data.draw(st.integers(0, 2**16), label="deterministic seed")
    with no_leaks():
        outcome = run_case(dag, mode, loop, seed, timeout=10)
    assert not outcome.mismatches, f"{mode} on {loop}: {outcome.mismatches}\nprogram:\n{dag}"


def test_seeded_fuzzing_reports_its_figures() -> None:
    summary = run_fuzz(cases=scale(16, 400), seed=7, max_stmts=scale(10, 30))
    assert summary["mismatches"] == [] and summary["failures"] == 0
    assert summary["cases"] == scale(16, 400)
    assert summary["faults_injected"] > 0
    assert 0 < summary["worst_latency_s"] < 30


def test_an_injected_failure_reaches_exactly_its_dependents() -> None:
    """The property the fuzzer checks on random programs, on one written out."""
    dag = Dag()
    dag.shapes = [(3,), (3,), (3,), (3,), ()]
    dag.inputs = [np.arange(3.0)]
    dag.stmts = [
        Stmt("leaf", 0, (), (0,)),
        Stmt("fail", 1, (0,), (1, 1e12)),  # on a worker
        Stmt("unary", 2, (0,), ("tanh",)),  # independent: a value
        Stmt("binary", 3, (1, 2), ("add",)),  # depends on the failure
        Stmt("reduce", 4, (2,), ("sum", None, False)),  # a value
    ]
    dag.outputs = [2, 4]
    for mode in MODES:
        outcome = run_case(dag, mode, "none")
        assert not outcome.mismatches, (mode, outcome.mismatches)
        assert outcome.errors == (0 if mode == "compiled" else 2)  # v1, v3
    dag.outputs = [3, 4]  # a compiled call with a failing node: only v3 depends on it
    for loop in LOOPS:
        outcome = run_case(dag, "compiled", loop)
        assert not outcome.mismatches and outcome.errors == 1, (loop, outcome.mismatches)


def test_a_wrong_result_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checks can fail: where numpy's reference disagrees, the case says so."""
    dag = Dag()
    dag.shapes = [(2,), (2,)]
    dag.inputs = [np.ones(2)]
    dag.stmts = [Stmt("leaf", 0, (), (0,)), Stmt("unary", 1, (0,), ("tanh",))]
    dag.outputs = [1]
    assert run_case(dag, "eager", "asyncio").mismatches == []
    monkeypatch.setitem(dag_fuzz._NP_UNARY, "tanh", np.sin)
    mismatches = run_case(dag, "eager", "none").mismatches
    assert len(mismatches) == 1 and mismatches[0].startswith("v1: ")


if LONG:  # many more seeds of the seeded fuzzer, each a different program mix

    @pytest.mark.parametrize("seed", range(20))
    def test_long_seeded_fuzzing(seed: int) -> None:
        summary = run_fuzz(cases=200, seed=1000 + seed, max_stmts=30)
        assert summary["mismatches"] == [], summary["mismatches"]
