"""Account checks: what the stack needs from the AWS account and from the machine running Pulumi,
read before any resource is registered (only the AWS provider, which creates nothing, comes first).

A first `pulumi up` short of a GPU quota, with a subnet in an AZ EKS refuses, pointed at a
reservation that does not fit, or without the `aws` CLI fails after minutes of provisioning with
an AWS error. Here every check records what the stack needs and what the account answered:
`pulumi preview` (and the offline plan) prints the report, and any failed check stops the program
with each problem and its fix. Reads go through the stack's AWS provider where Pulumi has a data
source; capacity reservations and CodeBuild source credentials have none, so boto3 reads them with
the same region and profile.
"""

from __future__ import annotations

import datetime
import ipaddress
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

from config import PROJECT, StackConfig
from config.cluster import support_status
from domain.catalog import INSTANCE_TYPES
from domain.names import (
    STACK_TAG,
    control_plane_log_group,
    creator_parameter,
    eks_cluster_name,
    gpu_node_group_name,
)
from domain.principals import role_of_principal

# EKS cannot place control-plane subnets in these AZ IDs (CreateCluster answers
# UnsupportedAvailabilityZoneException). AZ names map to different IDs in every account.
EKS_UNSUPPORTED_ZONE_IDS = ("use1-az3", "usw1-az2", "cac1-az3")
# pulumi-eks's kubeconfig runs `aws eks get-token`; it refuses older CLIs (nodejs/eks/dependencies.ts).
MIN_AWS_CLI = {1: (1, 24, 0), 2: (2, 7, 0)}
AWS_CLI_NEEDS = "`aws` on PATH where Pulumi runs (the kubeconfig runs aws eks get-token), v2.7+"
AWS_CLI_INSTALL = "https://docs.aws.amazon.com/cli/latest/userguide/getting-started-install.html"


@dataclass(frozen=True)
class Quota:
    code: str
    name: str


