"""A cluster that runs the EFA device plugin and no NVIDIA one: the EFA chart
(../shared/charts/aws-efa-k8s-device-plugin-v0.5.30) installed by the real `helm install`, as a
platform team installs it, its DaemonSet's pods running on the `existing` template's p5 nodes (kwok
nodes as the plan describes them), which then advertise their EFA interfaces and no GPU. The
program's own read and decisions before an `up` (planes/operators.py existing_operators) reuse that
plugin and install the NVIDIA one: the EFA plugin's image repository, `aws-efa-k8s-device-plugin`,
contains `k8s-device-plugin`, and operators are told apart by whole repository
(account_checks/cluster_inventory.py runs_image, image_repository; operator_decisions.py SIGNS). The
mock engine's version: tests/planes/test_existing_operators.py
test_the_efa_device_plugin_is_not_taken_for_the_nvidia_one.

A control plane of its own: the session's runs no EFA plugin, and the stack's NVIDIA plugin runs
there in other scenarios."""

from __future__ import annotations

import pulumi
import pytest
from support.charts import run_helm
from support.cluster.decisions import decide, existing_cluster, existing_config
from support.cluster.harness import OWN_CLUSTER_GROUP, Cluster
from support.cluster_objects import GPU_OPERATOR_DEPLOY_LABEL, GPU_OPERATOR_PLUGIN

from conventions import EFA_RESOURCE, GPU_RESOURCE, SYSTEM_GROUP
from offline.nodes import charts_dir

pytestmark = OWN_CLUSTER_GROUP

RELEASE, NAMESPACE = "efa", "kube-system"  # not the stack's own release name
CHART = "aws-efa-k8s-device-plugin-v0.5.30"
EFA_PLUGIN = (
    "DaemonSet kube-system/efa-aws-efa-k8s-device-plugin "
    "(image 602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/aws-efa-k8s-device-plugin:v0.5.20, "
    "Helm release efa in kube-system)"
)


def helm_install(cluster: Cluster) -> None:
    run_helm(
        "install",
        RELEASE,
        str(charts_dir() / CHART),
        "--namespace",
        NAMESPACE,
        "--kubeconfig",
        str(cluster.kubeconfig),
    )


def advertised(cluster: Cluster, node: str) -> dict[str, str]:
    allocatable = cluster.core.read_node(node).status.allocatable or {}
    return {r: allocatable[r] for r in (GPU_RESOURCE, EFA_RESOURCE) if r in allocatable}


@pytest.fixture(scope="module")
def efa_only(tmp_path_factory):
    """The cluster with its system and p5 nodes and the EFA chart; its p5 nodes."""
    with existing_cluster(tmp_path_factory.mktemp("efa-cluster")) as (cluster, stack):
        (p5,) = [n for n in stack.nodes if n.group != SYSTEM_GROUP]
        nodes = cluster.add_nodes(p5)
        helm_install(cluster)
        cluster.wait(
            "EFA advertised by the chart's plugin",
            lambda: all(EFA_RESOURCE in advertised(cluster, n) for n in nodes),
            120,
        )
        yield cluster, nodes, p5


def test_the_efa_plugin_is_reused_and_the_nvidia_plugin_installed(efa_only, monkeypatch):
    cluster, nodes, p5 = efa_only
    # What a GPU job needs of the nodes: their EFA interfaces are served, their GPUs not yet.
    for node in nodes:
        assert advertised(cluster, node) == {EFA_RESOURCE: str(p5.extended[EFA_RESOURCE])}
    logged: list[str] = []
    monkeypatch.setattr(pulumi.log, "info", lambda message, *args, **kwargs: logged.append(message))
    decide(existing_config(cluster))
    (report,) = [m for m in logged if m.startswith("Cluster operators")]
    lines = report.splitlines()
    # The release read from the Secret the real helm wrote (its metadata only).
    assert lines[0] == "Cluster operators (1 Helm release(s) in the stack's release namespaces):"
    assert "  install  nvidiaDevicePlugin: found nothing" in lines
    assert f"  reuse    efaDevicePlugin: found {EFA_PLUGIN}" in lines


def test_the_gpu_operators_plugin_serves_the_nodes_it_labelled_and_is_reused(efa_only):
    """The GPU Operator's plugin on the same cluster, its nodes labelled as the operator labels them:
    the program's read finds that it serves the p5 group's nodes (the nodes' own labels, not the
    config's) and reuses it, where it was refused for selecting a label the config does not carry."""
    cluster, nodes, _ = efa_only
    for node in nodes:
        cluster.core.patch_node(node, {"metadata": {"labels": {GPU_OPERATOR_DEPLOY_LABEL: "true"}}})
    cluster.objects.apply(GPU_OPERATOR_PLUGIN)
    decisions = decide(existing_config(cluster))
    assert decisions["nvidiaDevicePlugin"].action == "reuse"
    assert decisions["nvidiaDevicePlugin"].problem is None
    assert "nvidia-device-plugin-daemonset" in decisions["nvidiaDevicePlugin"].found
