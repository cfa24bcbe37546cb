"""What an earlier run created: the stack's EKS cluster as EKS has it now (its AZs, each GPU
group's AZ and size), and the checks that a config change must respect against it: group floors,
one Kubernetes minor version at a time, the control-plane log group, the recorded cluster creator."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from account_checks.report import Check
from config import PROJECT, StackConfig
from config.cluster import support_status
from domain.names import (
    STACK_TAG,
    control_plane_log_group,
    creator_parameter,
    eks_cluster_name,
    node_group_name,
)
from domain.principals import role_of_principal


@dataclass(frozen=True)
class RunningCluster:
    """The stack's cluster as EKS has it, when a run before this one created it."""

    name: str
    version: str
    zones: tuple[str, ...]  # AZs of its subnets, in the order of their addresses
    group_zones: dict[str, str]  # GPU group -> the AZ of its node group's subnet
    group_sizes: dict[str, int]  # GPU group -> its desired size now (the autoscaler's)
    endpoint: str = ""  # its API server, and the CA that signs it
    ca_data: str = ""


@dataclass(frozen=True)
class Creator:
    arn: str  # the IAM role or user EKS made cluster admin when it created the cluster
    parameter: str  # the SSM parameter the first run records it in


def read_running_cluster(cfg: StackConfig, opts: pulumi.InvokeOptions) -> RunningCluster | None:
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
        node_group = node_group_name(name, g.name)
        if node_group in node_groups:
            found = aws.eks.get_node_group(cluster_name=name, node_group_name=node_group, opts=opts)
            subnet = found.subnet_ids[0]
            # Already read with the cluster's subnets; one outside them is read on its own.
            groups[g.name] = zone_of.get(subnet) or aws.ec2.get_subnet(id=subnet, opts=opts).availability_zone
            sizes[g.name] = found.scaling_configs[0].desired_size
    zones = tuple(dict.fromkeys(s.availability_zone for s in subnets))
    ca = cluster.certificate_authorities[0].data
    return RunningCluster(name, cluster.version, zones, groups, sizes, cluster.endpoint, ca)


def group_floor_checks(cfg: StackConfig, running: RunningCluster | None) -> list[Check]:
    """EKS refuses a minimum above the desired size, and the stack leaves the desired size to the
    autoscaler: raising minNodes above what a group has now would fail halfway through `up`."""
    checks = []
    for i, g in enumerate(cfg.gpu_node_groups):
        now = running.group_sizes.get(g.name) if running else None
        if now is None or not cfg.autoscaled(g):
            continue
        problem = None
        if g.min_nodes > now:
            node_group = node_group_name(running.name, g.name)
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


def kubernetes_version_check(cfg: StackConfig, running: RunningCluster | None) -> Check:
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


def log_group_check(cfg: StackConfig, opts: pulumi.InvokeOptions) -> Check:
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


def read_creator(cfg: StackConfig, caller_arn: str, opts: pulumi.InvokeOptions) -> tuple[Creator, Check]:
    """Who created the cluster, as the first run recorded it; on the first run, the caller (EKS
    records an assumed-role session as its role). Later runs by CI, teammates or other admins
    compare with this, so the access entries never follow whoever runs `pulumi up`."""
    name = creator_parameter(cfg.stack)
    found = aws.ssm.get_parameters_by_path(path=name.rsplit("/", 1)[0], opts=opts)
    recorded = dict(zip(found.names, found.values, strict=True)).get(name)
    arn = recorded or role_of_principal(caller_arn)
    check = Check(
        "cluster creator",
        "who EKS made cluster admin at creation (no access entry of ours for it)",
        f"{arn} ({f'recorded in {name}' if recorded else 'this run, recorded in ' + name})",
    )
    return Creator(arn, name), check