# EC2 vCPU quotas (service code ec2) by instance family and how the nodes are bought.
ON_DEMAND_QUOTAS = {
    "standard": Quota("L-1216C47A", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances"),
    "g": Quota("L-DB2E81BA", "Running On-Demand G and VT instances"),
    "p": Quota("L-417A185B", "Running On-Demand P instances"),
}
SPOT_QUOTAS = {
    "standard": Quota("L-34B43A08", "All Standard Spot Instance Requests"),
    "g": Quota("L-3819A6DF", "All G and VT Spot Instance Requests"),
    "p": Quota("L-7212CCBC", "All P Spot Instance Requests"),
}


def quota_family(instance_type: str) -> str:
    family = re.match(r"[a-z]+", instance_type).group()
    if family.startswith("p"):
        return "p"
    if family.startswith(("g", "vt")):
        return "g"
    return "standard"


@dataclass(frozen=True)
class Check:
    name: str
    needs: str
    answer: str
    problem: str | None = None  # the sentence that stops the program, with its fix


@dataclass(frozen=True)
class Creator:
    arn: str  # the IAM role or user EKS made cluster admin when it created the cluster
    parameter: str  # the SSM parameter the first run records it in


@dataclass(frozen=True)
class AccountFacts:
    """What the checks found that the compute plane builds on."""

    vpc_zones: tuple[str, ...]  # AZs of a created VPC; empty when the VPC exists
    existing_subnet_zones: dict[str, str]  # AZ -> first listed private subnet in it
    group_zones: dict[str, str]  # GPU group name -> its AZ
    creator: Creator


class AccountCheckError(pulumi.RunError):
    def __init__(self, stack: str, problems: list[str]):
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(
            f"stack '{stack}': the AWS account or this machine is not ready; nothing was created:\n{lines}"
        )


def report(cfg: StackConfig, account_id: str, checks: tuple[Check, ...]) -> str:
    lines = [f"Account checks ({cfg.region}, account {account_id}):"]
    for c in checks:
        lines.append(f"  {'FAIL' if c.problem else 'ok':4s}  {c.name}: needs {c.needs}; found {c.answer}")
    return "\n".join(lines)


def check_account(
    cfg: StackConfig,
    account_id: str,
    caller_arn: str,
    opts: pulumi.InvokeOptions,
    session: Callable[[], Any],
    live: bool,
) -> AccountFacts:
    """Run every check; log the report; raise AccountCheckError listing every failed one.
    `session` makes the boto3 session (made only when a check needs it); `live` is false under
    the offline plan, where a missing `aws` CLI on this machine is reported but does not stop it."""
    checks: list[Check] = []
    running = _running_cluster(cfg, opts)
    vpc_zones, existing_subnet_zones, group_zones = _zones(cfg, running, opts, checks)
    if cfg.fsx_groups:
        checks.append(_fsx_zone(cfg, group_zones))
    creator = _creator(cfg, caller_arn, opts, checks)
    checks.append(_kubernetes_version(cfg, running))
    checks += _group_floors(cfg, running)
    if cfg.cluster.control_plane_logs:
        checks.append(_control_plane_log_group(cfg, opts))
    checks += _quotas(cfg, opts)
    checks += _reservations(cfg, session)
    if cfg.image.source_repository:
        checks.append(_source_credential(cfg, session))
    checks.append(_aws_cli_check(live))
    _conclude(cfg, account_id, checks)
    return AccountFacts(vpc_zones, existing_subnet_zones, group_zones, creator)


def _fsx_zone(cfg: StackConfig, group_zones: dict[str, str]) -> Check:
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


def check_existing_cluster(
    cfg: StackConfig, account_id: str, opts: pulumi.InvokeOptions, session: Callable[[], Any], live: bool
) -> None:
    """The checks that make sense on an EKS cluster the stack did not create: it exists here, it can
    give the training pods an identity (the Pod Identity agent add-on, which the stack does not
    install on someone else's cluster), the CodeBuild credential, the aws CLI. Quotas, AZs and
    reservations are the cluster owner's."""
    name = cfg.existing_cluster.eks_cluster_name
    key = f"{PROJECT}:existingCluster.eksClusterName"
    clusters = aws.eks.get_clusters(opts=opts).names
    checks = []
    if name not in clusters:
        checks.append(
            Check(
                "EKS cluster",
                f"{name} in {cfg.region}",
                ", ".join(clusters) or "no cluster",
                f"{key} = {name}: no EKS cluster of that name in {cfg.region} for account {account_id}; "
                f"allowed: {', '.join(clusters) or 'a cluster of this account and region (or set aws:region)'}",
            )
        )
    else:
        version = aws.eks.get_cluster(name=name, opts=opts).version
        checks.append(Check("EKS cluster", f"{name} in {cfg.region}", f"{name}, Kubernetes {version}"))
        checks.append(_pod_identity_agent(name, key, opts))
    if cfg.image.source_repository:
        checks.append(_source_credential(cfg, session))
    checks.append(_aws_cli_check(live))
    _conclude(cfg, account_id, checks)


def _pod_identity_agent(name: str, key: str, opts: pulumi.InvokeOptions) -> Check:
    needs = "the eks-pod-identity-agent add-on (training pods get the bucket through Pod Identity)"
    try:
        found = aws.eks.get_addon(cluster_name=name, addon_name="eks-pod-identity-agent", opts=opts)
    except Exception as err:  # the provider answers ResourceNotFoundException for a missing add-on
        said = str(err)
        if not any(s in said for s in ("ResourceNotFound", "not found", "couldn't find")):
            raise
        return Check(
            "Pod Identity agent",
            needs,
            "not installed",
            f"{key} = {name}: the cluster has no eks-pod-identity-agent add-on, so training pods would get "
            "no AWS identity; allowed: a cluster with it (its owner runs: aws eks create-addon "
            f"--cluster-name {name} --addon-name eks-pod-identity-agent)",
        )
    return Check("Pod Identity agent", needs, f"{found.addon_version}")


def _aws_cli_check(live: bool) -> Check:
    if live:
        return _aws_cli(shutil.which, _cli_version)
    # The offline plan: this machine may never run `pulumi up`; report, do not stop.
    where = shutil.which("aws")
    return Check("aws CLI", AWS_CLI_NEEDS, f"{where or 'not on PATH'} (not run offline)")


def _conclude(cfg: StackConfig, account_id: str, checks: list[Check]) -> None:
    """Log the report; stop with every problem found, before anything is created."""
    done = tuple(checks)
    pulumi.log.info(report(cfg, account_id, done))
    problems = [c.problem for c in done if c.problem]
    if problems:
        raise AccountCheckError(cfg.stack, problems)


def _zones(
    cfg: StackConfig, running: RunningCluster | None, opts: pulumi.InvokeOptions, checks: list[Check]
) -> tuple[tuple[str, ...], dict[str, str], dict[str, str]]:
    """(AZs of a created VPC, AZ -> existing private subnet, GPU group -> AZ). AZs by ID: EKS
    accepts them for cluster subnets and EC2 offers the system node type there; each GPU group in
    one AZ that offers its type, and where a cluster runs, the AZs it already has."""
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
        checks.append(
            Check(
                "subnet AZs",
                "private subnets in AZs where EKS can place the cluster",
                ", ".join(f"{s.id} in {s.availability_zone} ({s.availability_zone_id})" for s in subnets),
                f"{key}.existingPrivateSubnetIds: {', '.join(refused_subnets)} are in AZs where EKS cannot "
                "place cluster subnets (UnsupportedAvailabilityZoneException); list subnets in other AZs"
                if refused_subnets
                else None,
            )
        )
        candidates = list(existing)
    elif running is not None:
        # EKS keeps a cluster's subnets: its AZs stay, in their address order, whatever EC2 offers now.
        candidates = list(running.zones)
        checks.append(
            Check(
                "availability zones",
                f"the AZs of the running cluster {running.name} (network.availabilityZones counts only "
                "when the cluster is created)",
                ", ".join(candidates),
            )
        )
    else:
        found = aws.get_availability_zones(state="available", opts=opts)
        named = list(zip(found.names, found.zone_ids, strict=True))
        refused = {n: i for n, i in named if i in EKS_UNSUPPORTED_ZONE_IDS}
        offered = set(_offered_zones(system_type, opts))
        usable = [(n, i) for n, i in named if n in offered and n not in refused]
        wanted = net.availability_zones
        chosen = usable[:wanted]
        checks.append(
            Check(
                "availability zones",
                f"{wanted} AZs where EKS can place the cluster and EC2 offers {system_type}",
                ", ".join(f"{n} ({i})" for n, i in usable) or "none",
                None
                if len(chosen) == wanted
                else f"{key}.availabilityZones = {wanted}: {cfg.region} has {len(usable)} AZs where EKS "
                f"can place cluster subnets and EC2 offers {system_type} ({', '.join(n for n, _ in usable)}); "
                f"allowed: at most {len(usable)}",
            )
        )
        candidates = [n for n, _ in chosen]
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
                fixed_zones=bool(net.existing_vpc_id),
                refused=refused,
            )
        except pulumi.RunError as err:
            zone_problems.append(str(err))
    vpc_zones = () if net.existing_vpc_id else tuple(dict.fromkeys([*candidates, *group_zones.values()]))
    if running is not None and not net.existing_vpc_id:
        for i, g in enumerate(cfg.gpu_node_groups):
            if group_zones.get(g.name) not in (None, *running.zones):
                zone_problems.append(
                    f"{PROJECT}:gpuNodeGroups[{i}] ({g.name}) would add {group_zones[g.name]} to the VPC of "
                    f"the running cluster {running.name}, and EKS keeps a cluster's subnets; allowed: "
                    f"availabilityZone one of {', '.join(running.zones)} that offers {g.instance_type}"
                )

    checks.append(
        Check(
            "GPU node group AZs",
            "one AZ per group that offers its instance type",
            ", ".join(f"{g} in {z}" for g, z in group_zones.items()) or "none placed",
            "; ".join(zone_problems) or None,
        )
    )
    return vpc_zones, existing, group_zones


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
    offered = [z for z in _offered_zones(instance_type, opts) if z not in refused]
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


