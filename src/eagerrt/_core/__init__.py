"""eagerrt's core: AsyncValue, versioned values, the host scheduler, worker
pools, the event-loop bridge, errors and settings. It knows nothing of ops or
devices.

This module is the core's one surface: the other layers import from here, never
from the modules inside (as trio's ``_core`` is used), so a module can move or
split inside the core without touching them. ``profiling`` and
``float_errors`` are exported as modules: their state (the active recording,
the float-error modes) is read through them at each use.
"""

from . import float_errors, precision, profiling
from .async_value import (
    ERROR,
    MAX_INLINE_DEPTH,
    PENDING,
    READY,
    AsyncValue,
    AsyncValueStateError,
    IndirectAsyncValue,
    live_async_values,
    on_worker_thread,
    run_when_ready,
)
from .bridge import Available, wait_async
from .config import Config, config, sync_mode
from .deterministic import DeterministicRun, deterministic
from .errors import (
    ArgumentError,
    BatchError,
    DeviceError,
    DTypeError,
    EagerError,
    Failure,
    KernelError,
    OutOfBoundsError,
    PipelineError,
    ShapeError,
    SourceLine,
    TracingError,
    UsageError,
    ValueRangeError,
    WaitTimeoutError,
    WeightsError,
    user_line,
)
from .float_errors import caller_modes, register_runner, run_here, run_under
from .forking import renew_after_fork
from .precision import PrecisionError
from .profiling import Event
from .scheduler import (
    EagerErrorGroup,
    Executor,
    Stats,
    Task,
    count_inline,
    forget_outstanding,
    on_synchronize,
    register_executor,
    schedule,
    stats,
    synchronize,
)
from .versions import VersionedValue, schedule_read
from .workers import (
    WorkerPool,
    count_value,
    never_run_tasks_here,
    reset_after_fork,
    stop_counting_as_busy,
)

__all__ = [
    "ERROR",
    "MAX_INLINE_DEPTH",
    "PENDING",
    "READY",
    "ArgumentError",
    "AsyncValue",
    "AsyncValueStateError",
    "Available",
    "BatchError",
    "Config",
    "DTypeError",
    "DeterministicRun",
    "DeviceError",
    "EagerError",
    "EagerErrorGroup",
    "Event",
    "Executor",
    "Failure",
    "IndirectAsyncValue",
    "KernelError",
    "OutOfBoundsError",
    "PipelineError",
    "PrecisionError",
    "ShapeError",
    "SourceLine",
    "Stats",
    "Task",
    "TracingError",
    "UsageError",
    "ValueRangeError",
    "VersionedValue",
    "WaitTimeoutError",
    "WeightsError",
    "WorkerPool",
    "caller_modes",
    "config",
    "count_inline",
    "count_value",
    "deterministic",
    "float_errors",
    "forget_outstanding",
    "live_async_values",
    "never_run_tasks_here",
    "on_synchronize",
    "on_worker_thread",
    "precision",
    "profiling",
    "register_executor",
    "register_runner",
    "renew_after_fork",
    "reset_after_fork",
    "run_here",
    "run_under",
    "run_when_ready",
    "schedule",
    "schedule_read",
    "stats",
    "stop_counting_as_busy",
    "sync_mode",
    "synchronize",
    "user_line",
    "wait_async",
]
