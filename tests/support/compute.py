"""The compute plane's resource types and an EFA node group as a stack file writes it, shared by the
compute plane's tests and the node group rules."""

from __future__ import annotations

LT = "aws:ec2/launchTemplate:LaunchTemplate"
NG = "eks:index:ManagedNodeGroup"
SUBNET = "aws:ec2/subnet:Subnet"
# What the account answers about a Capacity Block of two p5.48xlarge in us-east-1d.
CAPACITY_BLOCK_FACTS = {
    "reservation:cr-0123456789abcdef0": {
        "type": "capacity-block",
        "instanceType": "p5.48xlarge",
        "availabilityZone": "us-east-1d",
        "total": 2,
        "endDate": "2099-01-01T00:00:00Z",
    }
}


def efa_group(instance_type: str, **fields) -> dict:
    return {"name": "efa", "instanceType": instance_type, "nodeCount": 2, "efa": True, **fields}
