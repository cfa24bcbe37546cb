"""Compute plane under the mock engine, the node groups: the system group and the GPU groups, their
launch templates, EFA interfaces, AZs, placement groups, capacity types, sizes and node repair."""

from __future__ import annotations

from collections import Counter

import pytest
from support.compute import CAPACITY_BLOCK_FACTS, NG, SUBNET, efa_group, gpu_template
from support.plans import plan

from config import EKS_ADDON_VERSIONS
from offline.engine import EKS_CLUSTER_SECURITY_GROUP

PROD_P5 = {
    "name": "p5",
    "instanceType": "p5.48xlarge",
    "nodeCount": 2,
    "efa": True,
    "placementGroup": True,
    "diskSizeGiB": 1000,
}


def efa_plan(instance_type: str, **fields):
    return plan("dev", jobs=[], gpuNodeGroups=[efa_group(instance_type, **fields)])


def test_system_node_group(prod_plan):
    ng = prod_plan.one(NG, "eks-system").inputs
    assert ng["amiType"] == "AL2023_x86_64_STANDARD"
    assert ng["instanceTypes"] == ["m6i.large"]
    assert ng["scalingConfig"] == {"minSize": 2, "desiredSize": 2, "maxSize": 4}
    assert ng["labels"] == {"trainstack.dev/role": "system"}


def test_node_role_has_only_the_minimum_policies(dev_plan):
    attached = {
        r.inputs["policyArn"] for r in dev_plan.by_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
    }
    assert attached == {
        "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
        "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy",
        "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryPullOnly",
    }