@dataclass(frozen=True)
class RunningCluster:
    """The stack's cluster as EKS has it, when a run before this one created it."""

    name: str
    version: str
    zones: tuple[str, ...]  # AZs of its subnets, in the order of their addresses
    group_zones: dict[str, str]  # GPU group -> the AZ of its node group's subnet
    group_sizes: dict[str, int]  # GPU group -> its desired size now (the autoscaler's)


def _running_cluster(cfg: StackConfig, opts: pulumi.InvokeOptions) -> RunningCluster | None:
    name = eks_cluster_name(cfg.stack)
    if name not in aws.eks.get_clusters(opts=opts).names:
        return None
    cluster = aws.eks.get_cluster(name=name, opts=opts)
    subnets = [aws.ec2.get_subnet(id=s, opts=opts) for s in cluster.vpc_config.subnet_ids]
    subnets.sort(key=lambda s: ipaddress.ip_network(s.cidr_block))
    zone_of = {s.id: s.availability_zone for s in subnets}
    groups, sizes = {}, {}
    node_groups = set(aws.eks.get_node_groups(cluster_name=name, opts=opts).names)
    for g in cfg.gpu_node_groups:
        node_group = gpu_node_group_name(name, g.name)
        if node_group in node_groups:
            found = aws.eks.get_node_group(cluster_name=name, node_group_name=node_group, opts=opts)
            subnet = found.subnet_ids[0]
            # Already read with the cluster's subnets; one outside them is read on its own.
            groups[g.name] = zone_of.get(subnet) or aws.ec2.get_subnet(id=subnet, opts=opts).availability_zone
            sizes[g.name] = found.scaling_configs[0].desired_size
    zones = tuple(dict.fromkeys(s.availability_zone for s in subnets))
    return RunningCluster(name, cluster.version, zones, groups, sizes)


