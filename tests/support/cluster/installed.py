"""A control plane of its own for a scenario in which the stack installs operators: pods in `probed`
namespaces run as their programs (support/cluster/pods.py) on addresses of a pod range local to this
machine, and the charts come from a chart repository on loopback."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from dataclasses import dataclass

from support.cluster.chart_repository import ChartRepository
from support.cluster.harness import Cluster
from support.cluster.pods import OperatorPods, local_pod_range


@dataclass
class InstallCluster:
    cluster: Cluster
    charts: ChartRepository
    pods: OperatorPods
    pod_ranges: Iterator[str]  # a /24 per node, from the scenario's /20


@contextlib.contextmanager
def install_cluster(
    tmp_path_factory, name: str, octet: int, probed: tuple[str, ...], charts: tuple[str, ...]
):
    """The cluster, started, with its chart repository and operator pods; stopped when the block ends.
    `octet`: the scenario's own 10.<octet>.0.0/16, so two scenarios on one machine never share a range
    (and two harnesses on one machine take different /20s of it)."""
    block = random.randrange(16)
    cluster = Cluster(tmp_path_factory.mktemp(f"{name}-cluster"), probed=probed)
    repository = pods = None
    with local_pod_range(f"10.{octet}.{16 * block}.0/20"):
        try:
            cluster.start()
            repository = ChartRepository(tmp_path_factory.mktemp("charts"), charts)
            repository.start()
            pods = OperatorPods(
                cluster.api, cluster.kubeconfig, cluster.processes, tmp_path_factory.mktemp("pods"), probed
            )
            pods.start()
            yield InstallCluster(
                cluster, repository, pods, iter(f"10.{octet}.{16 * block + i}.0/24" for i in range(16))
            )
        finally:
            if pods is not None:
                pods.stop()
            if repository is not None:
                repository.stop()
            cluster.stop()
