"""The session's cluster (tests/support/cluster/). Every test module here on it marks itself with the
xdist group `cluster` (CLUSTER_GROUP), so `--dist loadgroup` runs them on one worker against one
control plane, one after another; those that start a control plane of their own are the group
`cluster-own` (OWN_CLUSTER_GROUP), on another worker at the same time."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.cluster.harness import Cluster

HERE = Path(__file__).parent
# The session's cluster while it runs; None once stopped early (`pytest_runtest_teardown`).
_running: dict[str, Cluster | None] = {}


@pytest.fixture(scope="session")
def cluster(tmp_path_factory) -> Cluster:
    c = Cluster(tmp_path_factory.mktemp("cluster"))
    _running["session"] = c
    try:
        c.start()
        yield c
    finally:
        c.stop()


def pytest_runtest_setup(item):
    if "session" in _running and _running["session"] is None and "cluster" in item.fixturenames:
        pytest.fail(
            "the session's cluster was stopped after the last cluster test before this one: run the cluster tests together"
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """After the last cluster test (the next test is not one, or none is left), once its fixtures are
    torn down, the control plane stops rather than at the end of the session: idle, it takes about
    a tenth of a core from the rest of the suite for the rest of the run."""
    result = yield
    if _running.get("session") is not None and (nextitem is None or HERE not in nextitem.path.parents):
        _running["session"].stop()
        _running["session"] = None
    return result


# No node carries it: the operators' own pods (kwok's) wait; their processes run beside the cluster.
OPERATOR_NODES = {"trainstack.test/pool": "operators"}


@pytest.fixture(scope="session")
def operators(cluster: Cluster) -> None:
    """The operators the stack installs, running (started once per cluster, in the stack's order)."""
    cluster.operators.start_all(OPERATOR_NODES)
