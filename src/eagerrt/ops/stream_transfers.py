"""Moving a tensor off a stream device: a copy on its device-to-host stream.

``t.to("cpu")`` returns at once; the copy waits on the device for ``t``'s work,
and the host tensor completes when the copy's event does (through the
device's host-completion strategy), never blocking the caller.

>>> import numpy as np, eagerrt as ert
>>> on_dev = ert.asarray(np.arange(3.0), device="teststream:0") * 2
>>> on_host = on_dev.to("cpu")
>>> on_host.device.name, on_host.numpy()
('cpu', array([0., 2., 4.]))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .._core import (
    ERROR,
    PENDING,
    READY,
    AsyncValue,
    Failure,
    SourceLine,
    Task,
    schedule,
    user_line,
)
from ..devices import cpu
from ..devices.base import Device
from ..tensor import Tensor

__all__ = ["download"]


class _Finish(Task):
    """Fills the host tensor once the copy's event is done."""

    __slots__ = ("read", "site", "source")

    read: Callable[[], np.ndarray]
    site: SourceLine | None
    source: Tensor

    def run(self) -> None:
        # The stream's failure making the source is the copy's too.
        failure = self.source.device.stream_failure(self.source._value)  # type: ignore[attr-defined]
        if failure is None:
            try:
                self.result._complete(READY, self.read())
                return
            except Exception as exc:
                failure = Failure("to", self.site, exc)
        self.result._complete(ERROR, failure)


class _Start(Task):
    """Enqueues the copy once the source tensor is available."""

    __slots__ = ("out", "site", "source")

    out: Tensor
    site: SourceLine | None
    source: Tensor

    def run(self) -> None:
        try:
            _start(self.source, self.out, self.site)
        finally:  # its own value, which synchronize() waits for: nothing else completes it
            self.result._complete(READY, None)


def _start(source: Tensor, result: Tensor, site: SourceLine | None) -> None:
    if source._state == ERROR:
        result._complete(ERROR, source._value)
        return
    device: Any = source.device
    try:
        done, read = device.start_download(source._value)
    except Exception as exc:
        result._complete(ERROR, Failure("to", site, exc))
        return
    finish = _Finish(result, 0.0, device.executor)
    finish.read = read
    finish.site = site
    finish.source = source
    schedule(finish, [done])


def download(tensor: Tensor, target: Device) -> Tensor:
    """``tensor`` (on a stream device) on ``target``, through the host."""
    result = Tensor._pending(tensor.shape, tensor.dtype, cpu, "to")
    site = user_line()
    if tensor._state == PENDING:  # an op still waiting for a host operand
        start = _Start(AsyncValue(), 0.0, tensor.device.executor)
        start.source = tensor
        start.out = result
        start.site = site
        schedule(start, [tensor])
    else:
        _start(tensor, result, site)
    return result if target is cpu else result.to(target)