def _group_floors(cfg: StackConfig, running: RunningCluster | None) -> list[Check]:
    """EKS refuses a minimum above the desired size, and the stack leaves the desired size to the
    autoscaler: raising minNodes above what a group has now would fail halfway through `up`."""
    checks = []
    for i, g in enumerate(cfg.gpu_node_groups):
        now = running.group_sizes.get(g.name) if running else None
        if now is None or not cfg.autoscaled(g):
            continue
        problem = None
        if g.min_nodes > now:
            node_group = gpu_node_group_name(running.name, g.name)
            problem = (
                f"{PROJECT}:gpuNodeGroups[{i}].minNodes = {g.min_nodes}: node group {node_group} has {now} "
                "node(s) now and EKS refuses a minimum above its desired size, which the autoscaler owns; "
                f"allowed: at most {now}, or raise both first: aws eks update-nodegroup-config --cluster-name "
                f"{running.name} --nodegroup-name {node_group} --scaling-config "
                f"minSize={g.min_nodes},desiredSize={g.min_nodes},maxSize={g.node_count}"
            )
        checks.append(
            Check(f"node group {g.name} floor", f"minNodes {g.min_nodes}", f"{now} node(s) now", problem)
        )
    return checks


def _kubernetes_version(cfg: StackConfig, running: RunningCluster | None) -> Check:
    """EKS upgrades a control plane one minor version at a time and never downgrades: a config
    that jumps further would fail after the build plane is up."""
    wanted, name = cfg.cluster.kubernetes_version, eks_cluster_name(cfg.stack)
    key = f"{PROJECT}:cluster.kubernetesVersion"
    status, price = support_status(wanted, datetime.date.today())
    needs = f"{wanted} ({status}, ${price:.2f}/h), at most one minor version above the running cluster"
    if running is None:
        return Check("Kubernetes version", needs, f"no cluster {name} yet")
    running = running.version
    minor = (int(running.split(".")[1]), int(wanted.split(".")[1]))
    problem = None
    if minor[1] < minor[0]:
        problem = f"{key} = {wanted}: cluster {name} runs {running}; EKS cannot downgrade; allowed: {running}"
    elif minor[1] > minor[0] + 1:
        step = f"1.{minor[0] + 1}"
        problem = (
            f"{key} = {wanted}: cluster {name} runs {running}; EKS upgrades one minor version at a time; "
            f"allowed: {running} or {step} (set {step}, pulumi up, then the next)"
        )
    return Check("Kubernetes version", needs, f"cluster {name} runs {running}", problem)


