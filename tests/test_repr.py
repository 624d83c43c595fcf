"""How a tensor shows itself, in a terminal (repr) and in Jupyter (_repr_html_).

Display never blocks (a pending tensor is shown as pending), never marks a
failure observed, and escapes everything it puts into HTML.
"""

from __future__ import annotations

import html
import re
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import eagerrt as ert


def _op(name: str, rule: Any) -> ert.Op:
    return ert.registered_ops().get(name) or ert.define_op(name, rule=rule)


# A kernel that holds its result back until the test opens the gate.
_GATE = _op("test_repr_gate", lambda x, event: (x.shape, x.dtype))


@_GATE.kernel()
def _gate(x: Any, event: threading.Event) -> Any:
    assert event.wait(30), "gate never opened"
    return x


# A kernel whose error message would be markup if it were not escaped.
_MARKUP_FAILURE = _op("test_repr_markup_failure", lambda x: (x.shape, x.dtype))


@_MARKUP_FAILURE.kernel()
def _fail(x: Any) -> Any:
    raise ValueError("<script>alert('x')</script> & more")


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()  # never leave a worker blocked


def _pending(event: threading.Event, value: Any) -> ert.Tensor:
    with ert.config.override(inline_threshold_ns=0):  # on a worker, not inline
        return _GATE(ert.asarray(value), event=event)


def _text(markup: str) -> str:
    """What the browser shows: tags dropped, entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", "", markup))


# -- ready ---------------------------------------------------------------------------------
def test_ready_repr_shows_values_shape_and_dtype() -> None:
    t = ert.asarray([[1.5, 2.0], [3.0, 4.0]], dtype="float32")
    assert t.state == "ready"
    assert repr(t) == ("Tensor([[1.5, 2. ],\n        [3. , 4. ]], shape=(2, 2), dtype=float32)")


def test_ready_html_shows_state_metadata_and_values() -> None:
    t = ert.arange(6, dtype="int32").reshape((2, 3)) * 7
    shown = _text(t._repr_html_())
    assert "Tensor" in shown and "ready" in shown
    assert "(2, 3)" in shown and "int32" in shown and "cpu" in shown
    assert "[[ 0,  7, 14],\n [21, 28, 35]]" in shown


def test_big_arrays_are_summarized_like_numpy() -> None:
    t = ert.arange(100_000, dtype="int64")
    text = repr(t)
    assert "..." in text and len(text) < 200
    assert text.startswith("Tensor([    0,     1,     2, ...")
    assert text.endswith("99999], shape=(100000,), dtype=int64)")
    shown = _text(t._repr_html_())
    assert "..." in shown and len(shown) < 300 and "99999" in shown


# -- pending -------------------------------------------------------------------------------
def test_pending_repr_does_not_block_and_shows_values_once_ready(gate: threading.Event) -> None:
    t = _pending(gate, np.arange(4.0))
    # The kernel waits on the gate: a repr that waited for the data would hang
    # here (and fail on pytest's timeout).
    assert repr(t) == "Tensor(<pending>, shape=(4,), dtype=float64)"
    assert t.state == "pending" and not t.is_ready()
    shown = _text(t._repr_html_())
    assert "pending" in shown and "(4,)" in shown and "float64" in shown
    assert "[" not in shown  # no values yet
    gate.set()
    t.numpy(timeout=30)
    assert repr(t) == "Tensor([0., 1., 2., 3.], shape=(4,), dtype=float64)"
    assert "ready" in _text(t._repr_html_())


def test_a_tensor_waiting_on_a_pending_one_shows_pending(gate: threading.Event) -> None:
    t = _pending(gate, np.ones(3)) + 1
    assert repr(t) == "Tensor(<pending>, shape=(3,), dtype=float64)"
    gate.set()
    assert t.numpy(timeout=30).tolist() == [2.0, 2.0, 2.0]


# -- error ---------------------------------------------------------------------------------
def test_error_repr_names_the_op_and_cause_without_marking_it_read() -> None:
    bad = ert.take(ert.asarray([1.0, 2.0]), ert.asarray([7]))
    assert repr(bad) == "Tensor(<error: take failed: IndexError>, shape=(1,), dtype=float64)"
    dependent = bad * 2  # dependents show the failing op, not their own
    assert repr(dependent) == "Tensor(<error: take failed: IndexError>, shape=(1,), dtype=float64)"
    shown = _text(bad._repr_html_())
    assert "error" in shown and "IndexError" in shown and "out of bounds" in shown
    assert "test_repr.py" in shown  # where the failing op was created
    # Showing it was not reading it: synchronize still reports it, once.
    with pytest.raises(ert.KernelError, match="take"):
        ert.synchronize()


def test_html_escapes_what_it_shows() -> None:
    bad = _MARKUP_FAILURE(ert.ones(2))
    markup = bad._repr_html_()
    assert "<script>" not in markup
    assert "&lt;script&gt;" in markup and "&amp; more" in markup
    assert "<script>alert('x')</script> & more" in _text(markup)
    with pytest.raises(ert.KernelError, match="script"):
        bad.numpy()


# -- traced --------------------------------------------------------------------------------
def test_traced_tensors_show_as_traced_inside_ert_function() -> None:
    seen: dict[str, str] = {}

    @ert.function
    def f(x: ert.Tensor) -> ert.Tensor:
        y = x * 2
        seen.update(repr=repr(y), state=y.state, html=_text(y._repr_html_()))
        return y

    assert f(ert.ones(3)).numpy().tolist() == [2.0, 2.0, 2.0]
    assert re.fullmatch(r"Tensor\(<traced %\w+>, shape=\(3,\), dtype=float64\)", seen["repr"])
    assert seen["state"] == "traced"
    assert "traced" in seen["html"] and "(3,)" in seen["html"]


# -- devices -------------------------------------------------------------------------------
class _HostTwin(ert.devices.CPUDevice):
    """A second host-memory device: only its name differs from the CPU's."""

    name = "test_repr_twin"


def test_the_device_is_named_unless_it_is_the_cpu() -> None:
    twin = ert.register_device(_HostTwin())
    t = ert.asarray(np.arange(3.0), device=twin)
    assert repr(t) == "Tensor([0., 1., 2.], shape=(3,), dtype=float64, device=test_repr_twin)"
    assert "test_repr_twin" in _text(t._repr_html_())
