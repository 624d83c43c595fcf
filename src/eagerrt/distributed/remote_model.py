"""A model deployed on a pool of Ray actors, called like a local one.

``RemoteModel(...)(x)`` returns tensors at once, their shapes and dtypes known:
the first call of each argument signature asks one replica for the result's
structure, shapes and dtypes (it runs the model once on zeros, which also
compiles it there) and blocks for that round trip; later calls of that
signature block on nothing. The call goes to the least loaded replica as soon
as its tensor arguments are ready; Ray's ``ObjectRef`` completes the result
tensors from Ray's own thread, so they are awaitable on asyncio, uvloop and
trio, readable with ``.numpy()``, and local ops that use them park on them.

A replica that dies fails the calls it had (a :class:`ReplicaLost` read as a
:class:`~eagerrt.KernelError` naming the model and the caller's line) and the
pool starts another in its place; ``retries`` resubmits such calls to another
replica instead, as a pipeline that must lose no item wants (models are pure
functions of their arguments, so a call may safely run twice).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._core import (
    ERROR,
    PENDING,
    EagerError,
    SourceLine,
    UsageError,
    WaitTimeoutError,
    renew_after_fork,
    run_when_ready,
    user_line,
)
from ..graph import pytree
from ..graph.function import signature
from ..ops.futures import fail_all, fulfil, pending
from ..tensor import Tensor
from .replica import ArraySpec, Replica, ReplicaLost, example_arguments, thread_environment

__all__ = ["RemoteModel", "ReplicaLost", "deploy"]


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UsageError(
            "eagerrt.distributed runs on Ray, which is not installed: "
            "pip install 'eagerrt[distributed]'"
        ) from None
    return ray


_log = logging.getLogger("eagerrt")
_ray_calls: ThreadPoolExecutor | None = None
renew_after_fork(__name__, "_ray_calls", lambda: None)


def _off_ray_thread(fn: Callable[..., Any], *args: Any) -> None:
    """``fn(*args)`` on a thread of eagerrt's own. Ray completes its futures on
    its own thread, and calling Ray from there can wait on that thread itself
    (``ray.kill`` in a done callback never returned): work that calls Ray after a
    future completed (a retry, a replacement, the next call of a chain) runs here."""
    global _ray_calls
    if _ray_calls is None:
        _ray_calls = ThreadPoolExecutor(1, thread_name_prefix="eagerrt-ray")
    _ray_calls.submit(_logged, fn, *args)


def _logged(fn: Callable[..., Any], *args: Any) -> None:
    # Nobody waits on this thread's futures: an error must not vanish with one.
    try:
        fn(*args)
    except Exception:
        _log.exception("eagerrt.distributed: %s failed", getattr(fn, "__qualname__", fn))


@dataclass(eq=False)
class _Replica:
    """One actor and what the pool knows of it."""

    actor: Any
    number: int
    in_flight: int = 0
    sent: int = 0
    started: bool = False  # its model is built (it answered ready())
    calls: int = 0  # answered
    retiring: bool = False  # resize() took it out: killed once idle


@dataclass
class _Call:
    """One call on its way: its arguments (tensors until sent), its results."""

    leaves: list[Any]
    tree: Any
    outputs: list[Tensor]
    site: SourceLine | None
    retries: int


class RemoteModel:
    """A model on a pool of Ray actors (see :func:`deploy`)."""

    def __init__(
        self,
        factory: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        replicas: int,
        num_cpus: float,
        retries: int,
        name: str | None,
        actor_options: dict[str, Any] | None,
        start_timeout: float | None,
    ) -> None:
        ray = _ray()
        if replicas < 1:
            raise UsageError(f"deploy: replicas must be at least 1, got {replicas}")
        if retries < 0:
            raise UsageError(f"deploy: retries must be 0 or more, got {retries}")
        self.name = name or getattr(factory, "__qualname__", None) or repr(factory)
        self.retries = retries
        self.start_timeout = start_timeout
        self._factory, self._args, self._kwargs = factory, args, kwargs
        # max_restarts: the pool replaces lost replicas itself; max_concurrency:
        # calls one replica runs at once, on its threads (see replica.py).
        options: dict[str, Any] = {"num_cpus": num_cpus, "max_restarts": 0, "max_concurrency": 8}
        options.update(actor_options or {})
        runtime_env: dict[str, Any] = dict(options.get("runtime_env") or {})
        # The thread counts go in the environment the worker process starts with:
        # numba, MKL and OpenBLAS read it once, when loaded.
        runtime_env["env_vars"] = {
            **thread_environment(options["num_cpus"]),
            **runtime_env.get("env_vars", {}),
        }
        options["runtime_env"] = runtime_env
        self._actor_class = ray.remote(Replica).options(**options)
        self._options = options
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # the replicas changed (see ready())
        self._replicas: list[_Replica] = []
        self._numbered = 0  # replicas ever made: the next one's number
        self._broken: BaseException | None = None  # the factory failed on a replica
        self._closed = False
        self._specs: dict[tuple[Any, ...], tuple[Any, list[ArraySpec]]] = {}
        for _ in range(replicas):
            self._start_replica()

    def __repr__(self) -> str:
        return f"<RemoteModel {self.name}: {self.replicas} replicas>"

    # -- the pool ----------------------------------------------------------------
    @property
    def replicas(self) -> int:
        """Replicas serving calls now (not counting those retiring)."""
        with self._lock:
            return sum(not r.retiring for r in self._replicas)

    def resize(self, replicas: int) -> None:
        """Grow or shrink the pool to ``replicas``; a replica taken out finishes
        its calls in flight first."""
        if replicas < 1:
            raise UsageError(f"resize: replicas must be at least 1, got {replicas}")
        with self._lock:
            self._check_open()
            serving = [r for r in self._replicas if not r.retiring]
            idle: list[_Replica] = []
            # Those still starting go first, then the least loaded.
            by_use = sorted(serving, key=lambda r: (r.started, r.in_flight))
            for replica in by_use[: len(serving) - replicas]:
                replica.retiring = True
                if replica.in_flight == 0:
                    idle.append(replica)
            grow = replicas - len(serving)
        for replica in idle:
            self._retire(replica)
        for _ in range(grow):
            self._start_replica()

    def shutdown(self) -> None:
        """Kill every replica now (calls still in flight fail); idempotent."""
        with self._lock:
            self._closed = True
            replicas, self._replicas = self._replicas, []
            self._changed.notify_all()
        ray = _ray()
        for replica in replicas:
            ray.kill(replica.actor)

    def ready(self, timeout: float | None = None) -> None:
        """Block until every replica serving calls has built its model (a server
        warming up before it takes traffic). Raises :class:`ReplicaLost` where no
        replica can build it, and :class:`~eagerrt.WaitTimeoutError` after
        ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while True:
                if self._closed or self._broken is not None:
                    raise self._no_replica()
                serving = [r for r in self._replicas if not r.retiring]
                if serving and all(r.started for r in serving):
                    return
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    starting = sum(not r.started for r in serving)
                    raise WaitTimeoutError(
                        f"{self.name}: {starting} of {len(serving)} replicas still starting "
                        f"after {timeout} s"
                    )
                self._changed.wait(left)

    def __enter__(self) -> RemoteModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def thread_counts(self) -> list[dict[str, int | None]]:
        """Each replica's thread counts (eagerrt, numba, MKL, OpenBLAS), as its
        process sees them."""
        ray = _ray()
        with self._lock:
            actors = [r.actor for r in self._replicas]
        return list(ray.get([a.threads.remote() for a in actors]))

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError(f"{self.name}: this deployment was shut down")

    def _start_replica(self) -> None:
        # The actor is made outside the lock: Ray pickles the factory's arguments
        # (weights, maybe) and may wait on its control service meanwhile.
        actor = self._actor_class.remote(self._factory, self._args, self._kwargs)
        with self._lock:
            closed = self._closed
            if not closed:
                self._numbered += 1
                replica = _Replica(actor, self._numbered)
                self._replicas.append(replica)
                self._changed.notify_all()
        if closed:
            _ray().kill(actor)
            return
        future = replica.actor.ready.remote().future()
        future.add_done_callback(lambda done: _off_ray_thread(self._on_started, replica, done))
        if self.start_timeout is not None:
            timer = threading.Timer(
                self.start_timeout, _off_ray_thread, (self._start_overdue, replica)
            )
            timer.daemon = True
            timer.start()

    def _on_started(self, replica: _Replica, done: Any) -> None:
        try:
            failure = done.result()
        except Exception as exc:
            if getattr(exc, "actor_init_failed", False):  # its arguments did not unpickle
                failure = ReplicaLost(f"no replica could start: {type(exc).__name__}: {exc}")
                failure.__cause__ = exc
            else:  # killed (resize, shutdown) or lost (its node) while starting
                self._lost(replica, exc)
                return
        if failure is not None:  # the factory failed: another replica's would too
            with self._lock:
                self._broken = failure
            self._retire(replica)
            return
        with self._lock:
            replica.started = True
            self._changed.notify_all()

    def _start_overdue(self, replica: _Replica) -> None:
        """``replica`` has not built its model within ``start_timeout``: out of
        the pool, without a replacement (the cluster may lack room for it);
        where it was the last, calls fail rather than wait for ever."""
        with self._lock:
            if replica.started or replica not in self._replicas:
                return
            if not any(r.started and not r.retiring for r in self._replicas):
                self._broken = ReplicaLost(
                    f"no replica started within {self.start_timeout} s (start_timeout): the "
                    "cluster may lack what each replica asks for "
                    f"(num_cpus={self._options['num_cpus']}; ray.available_resources() shows "
                    "what is free), or the model takes longer to build"
                )
        _log.warning(
            "eagerrt.distributed: %s: replica %d not started within %s s: taken out",
            self.name, replica.number, self.start_timeout,
        )  # fmt: skip
        self._retire(replica)

    def _lost(self, replica: _Replica, error: BaseException) -> None:
        """``replica`` died: out of the pool, and another in its place."""
        with self._lock:
            if replica not in self._replicas:
                return  # already handled (its other calls fail the same way)
            self._replicas.remove(replica)
            self._changed.notify_all()
            replace = not (replica.retiring or self._closed or self._broken is not None)
        with contextlib.suppress(Exception):  # only unavailable, maybe: it must not keep its CPUs
            _ray().kill(replica.actor)
        if replace:
            try:
                self._start_replica()
            except Exception:
                _log.exception("eagerrt.distributed: %s: no replacement started", self.name)

    def _retire(self, replica: _Replica) -> None:
        with self._lock:
            if replica not in self._replicas:
                return
            self._replicas.remove(replica)
            self._changed.notify_all()
        _ray().kill(replica.actor)

    def _pick(self) -> _Replica | None:
        """The least loaded replica serving calls, its count taken; None if none
        is. Replicas still starting come last (a replacement takes seconds to
        build its model: calls sent to it would wait that long while the others
        are free), and among equals the one sent the fewest (calls one at a time
        go round)."""
        with self._lock:
            best: _Replica | None = None
            best_key = (True, 0, 0)
            for replica in self._replicas:
                key = (not replica.started, replica.in_flight, replica.sent)
                if not replica.retiring and (best is None or key < best_key):
                    best, best_key = replica, key
            if best is not None:
                best.in_flight += 1
                best.sent += 1
            return best

    # -- calling -------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """The model on these arguments, remotely: its result's tensors at once."""
        self._check_open()
        site = user_line()
        leaves, tree = pytree.flatten((args, kwargs))
        structure, specs = self._spec(leaves, tree)
        outputs = [pending(shape, np.dtype(dtype), self.name) for shape, dtype in specs]
        call = _Call(leaves, tree, outputs, site, self.retries)
        waiting = [leaf for leaf in leaves if isinstance(leaf, Tensor) and leaf._state == PENDING]
        if waiting:  # sent when they are ready (maybe from Ray's thread: see _off_ray_thread)
            run_when_ready(waiting, lambda: _off_ray_thread(self._send, call))
        else:
            self._send(call)
        return pytree.unflatten(structure, outputs)

    def _spec(self, leaves: list[Any], tree: Any) -> tuple[Any, list[ArraySpec]]:
        """The result's structure and arrays for this signature (asked of a
        replica the first time, then remembered)."""
        key = signature(leaves, tree, self.name)  # as ert.function keys its traces
        known = self._specs.get(key)
        attempts = self.retries + 1
        while known is None:
            attempts -= 1
            ray = _ray()
            replica = self._pick()
            if replica is None:
                raise self._no_replica()
            try:
                ref = replica.actor.spec.remote(example_arguments(leaves), tree)
                known = ray.get(ref, timeout=self.start_timeout)
            except ray.exceptions.GetTimeoutError:
                raise ReplicaLost(
                    f"{self.name}: no replica answered within {self.start_timeout} s (start_timeout): "
                    "it may still be building the model, or the cluster lacks what each replica "
                    f"asks for (num_cpus={self._options['num_cpus']}; "
                    "ray.available_resources() shows what is free)"
                ) from None
            except ray.exceptions.RayActorError as exc:
                self._lost(replica, exc)
                if self._broken is not None or self._closed:  # killed for its failed factory
                    raise self._no_replica() from None
                if attempts > 0:  # retries: ask another replica
                    continue
                raise ReplicaLost(
                    f"{self.name}: replica {replica.number} died while asked for its result's shapes"
                ) from exc
            except ray.exceptions.RayTaskError as exc:
                raise _remote_cause(exc) from None
            finally:
                self._done_with(replica)
            self._specs[key] = known
        return known

    def _no_replica(self) -> EagerError:
        if self._closed:
            return UsageError(f"{self.name}: this deployment was shut down")
        broken = self._broken
        if broken is not None:
            error = ReplicaLost(f"{self.name}: {broken}")
            error.__cause__ = broken.__cause__
            return error
        return UsageError(f"{self.name}: the deployment has no replica serving calls")

    def _send(self, call: _Call) -> None:
        """Send ``call`` (its tensor arguments ready now) to the least loaded replica."""
        for leaf in call.leaves:
            if isinstance(leaf, Tensor) and leaf._state == ERROR:  # so do the results
                fail_all(call.outputs, leaf._value, call.site)  # its Failure, not read here
                return
        try:
            leaves = [leaf.numpy() if isinstance(leaf, Tensor) else leaf for leaf in call.leaves]
        except Exception as exc:
            self._fail(call, exc)
            return
        call.leaves = leaves
        replica = self._pick()
        if replica is None:
            self._fail(call, self._no_replica())
            return
        try:
            future = replica.actor.call.remote(call.tree, *leaves).future()
        except Exception as exc:
            self._done_with(replica)
            self._fail(call, exc)
            return
        future.add_done_callback(lambda done: self._received(call, replica, done))

    def _received(self, call: _Call, replica: _Replica, done: Any) -> None:
        """On Ray's thread: the results in place, or the failure handled elsewhere."""
        self._done_with(replica)
        try:
            arrays = done.result()
        except Exception as exc:
            _off_ray_thread(self._failed, call, replica, exc)
            return
        replica.calls += 1
        if len(arrays) != len(call.outputs):
            self._fail(call, UsageError(f"{self.name}: a call returned {len(arrays)} arrays, "
                                        f"where its first returned {len(call.outputs)}"))  # fmt: skip
            return
        for t, array in zip(call.outputs, arrays, strict=True):
            fulfil(t, array, call.site)

    def _failed(self, call: _Call, replica: _Replica, exc: BaseException) -> None:
        """The call failed: sent again if its replica died and it may be, else its results fail."""
        try:
            errors = _ray().exceptions
            if isinstance(exc, errors.RayActorError):
                self._lost(replica, exc)
                if self._closed or self._broken is not None:
                    exc = self._no_replica()
                elif call.retries > 0:
                    call.retries -= 1
                    self._send(call)
                    return
                else:
                    lost = ReplicaLost(
                        f"{self.name}: replica {replica.number} died during this call"
                    )
                    lost.__cause__ = exc
                    exc = lost
            elif isinstance(exc, errors.RayTaskError):  # the model raised
                exc = _remote_cause(exc)
        except Exception as error:  # whatever happens here, the call's tensors complete
            exc = error
        self._fail(call, exc)

    def _done_with(self, replica: _Replica) -> None:
        with self._lock:
            replica.in_flight -= 1
            idle_retiring = replica.retiring and replica.in_flight == 0
        if idle_retiring:
            _off_ray_thread(self._retire, replica)

    def _fail(self, call: _Call, error: BaseException) -> None:
        fail_all(call.outputs, error, call.site)