def test_dev_gpu_node_group_without_efa(dev_plan):
    ng = dev_plan.one(NG, "gpu-gpu").inputs
    assert ng["amiType"] == "AL2023_x86_64_NVIDIA"
    assert ng["instanceTypes"] == ["g6.xlarge"]
    assert ng["capacityType"] == "ON_DEMAND"
    assert ng["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}]
    assert ng["labels"] == {
        "trainstack.dev/role": "gpu",
        "k8s.amazonaws.com/accelerator": "nvidia-l4",
        "trainstack.dev/node-group": "gpu",
        "trainstack.dev/instance-type": "g6.xlarge",
        "trainstack.dev/accelerator": "nvidia-l4",
        "nvidia.com/gpu.present": "true",  # what the NVIDIA device plugin's chart selects
        "trainstack.dev/health-mode": "passive",  # a g6: watched by the health gate, not burnt in
    }
    assert ng["launchTemplate"] == {"id": "gpu-gpu-lt-id", "version": "1"}
    lt = gpu_template(dev_plan).inputs
    assert "networkInterfaces" not in lt and "placement" not in lt
    assert lt["blockDeviceMappings"][0]["ebs"]["volumeSize"] == 200
    assert lt["metadataOptions"]["httpTokens"] == "required"
    assert dev_plan.by_type("aws:ec2/securityGroup:SecurityGroup") == []
    assert dev_plan.outputs["gpuNodeGroups"]["gpu"]["efaInterfacesPerNode"] == 0


@pytest.mark.parametrize(
    ("instance_type", "efa_count"),
    [("p5.48xlarge", 32), ("p5en.48xlarge", 16), ("p4d.24xlarge", 4), ("g6e.48xlarge", 4)],
)
def test_efa_interface_layout(instance_type, efa_count):
    run = efa_plan(instance_type)
    interfaces = gpu_template(run).inputs["networkInterfaces"]
    efa = [i for i in interfaces if i["interfaceType"] == "efa-only"]
    assert len(efa) == efa_count
    # ENA primary on card 0 / device 0, efa-only on card 0 / device 1, then device 0 of each other card.
    assert interfaces[0] == {
        "networkCardIndex": 0,
        "deviceIndex": 0,
        "interfaceType": "interface",
        # The security group EKS created for the cluster (not pulumi-eks's): without it nodes whose
        # template names security groups cannot reach the control plane and never join.
        "securityGroups": [EKS_CLUSTER_SECURITY_GROUP, "gpu-efa-efa-id"],
        "deleteOnTermination": "true",
    }
    assert (interfaces[1]["networkCardIndex"], interfaces[1]["deviceIndex"]) == (0, 1)
    assert [(i["networkCardIndex"], i["deviceIndex"]) for i in interfaces[2:]] == [
        (c, 0) for c in range(1, efa_count)
    ]
    assert all("associatePublicIpAddress" not in i for i in interfaces)
    assert run.outputs["gpuNodeGroups"]["efa"]["efaInterfacesPerNode"] == efa_count
    assert run.one(NG, "gpu-efa").inputs["labels"]["vpc.amazonaws.com/efa.present"] == "true"


def test_efa_nodes_share_one_subnet_in_one_az(prod_plan):
    ng = prod_plan.one(NG, "gpu-p5")
    (subnet_id,) = ng.inputs["subnetIds"]
    subnet = prod_plan.one(SUBNET, subnet_id.removesuffix("-id"))
    # The offline engine, like EC2, offers p5 in some AZs only (c, d, f); the first private subnet
    # (us-east-1a) would never get a node.
    assert subnet.inputs["availabilityZone"] == "us-east-1c"
    assert "private" in subnet.name


def test_a_gpu_type_missing_from_the_vpc_zones_adds_its_zone():
    run = plan("dev", jobs=[], gpuNodeGroups=[{"name": "p5", "instanceType": "p5.48xlarge"}])
    zones = sorted(s.inputs["availabilityZone"] for s in run.by_type(SUBNET) if "private" in s.name)
    assert zones == ["us-east-1a", "us-east-1b", "us-east-1c"]
    (subnet_id,) = run.one(NG, "gpu-p5").inputs["subnetIds"]
    assert run.one(SUBNET, subnet_id.removesuffix("-id")).inputs["availabilityZone"] == "us-east-1c"


def test_a_named_zone_is_used_when_offered_and_refused_when_not():
    run = efa_plan("p5.48xlarge", availabilityZone="us-east-1f")
    (subnet_id,) = run.one(NG, "gpu-efa").inputs["subnetIds"]
    assert run.one(SUBNET, subnet_id.removesuffix("-id")).inputs["availabilityZone"] == "us-east-1f"
    with pytest.raises(Exception) as err:
        efa_plan("p5.48xlarge", availabilityZone="us-east-1a")
    assert (
        "trainstack:gpuNodeGroups[0].availabilityZone = us-east-1a: EC2 does not offer p5.48xlarge "
        "there; allowed: us-east-1c, us-east-1d, us-east-1f"
    ) in str(err.value)


def test_existing_vpc_needs_a_subnet_where_the_type_is_offered():
    network = {
        "existingVpcId": "vpc-0123456789abcdef0",
        "existingPrivateSubnetIds": ["subnet-0aaaaaaaaaaaaaaaa", "subnet-0bbbbbbbbbbbbbbbb"],
    }
    with pytest.raises(Exception) as err:
        plan("dev", network=network, jobs=[], gpuNodeGroups=[{"name": "p5", "instanceType": "p5.48xlarge"}])
    assert "trainstack:gpuNodeGroups[0].instanceType = p5.48xlarge: not offered in any AZ" in str(err.value)


def test_efa_security_group_references_itself(prod_plan):
    sg = prod_plan.one("aws:ec2/securityGroup:SecurityGroup")
    ingress = prod_plan.one("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")
    egress = prod_plan.one("aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule")
    for rule in (ingress, egress):
        assert rule.inputs["ipProtocol"] == "-1"
        assert rule.inputs["securityGroupId"] == rule.inputs["referencedSecurityGroupId"] == f"{sg.name}-id"
        assert sg.urn in rule.dependencies
    assert sg.inputs["vpcId"] == "vpc-id"


def test_placement_group_is_cluster_strategy_and_optional(prod_plan):
    pg = prod_plan.one("aws:ec2/placementGroup:PlacementGroup")
    assert pg.inputs["strategy"] == "cluster"
    # The group is autonamed: the template receives the name the provider gave it.
    assert gpu_template(prod_plan).inputs["placement"]["groupName"].startswith(f"{pg.name}-")
    assert pg.urn in gpu_template(prod_plan).dependencies
    run = efa_plan("p5.48xlarge", placementGroup=False)
    assert run.by_type("aws:ec2/placementGroup:PlacementGroup") == []
    assert "placement" not in gpu_template(run).inputs


def test_capacity_block_wiring():
    run = plan(
        "dev",
        facts=CAPACITY_BLOCK_FACTS,
        jobs=[],
        gpuNodeGroups=[
            efa_group(
                "p5.48xlarge",
                capacityType="CAPACITY_BLOCK",
                capacityReservationId="cr-0123456789abcdef0",
                availabilityZone="us-east-1d",
            )
        ],
    )
    lt = gpu_template(run).inputs
    assert lt["instanceType"] == "p5.48xlarge"
    assert lt["instanceMarketOptions"] == {"marketType": "capacity-block"}
    assert lt["capacityReservationSpecification"] == {
        "capacityReservationTarget": {"capacityReservationId": "cr-0123456789abcdef0"}
    }
    ng = run.one(NG, "gpu-efa").inputs
    assert ng["capacityType"] == "CAPACITY_BLOCK"
    assert "instanceTypes" not in ng
    # EKS scales the group to zero before the block ends: min 0, and its desired size is not drift.
    assert ng["scalingConfig"] == {"minSize": 0, "desiredSize": 2, "maxSize": 2}
    assert ng["ignoreScalingChanges"] is True
    (subnet_id,) = ng["subnetIds"]
    assert run.one(SUBNET, subnet_id.removesuffix("-id")).inputs["availabilityZone"] == "us-east-1d"
    assert run.by_type("aws:ec2/placementGroup:PlacementGroup") == []


def test_spot_and_disk_size():
    run = plan(
        "dev",
        jobs=[],
        gpuNodeGroups=[
            {"name": "spot", "instanceType": "g5.xlarge", "capacityType": "SPOT", "diskSizeGiB": 500}
        ],
    )
    assert run.one(NG, "gpu-spot").inputs["capacityType"] == "SPOT"
    assert gpu_template(run).inputs["blockDeviceMappings"][0]["ebs"]["volumeSize"] == 500
    assert "instanceMarketOptions" not in gpu_template(run).inputs


def test_several_node_groups():
    run = plan(
        "dev",
        jobs=[],
        gpuNodeGroups=[
            {"name": "a", "instanceType": "g6.xlarge"},
            {"name": "b", "instanceType": "g6e.48xlarge", "efa": True, "nodeCount": 2},
        ],
    )
    names = Counter(r.inputs["nodeGroupName"] for r in run.by_type(NG))
    assert names == Counter({"trainstack-dev-system": 1, "trainstack-dev-a": 1, "trainstack-dev-b": 1})
    assert run.outputs["gpuNodeGroups"]["b"] == {
        "nodeGroupName": "trainstack-dev-b",
        "instanceType": "g6e.48xlarge",
        "nodes": 2,
        "minNodes": 0,
        "autoscaled": True,
        "gpusPerNode": 8,
        "efaInterfacesPerNode": 4,
    }


@pytest.mark.parametrize("version", sorted(EKS_ADDON_VERSIONS))
def test_gpu_node_groups_follow_the_cluster_version(version):
    run = plan("prod", cluster={"kubernetesVersion": version})
    assert run.one(NG, "gpu-p5").inputs["version"] == version
    assert run.one("eks:index:Cluster").inputs["version"] == version


def test_on_demand_groups_start_at_their_floor_and_leave_the_size_to_the_autoscaler(prod_plan):
    ng = prod_plan.one(NG, "gpu-p5").inputs
    assert ng["scalingConfig"] == {"minSize": 0, "desiredSize": 0, "maxSize": 2}
    # The autoscaler changes the desired size: a later `pulumi up` must not set it back.
    assert ng["ignoreScalingChanges"] is True
    floor = plan("prod", gpuNodeGroups=[{**PROD_P5, "minNodes": 1}]).one(NG, "gpu-p5").inputs
    assert floor["scalingConfig"] == {"minSize": 1, "desiredSize": 1, "maxSize": 2}


def test_pods_cannot_reach_the_node_role_through_imds(prod_plan):
    options = gpu_template(prod_plan).inputs["metadataOptions"]
    assert options == {"httpTokens": "required", "httpPutResponseHopLimit": 1, "httpEndpoint": "enabled"}


def test_gpu_groups_get_node_auto_repair_unless_turned_off(prod_plan):
    """pulumi-eks's Python SDK has no node repair argument: a transform puts EKS's
    nodeRepairConfig on the NodeGroup it creates."""
    import pulumi

    ng = prod_plan.one(NG, "gpu-p5")
    (transform,) = ng.transforms
    args = pulumi.ResourceTransformArgs(
        custom=True, type_="aws:eks/nodeGroup:NodeGroup", name="gpu-p5", props={"nodeGroupName": "x"},
        opts=pulumi.ResourceOptions(),
    )  # fmt: skip
    repaired = transform(args).props
    assert repaired["nodeRepairConfig"] == {
        "enabled": True,
        "maxParallelNodesRepairedCount": 1,
        "maxUnhealthyNodeThresholdCount": 1,
    }  # fmt: skip  (prod's p5 group: 2 nodes, repairs stop above 1 unhealthy)
    assert repaired["nodeGroupName"] == "x"
    other = pulumi.ResourceTransformArgs(
        custom=True,
        type_="aws:ec2/launchTemplate:LaunchTemplate",
        name="lt",
        props={},
        opts=pulumi.ResourceOptions(),
    )
    assert transform(other) is None
    off = plan("prod", gpuNodeGroups=[{**PROD_P5, "autoRepair": False}])
    assert off.one(NG, "gpu-p5").transforms == []
