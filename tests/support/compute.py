"""The compute plane's resource types, an EFA node group as a stack file writes it, a launch
template's user data and an EBS-only GPU type, shared by the compute plane's tests and the node
group rules."""

from __future__ import annotations

import base64
import email
from dataclasses import replace

import pytest

from domain.catalog import INSTANCE_TYPES

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


def user_data_parts(template_inputs: dict) -> list[tuple[str, str]]:
    """A launch template's MIME user data as (content type, body) parts, as cloud-init reads it."""
    message = email.message_from_string(base64.b64decode(template_inputs["userData"]).decode())
    assert message.get_content_type() == "multipart/mixed"
    return [(part.get_content_type(), part.get_payload()) for part in message.get_payload()]


def ebs_only(monkeypatch: pytest.MonkeyPatch, instance_type: str) -> None:
    """Make a catalog type one without instance store, as a GPU type EC2 sells EBS-only would be
    (every GPU type in the catalog has NVMe); the offline EC2 answers and the config read it."""
    monkeypatch.setitem(
        INSTANCE_TYPES,
        instance_type,
        replace(INSTANCE_TYPES[instance_type], instance_store_disks=0, instance_store_disk_gb=0),
    )


def gpu_template(run):
    """The GPU group's launch template (the system group has its own, `eks-system-lt`)."""
    (template,) = [t for t in run.by_type(LT) if t.name != "eks-system-lt"]
    return template
