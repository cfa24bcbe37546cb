"""Compute plane under the mock engine, the network and the cluster: the VPC, its subnets, NAT
gateways and S3 endpoint (or a VPC the user names), the EKS cluster, its add-ons and access entries."""

from __future__ import annotations

import pytest
import yaml
from support.compute import NG, SUBNET
from support.paths import ROOT
from support.plans import plan, stack_values

from config import EKS_ADDON_VERSIONS
from offline.engine import run_program


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
    """Deletion protection follows storage.protect, which dev's stack file turns off: the same dev
    stack, protected, gets a cluster that `pulumi destroy` cannot delete."""
    assert dev_plan.one("eks:index:Cluster").inputs["deletionProtection"] is False
    protected = plan("dev", storage={"protect": True}, registry={"forceDelete": False}, jobs=[])
    assert protected.one("eks:index:Cluster").inputs["deletionProtection"] is True


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


def test_service_account_and_namespace_go_through_the_cluster_provider(dev_plan):
    provider = dev_plan.one("pulumi:providers:kubernetes")
    assert provider.urn in dev_plan.one("kubernetes:core/v1:Namespace").dependencies
    for account in dev_plan.by_type("kubernetes:core/v1:ServiceAccount"):
        assert provider.urn in account.dependencies, account.name


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
