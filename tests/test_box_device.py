"""A third-party device, found through its entry point, held to the device
contract: its own kernels where it has them, the counted host fallback for the
rest, compiled functions as plans of its kernels (not op by op), a clear error
for what it can't do, and a close that refuses later work.

The device is ``tests/boxdev``: arrays wrapped in a class numpy can't read, one
worker thread of its own, a backend module naming its kernels and compiler.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import numpy as np
import pytest

import eagerrt as ert
from boxdev import Box, BoxDevice
from boxdev.backend import BOX_OPS
from eagerrt.graph.op_by_op import OpByOpPlan
from eagerrt.graph.plan import Plan


@pytest.fixture
def box(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[BoxDevice]:
    """The box device, installed as a distribution would be: an entry point in
    a ``.dist-info`` on ``sys.path``, found by ``get_device("box")``."""
    info = tmp_path / "boxdev_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: boxdev-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[eagerrt.devices]\nbox = boxdev:make_device\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "box" in ert.devices.available_devices()
    device = ert.get_device("box")
    assert isinstance(device, BoxDevice)
    yield device
    device.close()


def _on(device: ert.Device, array: np.ndarray) -> ert.Tensor:
    return ert.asarray(array, device=device)


def _host(t: ert.Tensor) -> np.ndarray:
    return t.to("cpu").numpy()


def test_its_own_kernels_keep_data_on_the_device(box: BoxDevice) -> None:
    x = _on(box, np.arange(6.0).reshape(2, 3))
    y = ert.relu((x * 2 - 3) @ x.T.to("cpu").to(box)).sum()
    assert type(y._native()) is Box and y.device is box
    np.testing.assert_allclose(
        _host(y),
        np.maximum(
            (np.arange(6.0).reshape(2, 3) * 2 - 3) @ np.arange(6.0).reshape(2, 3).T, 0
        ).sum(),
    )
    assert set(box.host_fallbacks) <= {"transpose"}  # .T has no box kernel


def test_ops_without_a_kernel_run_on_the_host_counted(box: BoxDevice) -> None:
    assert "sin" not in BOX_OPS and "argmax" not in BOX_OPS
    x = _on(box, np.arange(12.0))
    before = box.downloads
    s, i = ert.sin(x), ert.argmax(x)
    np.testing.assert_allclose(_host(s), np.sin(np.arange(12.0)))
    assert int(_host(i)) == 11  # the generic kernel on a wrapper once gave 0
    assert box.host_fallbacks["sin"] == 1 and box.host_fallbacks["argmax"] == 1
    assert box.downloads >= before + 2 and type(s._native()) is Box


def test_writes_run_the_devices_own_write_kernels(box: BoxDevice) -> None:
    t = _on(box, np.zeros(5))
    t[1] = 5.0
    t[[2, 3]] = _on(box, np.array([7.0, 8.0]))  # the index list becomes a box tensor
    t[t > 7.5] = 9.0
    t += 1
    np.testing.assert_array_equal(_host(t), [1.0, 6.0, 8.0, 10.0, 1.0])
    assert type(t._native()) is Box
    assert not {"setitem", "assign"} & set(box.host_fallbacks)


def test_a_device_without_write_kernels_writes_on_the_host_counted(
    box: BoxDevice, monkeypatch: pytest.MonkeyPatch
) -> None:
    setitem = ert.get_op("setitem")
    monkeypatch.delitem(setitem.kernels, "box")
    t = _on(box, np.zeros(3))
    t[0] = 2.0
    np.testing.assert_array_equal(_host(t), [2.0, 0.0, 0.0])
    assert box.host_fallbacks["setitem"] == 1
    monkeypatch.setattr(box, "host_fallback", False)
    with pytest.raises(ert.DeviceError, match=r"no kernel for device 'box'") as info:
        t[1] = 3.0
    assert __file__ in str(info.value)


def test_a_device_without_host_fallback_says_no_kernel_at_the_users_line(
    box: BoxDevice, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(box, "host_fallback", False)
    ert.get_op("sin").forget_calls()
    x = _on(box, np.ones(3))
    with pytest.raises(ert.DeviceError, match=r"no kernel for device 'box'") as info:
        ert.sin(x)
    assert __file__ in str(info.value)


def test_a_compiled_function_runs_as_a_plan_of_its_kernels(box: BoxDevice) -> None:
    w = _on(box, np.linspace(-1, 1, 12).reshape(4, 3))

    def model(x: ert.Tensor) -> ert.Tensor:
        h = ert.relu(ert.linear(x, w) + 0.5)
        return ert.exp(h).sum() + ert.sin(h)

    f = ert.function(model)
    data = np.random.default_rng(0).standard_normal((5, 3))
    x = _on(box, data)
    got = f(x)
    plan = f.compiled_for(x).plan
    assert isinstance(plan, Plan) and not isinstance(plan, OpByOpPlan)
    assert got.device is box and type(got._native()) is Box
    np.testing.assert_allclose(_host(got), _host(model(x)), rtol=1e-12)
    text = f.explain(x)
    assert "optimized graph:" in text and "linear" in text
    costs = f.measure_costs(x, repeats=1)
    assert costs and all(ns > 0 for ns in costs.values())


def test_a_compiled_identity_gives_back_a_box(box: BoxDevice) -> None:
    x = _on(box, np.arange(3.0))
    same = ert.function(lambda a: a)(x)
    assert type(same._native()) is Box
    np.testing.assert_array_equal(_host(same), np.arange(3.0))


def test_every_op_record_equals_the_cpu_or_says_why_at_the_call(box: BoxDevice) -> None:
    from device_records import record_failures

    failures = record_failures(box)
    # The records that mix in numpy operands (made CPU tensors) must say so.
    unexpected = [f for f in failures if "operands are on different devices" not in f]
    assert not unexpected, "\n".join(unexpected)
    assert box.host_fallbacks  # most ops ran through the fallback, and were counted


def test_a_kernel_giving_the_wrong_shape_fails_naming_op_and_device(box: BoxDevice) -> None:
    op = ert.define_op("box_test_wrong_shape", rule=lambda x: (x.shape, x.dtype), replace=True)
    op.register_kernel("box", lambda x: Box(x.array[:-1]))
    with pytest.raises(ert.KernelError, match=r"box_test_wrong_shape.*box"):
        op(_on(box, np.ones(4))).to("cpu").numpy()


def test_a_closed_device_refuses_work_and_its_name_makes_a_new_one(box: BoxDevice) -> None:
    x = _on(box, np.ones(3))
    y = x + 1
    box.close()
    np.testing.assert_array_equal(_host(y), [2.0, 2.0, 2.0])  # done before the close
    with pytest.raises(ert.DeviceError, match="'box' is closed") as info:
        x + 1
    assert __file__ in str(info.value)
    with pytest.raises(ert.DeviceError, match="'box' is closed"):
        ert.asarray([1.0], device=box)
    with pytest.raises(ert.DeviceError, match="shut down"):
        box.pool.submit(lambda: None)
    again = ert.get_device("box")  # the entry point makes a fresh one
    assert again is not box and not again.closed
    np.testing.assert_array_equal(_host(_on(again, np.ones(2)) * 3), [3.0, 3.0])
    again.close()


def test_the_cpu_device_stays_open() -> None:
    with pytest.raises(ert.UsageError, match="can't be closed"):
        ert.get_device("cpu").close()
    assert not ert.get_device("cpu").closed


def test_a_closed_test_stream_device_is_made_anew_by_name() -> None:
    dev = ert.get_device("teststream:7")
    np.testing.assert_array_equal(_on(dev, np.ones(2)).numpy(), [1.0, 1.0])  # streams running
    y = _on(dev, np.ones(2)) + 1
    dev.close()  # stops the stream threads; reading y still works
    np.testing.assert_array_equal(y.numpy(), [2.0, 2.0])
    with pytest.raises(ert.DeviceError, match="is closed"):
        y * 2
    fresh = ert.get_device("teststream:7")
    assert fresh is not dev
    np.testing.assert_array_equal((_on(fresh, np.ones(2)) * 2).numpy(), [2.0, 2.0])
    fresh.close()
