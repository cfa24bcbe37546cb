"""Compute plane under the mock engine: VPC, EKS, GPU/EFA node groups, add-ons, pod IAM."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import yaml
from support.paths import ROOT
from support.plans import plan, policy_of, stack_values

from config import EKS_ADDON_VERSIONS
from offline.engine import EKS_CLUSTER_SECURITY_GROUP, run_program

LT = "aws:ec2/launchTemplate:LaunchTemplate"
NG = "eks:index:ManagedNodeGroup"
SUBNET = "aws:ec2/subnet:Subnet"
PROD_P5 = {
    "name": "p5",
    "instanceType": "p5.48xlarge",
    "nodeCount": 2,
    "efa": True,
    "placementGroup": True,
    "diskSizeGiB": 1000,
}


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
    assert c["version"] == "1.36"
    assert c["upgradePolicy"] == {"supportType": "EXTENDED"}
    assert c["authenticationMode"] == "API"
    assert c["skipDefaultNodeGroup"] is True
    assert c["deletionProtection"] is True
    assert c["enabledClusterLogTypes"] == ["api", "audit", "authenticator"]
    assert c["encryptionConfigKeyArn"].startswith("arn:aws:kms:")
    assert c["publicAccessCidrs"] == ["203.0.113.0/24"]
    assert c["endpointPrivateAccess"] is True
    # Managed node groups use EKS's own cluster security group; pulumi-eks's would be unused.
    assert c["skipDefaultSecurityGroups"] is True
    assert "instanceRoles" not in c and "nodeAssociatePublicIpAddress" not in c
    (entry,) = c["accessEntries"].values()
    assert entry["principalArn"] == "arn:aws:iam::123456789012:role/PlatformAdmin"
    policy = entry["accessPolicies"]["cluster-admin"]
    assert policy["policyArn"].endswith(":cluster-access-policy/AmazonEKSClusterAdminPolicy")
    assert policy["accessScope"] == {"type": "cluster"}


def test_dev_cluster_is_deletable(dev_plan):
    assert dev_plan.one("eks:index:Cluster").inputs["deletionProtection"] is False


def test_addons_are_pinned(prod_plan):
    versions = EKS_ADDON_VERSIONS["1.36"]
    c = prod_plan.one("eks:index:Cluster").inputs
    assert c["vpcCniOptions"]["addonVersion"] == versions["vpc-cni"]
    assert c["kubeProxyAddonOptions"]["version"] == versions["kube-proxy"]
    addons = {a.inputs["addonName"]: a.inputs for a in prod_plan.by_type("aws:eks/addon:Addon")}
    # The node monitoring agent's builds per version are not confirmed: EKS's default, no pin.
    assert set(addons) == {
        "vpc-cni",
        "kube-proxy",
        "coredns",
        "eks-pod-identity-agent",
        "eks-node-monitoring-agent",
    }
    for name, addon in addons.items():
        assert addon.get("addonVersion") == versions.get(name)


def test_coredns_is_created_once_after_the_system_nodes(prod_plan):
    """Inside eks.Cluster (pulumi-eks's default) coredns waits for nodes that cannot exist yet and
    the create times out DEGRADED (pulumi/pulumi-eks#1819)."""
    assert prod_plan.one("eks:index:Cluster").inputs["corednsAddonOptions"]["enabled"] is False
    (coredns,) = [a for a in prod_plan.by_type("aws:eks/addon:Addon") if a.inputs["addonName"] == "coredns"]
    system = prod_plan.one(NG, "eks-system")
    assert system.urn in coredns.dependencies
    assert coredns.parent == prod_plan.one("trainstack:compute:Cluster").urn


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
        "trainstack.dev/role": "gpu",
        "k8s.amazonaws.com/accelerator": "nvidia-l4",
        "trainstack.dev/node-group": "gpu",
        "trainstack.dev/instance-type": "g6.xlarge",
        "trainstack.dev/accelerator": "nvidia-l4",
        "nvidia.com/gpu.present": "true",  # what the NVIDIA device plugin's chart selects
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
    assert prod_plan.one(LT).inputs["placement"]["groupName"].startswith(f"{pg.name}-")
    assert pg.urn in prod_plan.one(LT).dependencies
    run = efa_plan("p5.48xlarge", placementGroup=False)
    assert run.by_type("aws:ec2/placementGroup:PlacementGroup") == []
    assert "placement" not in run.one(LT).inputs


CAPACITY_BLOCK = {
    "reservation:cr-0123456789abcdef0": {
        "type": "capacity-block",
        "instanceType": "p5.48xlarge",
        "availabilityZone": "us-east-1d",
        "total": 2,
        "endDate": "2099-01-01T00:00:00Z",
    }
}


def test_capacity_block_wiring():
    run = plan(
        "dev",
        facts=CAPACITY_BLOCK,
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
    lt = run.one(LT).inputs
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
        "minNodes": 0,
        "autoscaled": True,
        "gpusPerNode": 8,
        "efaInterfacesPerNode": 4,
    }


def test_efa_on_g6_xlarge_is_a_config_error():
    from config.schema import ConfigError

    with pytest.raises(ConfigError) as err:
        plan("dev", jobs=[], gpuNodeGroups=[efa_group("g6.xlarge")])
    assert "trainstack:gpuNodeGroups[0].efa = true: g6.xlarge has no EFA interfaces" in str(err.value)


def test_pod_identity_is_scoped_to_the_bucket(prod_plan):
    assoc = prod_plan.one(
        "aws:eks/podIdentityAssociation:PodIdentityAssociation", "training-pods-association"
    ).inputs
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
    assert by_sid["ListJobPrefixes"]["Resource"] == bucket_arn
    assert by_sid["ReadWriteJobObjects"]["Resource"] == [
        f"{bucket_arn}/checkpoints/*",
        f"{bucket_arn}/datasets/*",
    ]
    assert "PullTrainingImage" not in by_sid  # the kubelet pulls with the node role
    assert by_sid["UseBucketKey"]["Resource"].startswith("arn:aws:kms:")
    for stmt in policy["Statement"]:
        assert "*" not in str(stmt["Resource"]).replace("/*", "")
        assert all(a.split(":")[0] in {"s3", "ecr", "kms"} for a in stmt["Action"])


def test_service_account_and_namespace_go_through_the_cluster_provider(dev_plan):
    provider = dev_plan.one("pulumi:providers:kubernetes")
    for type_ in ("kubernetes:core/v1:Namespace", "kubernetes:core/v1:ServiceAccount"):
        assert provider.urn in dev_plan.one(type_).dependencies


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
    options = prod_plan.one(LT).inputs["metadataOptions"]
    assert options == {"httpTokens": "required", "httpPutResponseHopLimit": 1, "httpEndpoint": "enabled"}


def test_s3_traffic_skips_the_nat_gateways(prod_plan):
    endpoint = prod_plan.one("aws:ec2/vpcEndpoint:VpcEndpoint")
    assert endpoint.inputs["serviceName"] == "com.amazonaws.us-east-1.s3"
    assert endpoint.inputs["vpcEndpointType"] == "Gateway"
    private_tables = {
        f"{r.name}-id" for r in prod_plan.by_type("aws:ec2/routeTable:RouteTable") if "private" in r.name
    }
    assert set(endpoint.inputs["routeTableIds"]) == private_tables and len(private_tables) == 3


def test_the_deploying_role_gets_no_second_access_entry():
    caller = "arn:aws:sts::123456789012:assumed-role/PlatformAdmin/alice-session"
    run = run_program("prod", stack_values("prod"), caller_arn=caller)
    assert run.one("eks:index:Cluster").inputs["accessEntries"] == {}
    assert run.by_type("aws:eks/accessEntry:AccessEntry") == []
    others = stack_values("prod", cluster={"adminPrincipals": ["arn:aws:iam::123456789012:role/ops/Oncall"]})
    run = run_program("prod", others, caller_arn=caller)
    (entry,) = run.by_type("aws:eks/accessEntry:AccessEntry")
    assert entry.inputs["principalArn"] == "arn:aws:iam::123456789012:role/ops/Oncall"


def test_a_live_run_refuses_template_values(monkeypatch):
    from pulumi.runtime import config as runtime_config

    import config
    from config.schema import ConfigError

    runtime_config.set_all_config(stack_values("prod"), [])
    monkeypatch.setattr(config, "under_mock_engine", lambda: False)
    with pytest.raises(ConfigError) as err:
        config.load_config("prod")
    assert [p.key for p in err.value.problems] == [
        "trainstack:cluster.publicAccessCidrs[0]",
        "trainstack:cluster.adminPrincipals[0]",
    ]
    runtime_config.set_all_config(stack_values("dev"), [])
    assert config.load_config("dev").stack == "dev"


def test_five_azs_leave_out_the_one_eks_refuses_and_subnets_do_not_overlap():
    groups = [
        {"name": "p5", "instanceType": "p5.48xlarge", "availabilityZone": "us-east-1f"},
        {"name": "l4", "instanceType": "g6.xlarge"},
    ]
    run = plan("dev", jobs=[], network={"availabilityZones": 5}, gpuNodeGroups=groups)
    zones = sorted(s.inputs["availabilityZone"] for s in run.by_type(SUBNET) if "private" in s.name)
    # us-east-1e is use1-az3 in the offline account: EKS places no cluster subnet there.
    assert zones == [f"us-east-1{c}" for c in "abcdf"]
    cidrs = [s.inputs["cidrBlock"] for s in run.by_type(SUBNET)]
    assert len(set(cidrs)) == len(cidrs)


def test_training_pods_cannot_touch_the_build_context(prod_plan):
    """The nightly CodeBuild build reads build-contexts/ and pushes what it builds: a job with a
    custom command must not be able to plant code there. Evaluated with moto's IAM policy engine."""
    from moto.iam.access_control import IAMPolicy, PermissionResult

    policy = IAMPolicy(json.dumps(policy_of(prod_plan, "training-pods-policy")))
    bucket = f"arn:aws:s3:::{prod_plan.outputs['bucketName']}"

    def allowed(action: str, resource: str) -> bool:
        return policy.is_action_permitted(action, resource) == PermissionResult.PERMITTED

    for action in ("s3:GetObject", "s3:PutObject", "s3:DeleteObject"):
        assert allowed(action, f"{bucket}/checkpoints/llama-1b-fsdp/step_00000100/COMPLETE")
        assert allowed(action, f"{bucket}/datasets/c4-en/train.bin")
        assert not allowed(action, f"{bucket}/build-contexts/{'0' * 64}.zip")
        assert not allowed(action, f"{bucket}/anything-else")
    # Listing, too, only under the job prefixes (moto evaluates no StringLike: read the condition).
    (listing,) = [
        s for s in policy_of(prod_plan, "training-pods-policy")["Statement"] if "s3:ListBucket" in s["Action"]
    ]
    assert listing["Condition"] == {"StringLikeIfExists": {"s3:prefix": ["checkpoints/*", "datasets/*"]}}


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
        "enabled": True, "maxParallelNodesRepairedCount": 1, "maxUnhealthyNodeThresholdCount": 1,
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


def test_the_node_monitoring_agent_is_on_and_gpu_metrics_are_optional(prod_plan):
    addons = {r.inputs["addonName"]: r for r in prod_plan.by_type("aws:eks/addon:Addon")}
    assert "eks-node-monitoring-agent" in addons and "amazon-cloudwatch-observability" not in addons
    assert "addonVersion" not in addons["eks-node-monitoring-agent"].inputs  # EKS's default, kept
    cluster = yaml.safe_load((ROOT / "Pulumi.prod.yaml").read_text())["config"]["trainstack:cluster"]
    metrics = plan("prod", cluster={**cluster, "gpuMetrics": True, "nodeMonitoringAgent": False})
    addons = {r.inputs["addonName"]: r for r in metrics.by_type("aws:eks/addon:Addon")}
    assert "eks-node-monitoring-agent" not in addons
    (identity,) = addons["amazon-cloudwatch-observability"].inputs["podIdentityAssociations"]
    assert identity["serviceAccount"] == "cloudwatch-agent"
    attached = metrics.one("aws:iam/rolePolicyAttachment:RolePolicyAttachment", "eks-cloudwatch-agent-policy")
    assert attached.inputs["policyArn"] == "arn:aws:iam::aws:policy/CloudWatchAgentServerPolicy"
