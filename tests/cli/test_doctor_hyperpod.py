"""`trainstack doctor` on a SageMaker HyperPod cluster: it reads HyperPod's health labels and taint on
the nodes, says what an unhealthy state means, which job pods it hits and what to do."""

from __future__ import annotations

import json
from pathlib import Path

from support.fake_cluster import healthy, node, run
from support.kube_server import FakeCluster

from conventions import HYPERPOD_CLUSTER_LABEL, HYPERPOD_DEEP_HEALTH_LABEL, HYPERPOD_HEALTH_LABEL

HEALTH, DEEP = "node health (HyperPod)", "deep health checks (HyperPod)"


def hyperpod_node(name: str, health: str = "Schedulable", deep: str | None = "Passed") -> dict:
    n = node(name, None)
    n["metadata"]["labels"] |= {
        HYPERPOD_HEALTH_LABEL: health,
        HYPERPOD_CLUSTER_LABEL: "sagemaker-test-cluster",
        "node.kubernetes.io/instance-type": "ml.g5.8xlarge",
    }
    if deep:
        n["metadata"]["labels"][HYPERPOD_DEEP_HEALTH_LABEL] = deep
    if health != "Schedulable":  # HyperPod's taint on an unhealthy node
        n["spec"] = {
            "taints": [{"key": HYPERPOD_HEALTH_LABEL, "value": "Unschedulable", "effect": "NoSchedule"}]
        }
    return n


def hyperpod_cluster(*nodes: dict) -> FakeCluster:
    c = healthy()
    c.nodes = [*c.nodes, *nodes]
    for i, pod in enumerate(c.pods):  # fsdp's workers run on the first two HyperPod nodes
        pod["spec"]["nodeName"] = nodes[i]["metadata"]["name"]
    return c


def checks(c: FakeCluster, tmp_path: Path) -> dict[str, dict]:
    _, out = run(c, tmp_path, "doctor", "--json")
    return {x["name"]: x for x in json.loads(out)["checks"]}


NODES = ("hyperpod-i-0a1b2c3d4e5f60718", "hyperpod-i-0b1b2c3d4e5f60718", "hyperpod-i-0c1b2c3d4e5f60718")


def test_healthy_hyperpod_nodes_pass_and_a_plain_cluster_has_no_hyperpod_checks(tmp_path):
    found = checks(hyperpod_cluster(*(hyperpod_node(n) for n in NODES)), tmp_path)
    assert found[HEALTH] == {"name": HEALTH, "ok": True, "detail": "3/3 Schedulable", "fix": ""}
    assert found[DEEP]["ok"] and found[DEEP]["detail"] == "3/3 passed"
    assert HEALTH not in checks(healthy(), tmp_path)


def test_a_node_pending_replacement_names_its_job_pod_and_the_replace_call(tmp_path):
    c = hyperpod_cluster(
        hyperpod_node(NODES[0]),
        hyperpod_node(NODES[1], "UnschedulablePendingReplacement", "Failed"),
        hyperpod_node(NODES[2]),
    )
    found = checks(c, tmp_path)
    health = found[HEALTH]
    assert not health["ok"]
    assert health["detail"] == (
        f"2/3 Schedulable; {NODES[1]} failed a health check and awaits replacement, tainted "
        f"{HYPERPOD_HEALTH_LABEL}=Unschedulable:NoSchedule (no new pod lands there); "
        "job pods on it: fsdp-worker-1"
    )
    assert (
        f"HyperPod's automatic node recovery will replace {NODES[1]}; with node recovery None: "
        "aws sagemaker batch-replace-cluster-nodes --cluster-name sagemaker-test-cluster "
        "--node-ids i-0b1b2c3d4e5f60718"
    ) in health["fix"]
    assert "auto-resume restarts from its newest checkpoint" in health["fix"]
    assert not found[DEEP]["ok"] and found[DEEP]["detail"] == f"2/3 passed; failed on {NODES[1]}"


def test_a_node_pending_reboot_and_one_in_deep_checks(tmp_path):
    c = hyperpod_cluster(
        hyperpod_node(NODES[0], "UnschedulablePendingReboot"),
        hyperpod_node(NODES[1], "Unschedulable", "InProgress"),
    )
    found = checks(c, tmp_path)
    health = found[HEALTH]
    assert health["detail"].startswith(
        f"0/2 Schedulable; {NODES[0]} failed a health check and awaits a reboot"
    )
    assert f"{NODES[1]} is running deep health checks" in health["detail"]
    assert "aws sagemaker batch-reboot-cluster-nodes --cluster-name sagemaker-test-cluster" in health["fix"]
    assert f"wait for the deep health checks on {NODES[1]}" in health["fix"]
    # In progress is not a failure: the node comes back once they pass.
    assert found[DEEP]["ok"]
    assert (
        found[DEEP]["detail"]
        == f"1/2 passed; in progress on {NODES[1]} (not available to jobs until they finish)"
    )


def test_what_hyperpods_agent_found_on_a_node_is_named(tmp_path):
    """Its health monitoring agent's fault labels, beside node-health-status."""
    faulty = hyperpod_node(NODES[1], "UnschedulablePendingReplacement", "Passed")
    faulty["metadata"]["labels"] |= {
        "sagemaker.amazonaws.com/fault-types": "GpuXid",
        "sagemaker.amazonaws.com/fault-reasons": "XID79",
    }
    found = checks(hyperpod_cluster(hyperpod_node(NODES[0]), faulty, hyperpod_node(NODES[2])), tmp_path)
    assert (
        f"{NODES[1]} failed a health check and awaits replacement (GpuXid: XID79), tainted"
        in found[HEALTH]["detail"]
    )
