"""Network plane config: the VPC trainstack creates, or an existing one and its subnets."""

from __future__ import annotations

import ipaddress
import re
from collections import Counter
from dataclasses import dataclass
from typing import Literal

from config.names import PROJECT
from config.schema import Reader, setting

_VPC = re.compile(r"vpc-[0-9a-f]{8,17}")
_SUBNET = re.compile(r"subnet-[0-9a-f]{8,17}")


@dataclass(frozen=True)
class NetworkConfig:
    vpc_cidr: str = setting("vpcCidr", "CIDR of the VPC trainstack creates (/16 to /20).", "10.0.0.0/16")
    availability_zones: int = setting("availabilityZones", "AZs to spread subnets over (2-6).", 2)
    nat_gateways: Literal["single", "onePerAz"] = setting(
        "natGateways", "One NAT gateway for the VPC (cheap) or one per AZ (resilient).", "single"
    )
    existing_vpc_id: str | None = setting(
        "existingVpcId", "Use this VPC instead of creating one (then list its subnets).", None
    )
    existing_private_subnet_ids: tuple[str, ...] = setting(
        "existingPrivateSubnetIds", "Private subnets of the existing VPC, two AZs or more.", factory=tuple
    )
    existing_public_subnet_ids: tuple[str, ...] = setting(
        "existingPublicSubnetIds", "Public subnets of the existing VPC (load balancers).", factory=tuple
    )


def check_network(n: NetworkConfig, r: Reader) -> None:
    k = f"{PROJECT}:network"
    try:
        net = ipaddress.IPv4Network(n.vpc_cidr)
        if not 16 <= net.prefixlen <= 20:
            r.problem(f"{k}.vpcCidr", n.vpc_cidr, "prefix length out of range", "/16 to /20")
    except ValueError:
        r.problem(f"{k}.vpcCidr", n.vpc_cidr, "not an IPv4 CIDR", "a CIDR such as 10.0.0.0/16")
    if not 2 <= n.availability_zones <= 6:
        r.problem(f"{k}.availabilityZones", n.availability_zones, "out of range", "2-6 (EKS needs two AZs)")
    if n.existing_vpc_id is None:
        if n.existing_private_subnet_ids or n.existing_public_subnet_ids:
            r.problem(
                f"{k}.existingVpcId",
                None,
                "subnets given without their VPC",
                "the id of the VPC that holds them",
            )
        return
    if not _VPC.fullmatch(n.existing_vpc_id):
        r.problem(f"{k}.existingVpcId", n.existing_vpc_id, "not a VPC id", "vpc-<hex>")
    if len(n.existing_private_subnet_ids) < 2:
        r.problem(
            f"{k}.existingPrivateSubnetIds",
            list(n.existing_private_subnet_ids),
            "too few subnets",
            "two or more, in different AZs",
        )
    for key, ids in (
        ("existingPrivateSubnetIds", n.existing_private_subnet_ids),
        ("existingPublicSubnetIds", n.existing_public_subnet_ids),
    ):
        for i, s in enumerate(ids):
            if not _SUBNET.fullmatch(s):
                r.problem(f"{k}.{key}[{i}]", s, "not a subnet id", "subnet-<hex>")
        for s, count in Counter(ids).items():
            if count > 1:
                r.problem(f"{k}.{key}", s, f"listed {count} times", "each subnet once")
