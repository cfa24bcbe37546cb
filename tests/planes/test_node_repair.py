"""Node auto repair as EKS receives it: on the NodeGroup pulumi-eks creates (through a transform the
engine applies to the component's children), with a threshold that still repairs a one-node group."""

from __future__ import annotations

import pytest
from support.plans import plan

NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"


def eks_repairs(config: dict, unhealthy: int, nodes: int) -> bool:
    """EKS's rule (NodeRepairConfig): repair actions stop when the unhealthy nodes are *above* the
    threshold, given as a count or as a percentage of the group."""
    if not config.get("enabled"):
        return False
    if "maxUnhealthyNodeThresholdCount" in config:
        return unhealthy <= config["maxUnhealthyNodeThresholdCount"]
    return 100 * unhealthy / nodes <= config["maxUnhealthyNodeThresholdPercentage"]


def created_node_group(run, name: str) -> dict:
    """The NodeGroup pulumi-eks registers inside the stack's ManagedNodeGroup, as EKS gets it."""
    (child,) = [r for r in run.by_type(NODE_GROUP) if r.name == name]
    return child.inputs


@pytest.mark.parametrize(("stack", "group", "nodes"), [("dev", "gpu-gpu", 1), ("prod", "gpu-p5", 2)])
def test_eks_gets_a_repair_config_that_acts_on_one_bad_node(stack, group, nodes, dev_plan, prod_plan):
    run = {"dev": dev_plan, "prod": prod_plan}[stack]
    config = created_node_group(run, group)["nodeRepairConfig"]
    assert config["enabled"] and config["maxParallelNodesRepairedCount"] == 1
    assert eks_repairs(config, unhealthy=1, nodes=nodes)  # dev's only GPU node is repaired
    assert not eks_repairs(config, unhealthy=nodes, nodes=nodes) or nodes == 1  # a whole group is a person's


def test_the_rule_sees_why_a_percentage_never_repairs_a_one_node_group():
    assert not eks_repairs({"enabled": True, "maxUnhealthyNodeThresholdPercentage": 50}, 1, 1)


@pytest.mark.parametrize(("nodes", "threshold"), [(1, 1), (2, 1), (3, 1), (4, 2), (16, 8)])
def test_more_than_half_a_group_unhealthy_stops_repairs(nodes, threshold):
    run = plan("dev", gpuNodeGroups=[{"name": "gpu", "instanceType": "g6.xlarge", "nodeCount": nodes}])
    config = created_node_group(run, "gpu-gpu")["nodeRepairConfig"]
    assert config["maxUnhealthyNodeThresholdCount"] == threshold
    assert eks_repairs(config, threshold, nodes) and not eks_repairs(config, threshold + 1, nodes)


def test_auto_repair_off_leaves_the_node_group_without_it():
    run = plan(
        "dev",
        gpuNodeGroups=[{"name": "gpu", "instanceType": "g6.xlarge", "nodeCount": 1, "autoRepair": False}],
    )
    assert "nodeRepairConfig" not in created_node_group(run, "gpu-gpu")
    assert created_node_group(run, "gpu-gpu")["nodeGroupName"] == "trainstack-dev-gpu"