def _control_plane_log_group(cfg: StackConfig, opts: pulumi.InvokeOptions) -> Check:
    """A cluster made before trainstack owned its log group has one EKS created: creating it
    again fails (ResourceAlreadyExistsException), so it must be imported once."""
    name = control_plane_log_group(eks_cluster_name(cfg.stack))
    needs = f"{name} with {cfg.cluster.control_plane_log_retention_days}-day retention, the stack's"
    if name not in aws.cloudwatch.get_log_groups(log_group_name_prefix=name, opts=opts).log_group_names:
        return Check("control-plane log group", needs, "none yet")
    tags = aws.cloudwatch.get_log_group(name=name, opts=opts).tags or {}
    if tags.get(STACK_TAG) == cfg.stack:
        return Check("control-plane log group", needs, "the stack's")
    urn = f"urn:pulumi:{cfg.stack}::{PROJECT}::trainstack:compute:Cluster::eks"
    return Check(
        "control-plane log group",
        needs,
        "created by EKS",
        f"{name} exists, created by EKS before the stack owned it; adopt it once: pulumi import "
        f"aws:cloudwatch/logGroup:LogGroup eks-control-plane-logs {name} --parent eks={urn}",
    )


def _creator(cfg: StackConfig, caller_arn: str, opts: pulumi.InvokeOptions, checks: list[Check]) -> Creator:
    """Who created the cluster, as the first run recorded it; on the first run, the caller (EKS
    records an assumed-role session as its role). Later runs by CI, teammates or other admins
    compare with this, so the access entries never follow whoever runs `pulumi up`."""
    name = creator_parameter(cfg.stack)
    found = aws.ssm.get_parameters_by_path(path=name.rsplit("/", 1)[0], opts=opts)
    recorded = dict(zip(found.names, found.values, strict=True)).get(name)
    arn = recorded or role_of_principal(caller_arn)
    checks.append(
        Check(
            "cluster creator",
            "who EKS made cluster admin at creation (no access entry of ours for it)",
            f"{arn} ({f'recorded in {name}' if recorded else 'this run, recorded in ' + name})",
        )
    )
    return Creator(arn, name)


def _offered_zones(instance_type: str, opts: pulumi.InvokeOptions) -> list[str]:
    return aws.ec2.get_instance_type_offerings(
        location_type="availability-zone",
        filters=[{"name": "instance-type", "values": [instance_type]}],
        opts=opts,
    ).locations


