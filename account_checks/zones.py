"""The AZ decision, as one value (ZonePlan): the AZs of a created VPC, the existing private subnet
of each AZ, the AZ of each GPU group. AZs by ID: EKS accepts them for cluster subnets and EC2
offers the system node type there; each GPU group in one AZ that offers its type; where a cluster
runs, the AZs it already has; the groups that mount FSx in one AZ."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from account_checks.report import Check
from account_checks.running_cluster import RunningCluster
from config import PROJECT, StackConfig

# EKS cannot place control-plane subnets in these AZ IDs (CreateCluster answers
# UnsupportedAvailabilityZoneException). AZ names map to different IDs in every account.
EKS_UNSUPPORTED_ZONE_IDS = ("use1-az3", "usw1-az2", "cac1-az3")


@dataclass(frozen=True)
class ZonePlan:
    """Where the network and the GPU groups go; the compute plane builds on it."""

    vpc_zones: tuple[str, ...]  # AZs of a created VPC; empty when the VPC exists
    existing_subnet_zones: dict[str, str]  # AZ -> first listed private subnet in it
    group_zones: dict[str, str]  # GPU group name -> its AZ


def plan_zones(
    cfg: StackConfig, running: RunningCluster | None, opts: pulumi.InvokeOptions
) -> tuple[ZonePlan, list[Check]]:
    """The AZ decision and its checks: the network's AZs, then the GPU groups'."""
    net = cfg.network
    candidates, existing, refused, network_check = _network_zones(cfg, running, opts)
    group_zones, zone_problems = _group_zones(cfg, running, candidates, refused, opts)
    vpc_zones = () if net.existing_vpc_id else tuple(dict.fromkeys([*candidates, *group_zones.values()]))
    if running is not None and not net.existing_vpc_id:
        for i, g in enumerate(cfg.gpu_node_groups):
            if group_zones.get(g.name) not in (None, *running.zones):
                zone_problems.append(
                    f"{PROJECT}:gpuNodeGroups[{i}] ({g.name}) would add {group_zones[g.name]} to the VPC of "
                    f"the running cluster {running.name}, and EKS keeps a cluster's subnets; allowed: "
                    f"availabilityZone one of {', '.join(running.zones)} that offers {g.instance_type}"
                )
    groups_check = Check(
        "GPU node group AZs",
        "one AZ per group that offers its instance type",
        ", ".join(f"{g} in {z}" for g, z in group_zones.items()) or "none placed",
        "; ".join(zone_problems) or None,
    )
    return ZonePlan(vpc_zones, existing, group_zones), [network_check, groups_check]


def _network_zones(
    cfg: StackConfig, running: RunningCluster | None, opts: pulumi.InvokeOptions
) -> tuple[list[str], dict[str, str], dict[str, str], Check]:
    """(the network's AZs in order, AZ -> existing private subnet, refused AZ name -> ID, the check):
    the existing subnets' AZs, else the running cluster's, else the first usable ones."""
    net, system_type = cfg.network, cfg.cluster.system_node_group.instance_type
    key = f"{PROJECT}:network"
    existing, refused = {}, {}
    if net.existing_private_subnet_ids:
        subnets = [aws.ec2.get_subnet(id=s, opts=opts) for s in net.existing_private_subnet_ids]
        refused_subnets = [
            f"{s.id} ({s.availability_zone_id})"
            for s in subnets
            if s.availability_zone_id in EKS_UNSUPPORTED_ZONE_IDS
        ]
        for s in subnets:
            existing.setdefault(s.availability_zone, s.id)
        check = Check(
            "subnet AZs",
            "private subnets in AZs where EKS can place the cluster",
            ", ".join(f"{s.id} in {s.availability_zone} ({s.availability_zone_id})" for s in subnets),
            f"{key}.existingPrivateSubnetIds: {', '.join(refused_subnets)} are in AZs where EKS cannot "
            "place cluster subnets (UnsupportedAvailabilityZoneException); list subnets in other AZs"
            if refused_subnets
            else None,
        )
        return list(existing), existing, refused, check
    if running is not None:
        # EKS keeps a cluster's subnets: its AZs stay, in their address order, whatever EC2 offers now.
        candidates = list(running.zones)
        check = Check(
            "availability zones",
            f"the AZs of the running cluster {running.name} (network.availabilityZones counts only "
            "when the cluster is created)",
            ", ".join(candidates),
        )
        return candidates, existing, refused, check
    found = aws.get_availability_zones(state="available", opts=opts)
    named = list(zip(found.names, found.zone_ids, strict=True))
    refused = {n: i for n, i in named if i in EKS_UNSUPPORTED_ZONE_IDS}
    offered = set(offered_zones(system_type, opts))
    usable = [(n, i) for n, i in named if n in offered and n not in refused]
    wanted = net.availability_zones
    chosen = usable[:wanted]
    check = Check(
        "availability zones",
        f"{wanted} AZs where EKS can place the cluster and EC2 offers {system_type}",
        ", ".join(f"{n} ({i})" for n, i in usable) or "none",
        None
        if len(chosen) == wanted
        else f"{key}.availabilityZones = {wanted}: {cfg.region} has {len(usable)} AZs where EKS "
        f"can place cluster subnets and EC2 offers {system_type} ({', '.join(n for n, _ in usable)}); "
        f"allowed: at most {len(usable)}",
    )
    return [n for n, _ in chosen], existing, refused, check


def _group_zones(
    cfg: StackConfig,
    running: RunningCluster | None,
    candidates: list[str],
    refused: dict[str, str],
    opts: pulumi.InvokeOptions,
) -> tuple[dict[str, str], list[str]]:
    """(GPU group -> AZ, the problems of the groups that have none)."""
    group_zones, zone_problems = {}, []
    for i, g in enumerate(cfg.gpu_node_groups):
        kept = running.group_zones.get(g.name) if running else None
        if kept is not None and g.availability_zone in (None, kept):
            # Once placed, a group stays: a new AZ would replace its nodes and stop their jobs.
            group_zones[g.name] = kept
            continue
        try:
            group_zones[g.name] = zone_for_instance_type(
                g.instance_type,
                g.availability_zone,
                candidates,
                f"{PROJECT}:gpuNodeGroups[{i}]",
                opts,
                fixed_zones=bool(cfg.network.existing_vpc_id),
                refused=refused,
            )
        except pulumi.RunError as err:
            zone_problems.append(str(err))
    return group_zones, zone_problems


def zone_for_instance_type(
    instance_type: str,
    wanted: str | None,
    candidates: list[str],
    key: str,
    opts: pulumi.InvokeOptions,
    fixed_zones: bool = False,
    refused: dict[str, str] | None = None,
) -> str:
    """The AZ for a node group: `wanted` if EC2 offers the type there, else the first candidate
    that offers it, else (when the VPC is ours to shape) the first AZ that offers it. p4d/p5 types
    exist in a few AZs of a region only; a node group placed elsewhere never gets a node. AZs in
    `refused` (name -> ID) never join a VPC: EKS places no cluster subnet there."""
    refused = refused or {}
    if wanted in refused:
        raise pulumi.RunError(
            f"{key}.availabilityZone = {wanted}: it is {refused[wanted]} in this account, where EKS cannot "
            "place cluster subnets; allowed: another AZ that offers the type"
        )
    offered = [z for z in offered_zones(instance_type, opts) if z not in refused]
    if wanted is not None:
        if wanted not in offered:
            raise pulumi.RunError(
                f"{key}.availabilityZone = {wanted}: EC2 does not offer {instance_type} there; "
                f"allowed: {', '.join(sorted(offered)) or '(no AZ of this region)'}"
            )
        if fixed_zones and wanted not in candidates:
            raise pulumi.RunError(
                f"{key}.availabilityZone = {wanted}: none of network.existingPrivateSubnetIds is in "
                f"that AZ; allowed: {', '.join(candidates)}, or add a private subnet in {wanted}"
            )
        return wanted
    for zone in candidates:
        if zone in offered:
            return zone
    if offered and not fixed_zones:
        return sorted(offered)[0]
    raise pulumi.RunError(
        f"{key}.instanceType = {instance_type}: not offered in any AZ the network can use "
        f"({', '.join(candidates)}); allowed: set {key}.availabilityZone to one of "
        f"{', '.join(sorted(offered)) or '(none in this region)'}"
    )


def offered_zones(instance_type: str, opts: pulumi.InvokeOptions) -> list[str]:
    return aws.ec2.get_instance_type_offerings(
        location_type="availability-zone",
        filters=[{"name": "instance-type", "values": [instance_type]}],
        opts=opts,
    ).locations


def fsx_zone_check(cfg: StackConfig, group_zones: dict[str, str]) -> Check:
    """An FSx file system lives in one AZ: every group that mounts it must be there, or its nodes
    would reach it across AZs (slower, and billed per GB both ways)."""
    where = {g: group_zones[g] for g in cfg.fsx_groups}
    zones = sorted(set(where.values()))
    found = ", ".join(f"{g} in {z}" for g, z in where.items())
    problem = None
    if len(zones) > 1:
        problem = (
            f"{PROJECT}:storage.fsx.nodeGroups: {found}; an FSx for Lustre file system lives in one AZ; "
            f"allowed: the same availabilityZone on each of them (one of {', '.join(zones)}), or only the "
            "groups of one AZ in storage.fsx.nodeGroups"
        )
    return Check("FSx AZ", "one AZ for the groups that mount FSx", found, problem)
