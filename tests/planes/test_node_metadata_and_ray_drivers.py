"""Pods never reach a node's role: every node group, the system one included, runs IMDSv2 with a hop
limit of 1 (without a launch template EKS sets 2, and Ray heads, submitters and the operators run on
the system nodes), and a RayJob's entrypoint (the job's own code) runs on a worker, never the head."""

from __future__ import annotations

from offline.engine import PlanRun

LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
HOP_1 = {"httpTokens": "required", "httpPutResponseHopLimit": 1, "httpEndpoint": "enabled"}


def test_every_node_group_has_a_launch_template_with_hop_limit_one(prod_plan: PlanRun):
    groups = prod_plan.by_type("eks:index:ManagedNodeGroup")
    templates = {t.name: t.inputs for t in prod_plan.by_type(LAUNCH_TEMPLATE)}
    assert {g.name for g in groups} == {"eks-system", "gpu-p5"}
    for group in groups:
        template = templates[f"{group.name}-lt"]
        assert template["metadataOptions"] == HOP_1, group.name
        assert "launchTemplate" in group.inputs, group.name
        assert "diskSize" not in group.inputs  # EKS refuses diskSize beside a launch template
    system = templates["eks-system-lt"]
    (root,) = system["blockDeviceMappings"]
    assert root["deviceName"] == "/dev/xvda" and root["ebs"]["volumeSize"] == 50
    assert root["ebs"]["encrypted"] == "true" and root["ebs"]["volumeType"] == "gp3"
    # With a template pulumi-eks sets no version: the cluster's, so an upgrade rolls these nodes too.
    assert prod_plan.one("eks:index:ManagedNodeGroup", "eks-system").inputs["version"] == "1.36"


def test_a_rayjobs_entrypoint_asks_for_a_cpu_only_workers_have(kinds_plan: PlanRun):
    rayjobs = [r for r in kinds_plan.by_type("kubernetes:ray.io/v1:RayJob")]
    assert rayjobs
    for rayjob in rayjobs:
        spec = rayjob.inputs["spec"]
        assert spec["entrypointNumCpus"] == 1
        assert spec["rayClusterSpec"]["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
        for group in spec["rayClusterSpec"]["workerGroupSpecs"]:
            assert "num-cpus" not in group["rayStartParams"]  # Ray counts the pod's CPUs
