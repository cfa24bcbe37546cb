"""The harness's waits: a node it returns, or a node change it has waited on, is one the real
scheduler already knows, so a pod's first scheduling attempt is made against it. A pod tried
against an older copy is found unschedulable first (a FailedScheduling event) and bound only when
the node's event reaches the scheduler: the agreement test would read that as a disagreement."""

from __future__ import annotations

import signal

import pytest
from support.cluster.harness import CLUSTER_GROUP

from offline.nodes import Node

pytestmark = CLUSTER_GROUP

NAMESPACE = "harness"


@pytest.fixture
def nodes(cluster):
    node = Node(
        group="harness-pool",
        instance_type=None,
        max_nodes=2,
        labels={"pool": "harness"},
        taints=[],
        allocatable={"cpu": 2000, "memory": 4},
    )
    names = cluster.add_nodes(node)
    yield names
    cluster.remove_nodes(names)


@pytest.fixture
def namespace(cluster, nodes):
    """Removed before the nodes, so kwok ends its pods (on a removed node, only the pod GC would)."""
    cluster.core.create_namespace({"metadata": {"name": NAMESPACE}})
    cluster.wait(
        "default ServiceAccount",
        lambda: bool(
            cluster.core.list_namespaced_service_account(
                NAMESPACE, field_selector="metadata.name=default"
            ).items
        ),
    )
    yield NAMESPACE
    cluster.delete_namespace(NAMESPACE)


def _first_attempt_binds(cluster, namespace: str, name: str, node_selector: dict[str, str]) -> list[str]:
    """Sends a pod with no tolerations; answers the scheduler's FailedScheduling messages for it once
    it is bound."""
    cluster.core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": name},
            "spec": {"nodeSelector": node_selector, "containers": [{"name": "c", "image": "x"}]},
        },
    )
    cluster.wait(f"{name} bound", lambda: cluster.core.read_namespaced_pod(name, namespace).spec.node_name)
    events = cluster.core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}")
    return [e.message for e in events.items if e.reason == "FailedScheduling"]


def test_a_pod_sent_once_nodes_are_added_and_changed_is_bound_at_its_first_attempt(cluster, nodes, namespace):
    # No toleration of the not-ready taint the API server puts on a new node: it must be gone.
    assert _first_attempt_binds(cluster, namespace, "new-node", {"kubernetes.io/hostname": nodes[0]}) == []
    # The scheduler stopped: a changed node cannot reach its cache, and the wait says so.
    scheduler = dict(cluster.processes.running)["kube-scheduler"]
    scheduler.send_signal(signal.SIGSTOP)
    try:
        cluster.core.patch_node(nodes[1], {"metadata": {"labels": {"pool": "changed"}}})
        with pytest.raises(TimeoutError, match="the scheduler's cache up to date"):
            cluster.scheduler_has_seen([nodes[1]], timeout=3)
    finally:
        scheduler.send_signal(signal.SIGCONT)
    cluster.scheduler_has_seen([nodes[1]])
    assert _first_attempt_binds(cluster, namespace, "changed-node", {"pool": "changed"}) == []
