"""The session's cluster (tests/support/cluster/). Every test module here marks itself with the
xdist group `cluster` (CLUSTER_GROUP), so `--dist loadgroup` runs them on one worker against one
control plane."""

from __future__ import annotations

import pytest
from support.cluster.harness import Cluster


@pytest.fixture(scope="session")
def cluster(tmp_path_factory) -> Cluster:
    c = Cluster(tmp_path_factory.mktemp("cluster"))
    try:
        c.start()
        yield c
    finally:
        c.stop()


# No node carries it: the operators' own pods (kwok's) wait; their processes run beside the cluster.
OPERATOR_NODES = {"trainstack.test/pool": "operators"}


@pytest.fixture(scope="session")
def operators(cluster: Cluster) -> None:
    """The operators the stack installs, running (started once per cluster, in the stack's order)."""
    cluster.operators.start_all(OPERATOR_NODES)
