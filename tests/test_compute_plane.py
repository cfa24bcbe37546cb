"""Compute plane under the mock engine: VPC, EKS, GPU/EFA node groups, add-ons, pod IAM."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from conftest import plan, policy_of

from stacks.config import EKS_ADDON_VERSIONS

LT = "aws:ec2/launchTemplate:LaunchTemplate"
NG = "eks:index:ManagedNodeGroup"
SUBNET = "aws:ec2/subnet:Subnet"


def efa_group(instance_type: str, **fields) -> dict:
    return {"name": "efa", "instanceType": instance_type, "nodeCount": 2, "efa": True, **fields}


def efa_plan(instance_type: str, **fields):
    return plan("dev", jobs=[], gpuNodeGroups=[efa_group(instance_type, **fields)])


def deps(run, reg) -> set[str]:
    return {u.rsplit("::", 1)[1] for u in reg.dependencies}


def test_network_dev_has_one_nat_prod_one_per_az(dev_plan, prod_plan):
    assert len(dev_plan.by_type("aws:ec2/natGateway:NatGateway")) == 1
    assert len(prod_plan.by_type("aws:ec2/natGateway:NatGateway")) == 3
    private_rts = [r for r in prod_plan.by_type("aws:ec2/routeTable:RouteTable") if "private" in r.name]
    nat_ids = {r.inputs["routes"][0]["natGatewayId"] for r in private_rts}
    assert len(nat_ids) == 3


def test_subnets_are_tagged_for_eks_and_load_balancers(prod_plan):
    subnets = prod_plan.by_type(SUBNET)
    public = [s for s in subnets if "public" in s.name]
    private = [s for s in subnets if "private" in s.name]
    assert len(public) == len(private) == 3
    assert {s.inputs["availabilityZone"] for s in private} == {"us-east-1a", "us-east-1b", "us-east-1c"}
    for s in public:
        assert s.inputs["tags"]["kubernetes.io/role/elb"] == "1"
        assert s.inputs["mapPublicIpOnLaunch"] is False
    for s in private:
        assert s.inputs["tags"]["kubernetes.io/role/internal-elb"] == "1"
        assert s.inputs["tags"]["kubernetes.io/cluster/trainstack-prod"] == "shared"
    cidrs = [s.inputs["cidrBlock"] for s in subnets]
    assert len(set(cidrs)) == len(cidrs)


def test_existing_vpc_creates_no_network():
    run = plan(
        "dev",
        network={
            "existingVpcId": "vpc-0123456789abcdef0",
            "existingPrivateSubnetIds": ["subnet-0aaaaaaaaaaaaaaaa", "subnet-0bbbbbbbbbbbbbbbb"],
            "existingPublicSubnetIds": ["subnet-0cccccccccccccccc"],
        },
    )
    assert run.by_type("aws:ec2/vpc:Vpc") == [] and run.by_type(SUBNET) == []
    cluster = run.one("eks:index:Cluster")
    assert cluster.inputs["vpcId"] == "vpc-0123456789abcdef0"
    assert run.one(NG, "gpu-gpu").inputs["subnetIds"] == ["subnet-0aaaaaaaaaaaaaaaa"]


def test_cluster_properties(prod_plan):
    c = prod_plan.one("eks:index:Cluster").inputs
    assert c["name"] == "trainstack-prod"
    assert c["version"] == "1.33"
    assert c["authenticationMode"] == "API"
    assert c["skipDefaultNodeGroup"] is True
    assert c["deletionProtection"] is True
    assert c["enabledClusterLogTypes"] == ["api", "audit", "authenticator"]
    assert c["encryptionConfigKeyArn"].startswith("arn:aws:kms:")
    assert c["publicAccessCidrs"] == ["203.0.113.0/24"]
    assert c["endpointPrivateAccess"] is True
    assert c["nodeAssociatePublicIpAddress"] is False
    (entry,) = c["accessEntries"].values()
    assert entry["principalArn"] == "arn:aws:iam::123456789012:role/PlatformAdmin"
    policy = entry["accessPolicies"]["cluster-admin"]
    assert policy["policyArn"].endswith(":cluster-access-policy/AmazonEKSClusterAdminPolicy")
    assert policy["accessScope"] == {"type": "cluster"}


def test_dev_cluster_is_deletable(dev_plan):
    assert dev_plan.one("eks:index:Cluster").inputs["deletionProtection"] is False


def test_addons_are_pinned(prod_plan):
    versions = EKS_ADDON_VERSIONS["1.33"]
    c = prod_plan.one("eks:index:Cluster").inputs
    assert c["vpcCniOptions"]["addonVersion"] == versions["vpc-cni"]
    assert c["corednsAddonOptions"]["version"] == versions["coredns"]
    assert c["kubeProxyAddonOptions"]["version"] == versions["kube-proxy"]
    agent = prod_plan.one("aws:eks/addon:Addon")
    assert agent.inputs["addonName"] == "eks-pod-identity-agent"
    assert agent.inputs["addonVersion"] == versions["eks-pod-identity-agent"]


@pytest.mark.parametrize("k8s", sorted(EKS_ADDON_VERSIONS))
def test_vpc_cni_understands_efa_only(k8s):
    major, minor, patch = (
        int(x) for x in EKS_ADDON_VERSIONS[k8s]["vpc-cni"].lstrip("v").split("-")[0].split(".")
    )
    assert (major, minor, patch) >= (1, 18, 4)


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
        "trainstack.dev/node-group": "gpu",
        "trainstack.dev/instance-type": "g6.xlarge",
        "trainstack.dev/accelerator": "nvidia-l4",
    }
    assert ng["launchTemplate"] == {"id": "gpu-gpu-lt-id", "version": "1"}
    lt = dev_plan.one(LT).inputs
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
    interfaces = run.one(LT).inputs["networkInterfaces"]
    efa = [i for i in interfaces if i["interfaceType"] == "efa-only"]
    assert len(efa) == efa_count
    # ENA primary on card 0 / device 0, efa-only on card 0 / device 1, then device 0 of each other card.
    assert interfaces[0] == {
        "networkCardIndex": 0,
        "deviceIndex": 0,
        "interfaceType": "interface",
        "securityGroups": ["sg-0c1a2b3c4d5e6f708", "gpu-efa-efa-id"],  # cluster SG + EFA SG
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
    assert subnet.inputs["availabilityZone"] == "us-east-1a"
    assert "private" in subnet.name


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
    assert prod_plan.one(LT).inputs["placement"]["groupName"].startswith(f"{pg.name}-")
    assert pg.urn in prod_plan.one(LT).dependencies
    run = efa_plan("p5.48xlarge", placementGroup=False)
    assert run.by_type("aws:ec2/placementGroup:PlacementGroup") == []
    assert "placement" not in run.one(LT).inputs


def test_capacity_block_wiring():
    run = efa_plan("p5.48xlarge", capacityType="CAPACITY_BLOCK", capacityReservationId="cr-0123456789abcdef0")
    lt = run.one(LT).inputs
    assert lt["instanceType"] == "p5.48xlarge"
    assert lt["instanceMarketOptions"] == {"marketType": "capacity-block"}
    assert lt["capacityReservationSpecification"] == {
        "capacityReservationTarget": {"capacityReservationId": "cr-0123456789abcdef0"}
    }
    ng = run.one(NG, "gpu-efa").inputs
    assert ng["capacityType"] == "CAPACITY_BLOCK"
    assert "instanceTypes" not in ng
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
    assert run.one(LT).inputs["blockDeviceMappings"][0]["ebs"]["volumeSize"] == 500
    assert "instanceMarketOptions" not in run.one(LT).inputs


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
        "gpusPerNode": 8,
        "efaInterfacesPerNode": 4,
    }


def test_efa_on_g6_xlarge_is_a_config_error():
    from stacks.schema import ConfigError

    with pytest.raises(ConfigError) as err:
        plan("dev", jobs=[], gpuNodeGroups=[efa_group("g6.xlarge")])
    assert "trainstack:gpuNodeGroups[0].efa = true: g6.xlarge has no EFA interfaces" in str(err.value)


def test_pod_identity_is_scoped_to_the_bucket(prod_plan):
    assoc = prod_plan.one("aws:eks/podIdentityAssociation:PodIdentityAssociation").inputs
    assert (assoc["clusterName"], assoc["namespace"], assoc["serviceAccount"]) == (
        "trainstack-prod",
        "training",
        "trainer",
    )
    trust = json.loads(prod_plan.one("aws:iam/role:Role", "training-pods-role").inputs["assumeRolePolicy"])
    assert trust["Statement"][0]["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert trust["Statement"][0]["Action"] == ["sts:AssumeRole", "sts:TagSession"]
    policy = policy_of(prod_plan, "training-pods-policy")
    bucket_arn = f"arn:aws:s3:::{prod_plan.outputs['bucketName']}"
    by_sid = {s["Sid"]: s for s in policy["Statement"]}
    assert by_sid["ListBucket"]["Resource"] == bucket_arn
    assert by_sid["ReadWriteObjects"]["Resource"] == f"{bucket_arn}/*"
    assert by_sid["PullTrainingImage"]["Resource"].endswith(":repository/trainstack/prod/training")
    assert by_sid["UseBucketKey"]["Resource"].startswith("arn:aws:kms:")
    for stmt in policy["Statement"]:
        assert "*" not in str(stmt["Resource"]).replace("/*", "")
        assert all(a.split(":")[0] in {"s3", "ecr", "kms"} for a in stmt["Action"])


def test_service_account_and_namespace_go_through_the_cluster_provider(dev_plan):
    provider = dev_plan.one("pulumi:providers:kubernetes")
    for type_ in ("kubernetes:core/v1:Namespace", "kubernetes:core/v1:ServiceAccount"):
        assert provider.urn in dev_plan.one(type_).dependencies