def _remote_cause(error: Any) -> BaseException:
    """The model's own exception out of Ray's wrapper (its type, for ``except``)."""
    cause = getattr(error, "cause", None)
    return cause if isinstance(cause, BaseException) else error


def deploy(
    factory: Callable[..., Any],
    *args: Any,
    replicas: int = 1,
    num_cpus: float = 1,
    retries: int = 0,
    name: str | None = None,
    actor_options: dict[str, Any] | None = None,
    start_timeout: float | None = 300.0,
    **kwargs: Any,
) -> RemoteModel:
    """The model ``factory(*args, **kwargs)`` builds, on ``replicas`` Ray actors.

    Each actor builds the model once (pass a path to load weights from, or an
    ``ObjectRef`` of them from ``ray.put``: the factory and its arguments travel
    once per replica, never per call). ``num_cpus``: Ray's CPUs per replica;
    eagerrt, numba, MKL and OpenBLAS there use that many threads. ``retries``:
    how many times a call lost to a dying replica is sent again before its
    tensors fail with :class:`ReplicaLost`. ``actor_options`` go to Ray's
    ``.options()`` (resources, a scheduling strategy, a runtime environment).
    ``start_timeout``: how long the first call of a new argument signature waits
    for a replica's answer (``None``: for ever); past it, it raises
    :class:`ReplicaLost` rather than hang where the cluster can't place a replica.

    The result is called like the model and returns tensors at once (see
    :class:`RemoteModel`); ``resize`` grows or shrinks the pool, ``shutdown``
    (or leaving a ``with`` block) ends it.
    """
    return RemoteModel(
        factory,
        args,
        kwargs,
        replicas=replicas,
        num_cpus=num_cpus,
        retries=retries,
        name=name,
        actor_options=actor_options,
        start_timeout=start_timeout,
    )
