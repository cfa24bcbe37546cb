"""The rules of `trainstack:network` and `trainstack:cluster`, each refusal naming its key."""

from __future__ import annotations

from support.config_rules import problems


def test_network_rules():
    msgs = problems(
        network={"vpcCidr": "10.0.0.0/8", "availabilityZones": 1, "existingPrivateSubnetIds": ["subnet-1"]}
    )
    assert (
        'trainstack:network.vpcCidr = "10.0.0.0/8": prefix length out of range; allowed: /16 to /20' in msgs
    )
    assert any(m.startswith("trainstack:network.availabilityZones = 1: out of range") for m in msgs)
    assert any(
        m.startswith("trainstack:network.existingVpcId = null: subnets given without their VPC") for m in msgs
    )


def test_existing_vpc_needs_two_private_subnets():
    msgs = problems(
        network={"existingVpcId": "vpc-0123abcd", "existingPrivateSubnetIds": ["subnet-0123abcd"]}
    )
    assert any(
        m.startswith("trainstack:network.existingPrivateSubnetIds = [") and "too few subnets" in m
        for m in msgs
    )


def test_cluster_rules():
    msgs = problems(
        cluster={
            "kubernetesVersion": "1.29",
            "endpointPublicAccess": False,
            "endpointPrivateAccess": False,
            "adminPrincipals": ["admin"],
            "systemNodeGroup": {"instanceType": "p5.48xlarge", "minSize": 3, "desiredSize": 2},
        }
    )
    assert (
        'trainstack:cluster.kubernetesVersion = "1.29": not a known value; allowed: 1.33 | 1.34 | 1.35 | 1.36'
        in msgs
    )


def test_cluster_value_rules():
    msgs = problems(
        cluster={
            "endpointPublicAccess": False,
            "endpointPrivateAccess": False,
            "adminPrincipals": ["admin"],
            "systemNodeGroup": {"instanceType": "p5.48xlarge", "minSize": 3, "desiredSize": 2},
        }
    )
    assert any(
        m.startswith(
            "trainstack:cluster.endpointPrivateAccess = false: the API endpoint would be unreachable"
        )
        for m in msgs
    )
    assert any(
        m.startswith('trainstack:cluster.adminPrincipals[0] = "admin": not an IAM role or user ARN')
        for m in msgs
    )
    assert any(
        m.startswith('trainstack:cluster.systemNodeGroup.instanceType = "p5.48xlarge": not a CPU instance')
        for m in msgs
    )
    assert (
        "trainstack:cluster.systemNodeGroup.desiredSize = 2: outside minSize (3) and maxSize (3); allowed: 3-3"
        in msgs
    )


def test_admin_principals_are_unique():
    arn = "arn:aws:iam::123456789012:role/Admin"
    assert problems(cluster={"adminPrincipals": [arn, arn]}) == [
        f'trainstack:cluster.adminPrincipals = "{arn}": listed 2 times; allowed: each principal once'
    ]
