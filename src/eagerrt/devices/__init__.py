"""Device registry: find a device by name, including third-party ones.

A hardware maker ships a package that declares an entry point in the
``eagerrt.devices`` group, pointing at a :class:`Device` instance or a
zero-argument callable returning one::

    [project.entry-points."eagerrt.devices"]
    mydev = "mypkg.device:MyDevice"

``get_device("mydev")`` then loads it on first use; no patch to eagerrt.

Built in beside the CPU: ``cuda:N`` (``cuda`` is ``cuda:0``; CuPy on NVIDIA GPUs,
imported only when asked for) and ``teststream:N``, the stream device whose
streams are host threads (see :mod:`eagerrt.devices.stream`).

>>> from eagerrt.devices import get_device
>>> get_device("cpu").name
'cpu'
"""

from __future__ import annotations

import threading
from importlib.metadata import entry_points

from .._core import DeviceError, renew_after_fork
from .base import Device
from .cpu import CPUDevice, cpu
from .cuda import cuda_device
from .stream import StreamDevice
from .stream_threads import ThreadStreamDevice

__all__ = [
    "CPUDevice",
    "Device",
    "StreamDevice",
    "available_devices",
    "cpu",
    "get_device",
    "register_device",
]

ENTRY_POINT_GROUP = "eagerrt.devices"

_devices: dict[str, Device] = {"cpu": cpu}
_lock = threading.Lock()
renew_after_fork(__name__, "_lock")


def register_device(device: Device) -> Device:
    """Make ``device`` findable by its name (replacing any device of that name)."""
    if not isinstance(device, Device):
        raise DeviceError(f"register_device expects an eagerrt Device, got {type(device).__name__}")
    with _lock:
        _devices[device.name] = device
    return device


def _load_entry_point(name: str) -> Device | None:
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == name:
            obj = ep.load()
            device = obj if isinstance(obj, Device) else obj()
            if not isinstance(device, Device):
                raise DeviceError(
                    f"entry point {ep.value!r} for device {name!r} gave "
                    f"{type(device).__name__}, not an eagerrt Device"
                )
            return register_device(device)
    return None


def get_device(device: str | Device | None = None) -> Device:
    """The device named ``device`` (``None`` means the CPU)."""
    if device is None:
        return cpu
    if isinstance(device, Device):
        return device
    found = _devices.get(device)
    if found is not None and found.closed:  # a closed device: make a new one if we can
        with _lock:
            if _devices.get(device) is found:
                del _devices[device]
        found = None
    if found is None:
        found = _make_builtin(device) or _load_entry_point(device)
    if found is None:
        raise DeviceError(
            f"unknown device {device!r} (or closed, with nothing to make it anew); known: "
            f"{available_devices()}. A third-party "
            f"device joins through the {ENTRY_POINT_GROUP!r} entry point group."
        )
    return found


def _make_builtin(name: str) -> Device | None:
    """``cuda``/``cuda:N`` and ``teststream:N``, made on first use."""
    kind, _, index = name.partition(":")
    if kind not in ("cuda", "teststream") or not (
        index.isdigit() or (kind == "cuda" and not index)
    ):
        return None
    with _lock:
        found = _devices.get(name)
        if found is not None:
            return found
        if kind == "cuda":
            device: Device = cuda_device(int(index or 0))  # raises DeviceError without a GPU
            _devices["cuda:" + str(int(index or 0))] = device
            if not index or int(index) == 0:
                _devices["cuda"] = device
        else:
            device = _devices[name] = ThreadStreamDevice(name)
    return device


def available_devices() -> list[str]:
    """Names of registered devices and of devices offered through entry points."""
    names = set(_devices)
    names.update(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))
    return sorted(names)