def _quotas(cfg: StackConfig, opts: pulumi.InvokeOptions) -> list[Check]:
    """vCPUs each EC2 quota must allow: every group at its largest. Capacity Blocks and capacity
    reservations are not counted against them."""
    system = cfg.cluster.system_node_group
    groups = [("system", system.instance_type, system.max_size, "ON_DEMAND")]
    groups += [
        (g.name, g.instance_type, g.node_count, g.capacity_type)
        for g in cfg.gpu_node_groups
        if g.capacity_type != "CAPACITY_BLOCK" and not g.capacity_reservation_id
    ]
    needed: dict[Quota, list[tuple[str, str, int]]] = {}
    for name, instance_type, nodes, capacity in groups:
        table = SPOT_QUOTAS if capacity == "SPOT" else ON_DEMAND_QUOTAS
        needed.setdefault(table[quota_family(instance_type)], []).append((name, instance_type, nodes))
    checks = []
    for quota, users in needed.items():
        vcpus = sum(INSTANCE_TYPES[t].vcpus * n for _, t, n in users)
        found = aws.servicequotas.get_service_quota(service_code="ec2", quota_code=quota.code, opts=opts)
        value = int(found.value)
        who = ", ".join(f"{name}: {n} x {t} at {INSTANCE_TYPES[t].vcpus} vCPUs" for name, t, n in users)
        problem = None
        if value < vcpus:
            problem = (
                f"EC2 quota {quota.code} ({quota.name}) in {cfg.region} is {value} vCPUs; the stack needs "
                f"{vcpus} ({who}). Ask for more (P and G requests can take days): aws service-quotas "
                f"request-service-quota-increase --service-code ec2 --quota-code {quota.code} "
                f"--desired-value {vcpus} --region {cfg.region}"
            )
        checks.append(
            Check(f"quota {quota.code} ({quota.name})", f"{vcpus} vCPUs ({who})", f"{value} vCPUs", problem)
        )
    return checks


def _reservations(cfg: StackConfig, session: Callable[[], Any]) -> list[Check]:
    checks, ec2 = [], None  # one EC2 client for every group's reservation
    for i, g in enumerate(cfg.gpu_node_groups):
        if not g.capacity_reservation_id:
            continue
        key = f"{PROJECT}:gpuNodeGroups[{i}].capacityReservationId = {g.capacity_reservation_id}"
        block = g.capacity_type == "CAPACITY_BLOCK"
        needs = (
            f"{'a Capacity Block' if block else 'an On-Demand Capacity Reservation'} of "
            f"{g.node_count} x {g.instance_type} in {g.availability_zone}, active"
        )
        try:
            ec2 = ec2 or session().client("ec2")
            found = ec2.describe_capacity_reservations(CapacityReservationIds=[g.capacity_reservation_id])
            found = found["CapacityReservations"][0]
        except Exception as err:  # botocore's ClientError, NoCredentialsError, EndpointConnectionError...
            checks.append(
                Check(
                    f"reservation {g.capacity_reservation_id}",
                    needs,
                    "not readable",
                    f"{key}: EC2 could not read it ({_aws_error(err)}); check the id and the region "
                    f"(aws ec2 describe-capacity-reservations --capacity-reservation-ids "
                    f"{g.capacity_reservation_id} --region {cfg.region})",
                )
            )
            continue
        checks.append(_reservation_check(g, key, needs, found, block))
    return checks


def _reservation_check(g, key: str, needs: str, r: dict[str, Any], block: bool) -> Check:
    kind = r.get("ReservationType", "default")
    end = r.get("EndDate")
    answer = (
        f"{kind} {r.get('State')}, {r.get('TotalInstanceCount')} x {r.get('InstanceType')} in "
        f"{r.get('AvailabilityZone')} ({r.get('AvailableInstanceCount')} unused)"
        + (f", ends {end:%Y-%m-%d %H:%M} UTC" if end else "")
    )
    wrong = []
    if (kind == "capacity-block") != block:
        wrong.append(
            f"it is {'a Capacity Block' if kind == 'capacity-block' else 'an On-Demand Capacity Reservation'}"
            f"; capacityType {g.capacity_type} needs {'a Capacity Block' if block else 'an On-Demand one'}"
        )
    if r.get("InstanceType") != g.instance_type:
        wrong.append(f"it holds {r.get('InstanceType')}, the group runs {g.instance_type}")
    if r.get("AvailabilityZone") != g.availability_zone:
        wrong.append(
            f"it is in {r.get('AvailabilityZone')}, the group's availabilityZone is {g.availability_zone}"
        )
    # Counted by size, not by what is unused: the group's own nodes use it on every later run.
    if (r.get("TotalInstanceCount") or 0) < g.node_count:
        wrong.append(f"it holds {r.get('TotalInstanceCount')} instances, the group needs {g.node_count}")
    usable = ("active", "scheduled") if block else ("active",)
    now = datetime.datetime.now(datetime.UTC)
    if r.get("State") not in usable:
        wrong.append(f"its state is {r.get('State')} (needs {' or '.join(usable)})")
    elif end and end <= now:
        wrong.append(f"it ended {end:%Y-%m-%d %H:%M} UTC")
    problem = f"{key}: {'; '.join(wrong)}" if wrong else None
    return Check(f"reservation {g.capacity_reservation_id}", needs, answer, problem)


