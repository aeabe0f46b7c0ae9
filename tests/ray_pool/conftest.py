"""One Ray cluster for the package's tests: three nodes of one machine, with different resources.

The head has one CPU and no label; ``node_a`` and ``node_b`` have one CPU each and a custom resource of their own, so
that workers can be pinned to a node (and lost with it). The cluster lives for the whole package: starting one costs
seconds. ``pool`` is the pool an env with ``evaluator="ray"`` and the session's ``cache_dir`` uses (one cpu worker per
CPU, three), so that the tests share its warm workers and the session's compile cache.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cudagym.ray_pool import RayEvaluatorFactory, RayPool
from cudagym.ray_pool.client import shared_pool

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402


@dataclass
class RayCluster:
    """The running cluster and its labelled worker nodes (``nodes[label]``)."""

    cluster: Any
    nodes: dict[str, Any]

    def add(self, label: str) -> Any:
        """Adds a node of one CPU carrying the resource ``label``."""
        node = self.cluster.add_node(num_cpus=1, resources={label: 1})
        self.nodes[label] = node
        self.cluster.wait_for_nodes()
        return node


@pytest.fixture(scope="package")
def ray_cluster() -> Iterator[RayCluster]:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False, configure_logging=False)
    started = RayCluster(cluster, {})
    started.add("node_a")
    started.add("node_b")
    yield started
    from cudagym.ray_pool import shutdown_pools

    shutdown_pools()
    ray.shutdown()
    cluster.shutdown()


@pytest.fixture(scope="package")
def ray_factory(ray_cluster: RayCluster, cache_dir: Path) -> RayEvaluatorFactory:
    """What ``gym.make(..., evaluator="ray", cache_dir=cache_dir)`` builds."""
    return RayEvaluatorFactory(cache_dir=str(cache_dir))


@pytest.fixture(scope="package")
def pool(ray_factory: RayEvaluatorFactory) -> RayPool:
    """The process's pool of ``ray_factory`` for cpu envs (stopped with the cluster)."""
    return shared_pool(ray_factory, "cpu")
