"""``ert.distributed`` across nodes: Ray's cluster utilities simulate a head and
worker nodes on this machine (each its own raylet), for placement and for a
node lost with calls in flight."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import eagerrt as ert
import ray_loopback  # noqa: F401 - before Ray is imported

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    import sys

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    nodes = cluster_utils.Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 2,  # room for a replacement, when the worker node is lost
            "include_dashboard": False,
            # A lost node is noticed in about a second, not Ray's default 15 or so.
            "_system_config": {"health_check_period_ms": 300, "health_check_failure_threshold": 3},
        },
    )
    try:
        ray.init(address=nodes.address, log_to_driver=False, logging_level="error")
        yield nodes
    finally:
        ray.shutdown()
        nodes.shutdown()


def node_reporter(seconds: float) -> Any:
    """A model that answers with the id of the node it was built on (as bytes)."""
    node = ray.get_runtime_context().get_node_id()

    def where(x: ert.Tensor) -> np.ndarray:
        time.sleep(seconds)
        return np.frombuffer(node.encode(), np.uint8).copy()

    return where


def _node(t: ert.Tensor) -> str:
    return bytes(t.numpy()).decode()


def test_replicas_spread_over_nodes_and_a_lost_nodes_calls_fail_and_move(cluster: Any) -> None:
    worker = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    with ert.distributed.deploy(
        node_reporter,
        0.3,
        replicas=2,
        num_cpus=1,
        name="where",
        actor_options={"scheduling_strategy": "SPREAD"},
    ) as model:
        x = np.zeros(1)
        model.ready(timeout=120)  # calls go to started replicas first
        placed = {_node(model(x)) for _ in range(6)}
        assert len(placed) == 2  # one replica on each node

        in_flight = [model(x) for _ in range(6)]
        time.sleep(0.1)
        cluster.remove_node(worker)  # with its replica and the calls it had
        outcomes = []
        for t in in_flight:
            try:
                outcomes.append(_node(t))
            except ert.distributed.ReplicaLost as e:
                outcomes.append(e)
        lost = [o for o in outcomes if isinstance(o, Exception)]
        assert 0 < len(lost) < len(outcomes)
        assert all("where" in str(e) and "test_distributed_nodes.py" in str(e) for e in lost)

        # The pool replaced the lost replica at once, on the node left: once it has
        # started, calls go round both replicas again.
        assert model.replicas == 2
        model.ready(timeout=120)
        (head,) = placed - {worker.node_id}
        assert {_node(model(x)) for _ in range(4)} == {head}