def _source_credential(cfg: StackConfig, session: Callable[[], Any]) -> Check:
    """CodeBuild webhooks on a GitHub repository need the account's GitHub credential for CodeBuild
    in the region; it is account-wide, so the stack checks for it rather than owning it."""
    fix = (
        "import a GitHub token once per account and region: aws codebuild import-source-credentials "
        f"--server-type GITHUB --auth-type PERSONAL_ACCESS_TOKEN --token <token> --region {cfg.region}"
    )
    name, needs = (
        "CodeBuild GitHub credential",
        f"a GitHub source credential (webhooks of {cfg.image.source_repository})",
    )
    try:
        infos = session().client("codebuild").list_source_credentials()["sourceCredentialsInfos"]
    except Exception as err:
        return Check(
            name,
            needs,
            "not readable",
            f"{PROJECT}:image.sourceRepository: could not list CodeBuild source credentials ({_aws_error(err)}); {fix}",
        )
    github = [i for i in infos if i.get("serverType") == "GITHUB"]
    if github:
        return Check(name, needs, ", ".join(i.get("authType", "?") for i in github))
    return Check(
        name,
        needs,
        "none",
        f"{PROJECT}:image.sourceRepository = {cfg.image.source_repository}: CodeBuild has no GitHub "
        f"credential in {cfg.region}, so creating the webhook fails (ResourceNotFoundException: "
        f"Could not find access token); {fix}",
    )


def _aws_cli(which: Callable[[str], str | None], version: Callable[[str], str]) -> Check:
    """The kubeconfig pulumi-eks writes runs `aws eks get-token`: without the CLI every Kubernetes
    resource fails after the cluster is up."""
    name, needs = "aws CLI", AWS_CLI_NEEDS
    path = which("aws")
    if path is None:
        return Check(
            name,
            needs,
            "not on PATH",
            f"the aws CLI is not on this machine's PATH; the cluster's kubeconfig runs `aws eks get-token`. "
            f"Install AWS CLI v2 ({AWS_CLI_INSTALL}) and run again",
        )
    text = version(path)
    found = re.match(r"aws-cli/(\d+)\.(\d+)\.(\d+)", text)
    if found is None:
        return Check(
            name,
            needs,
            f"{path}: `aws --version` said {text!r}",
            f"{path} does not answer `aws --version` as the AWS CLI; install AWS CLI v2 ({AWS_CLI_INSTALL})",
        )
    got = tuple(int(n) for n in found.groups())
    least = MIN_AWS_CLI.get(got[0], MIN_AWS_CLI[2])
    problem = None
    if got < least:
        problem = (
            f"the aws CLI at {path} is {'.'.join(map(str, got))}; `aws eks get-token` needs "
            f"{'.'.join(map(str, least))} or later. Install AWS CLI v2 ({AWS_CLI_INSTALL})"
        )
    return Check(name, needs, f"{path} {'.'.join(map(str, got))}", problem)


def _cli_version(path: str) -> str:
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        return str(err)
    return (done.stdout or done.stderr).strip()


def _aws_error(err: Exception) -> str:
    response = getattr(err, "response", None)
    if isinstance(response, dict) and "Error" in response:
        e = response["Error"]
        return f"{e.get('Code')}: {e.get('Message')}"
    return f"{type(err).__name__}: {err}"
