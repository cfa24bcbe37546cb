"""A SageMaker HyperPod cluster named by its own name (`existingCluster.hyperPodClusterName`): before
anything is registered, SageMaker's DescribeCluster says which EKS cluster orchestrates it
(`Orchestrator.Eks.ClusterArn`) and which instance types its instance groups run. The stack then
deploys onto that EKS cluster as onto one named by `eksClusterName`, and each GPU node group must be
one of those types: a group HyperPod does not run would hold a queue no node ever serves.

Pulumi has no data source for HyperPod clusters, so this is a boto3 read through the world's
session (the offline plan answers it from its `hyperpod-cluster:<name>` facts)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pulumi
from botocore.exceptions import ClientError, NoCredentialsError

from config import StackConfig
from domain.names import PROJECT

KEY = f"{PROJECT}:existingCluster.hyperPodClusterName"
# DescribeCluster's ClusterStatus values a stack can deploy onto (the API's: Creating, InService,
# Updating, Deleting, Failed, RollingBack, SystemUpdating).
USABLE = ("InService", "Updating", "SystemUpdating")


class HyperPodClusterError(pulumi.RunError):
    def __init__(self, stack: str, why: str):
        super().__init__(f"stack '{stack}': {KEY}: {why}; nothing was created")


@dataclasses.dataclass(frozen=True)
class HyperPodCluster:
    name: str
    status: str
    eks_cluster_name: str | None  # None: not orchestrated by EKS (Slurm)
    instance_types: dict[str, tuple[str, ...]]  # instance group -> its type (a flexible one's types)
    # instance group -> the deep health checks HyperPod runs on its new nodes (OnStartDeepHealthChecks)
    deep_health_checks: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)


def describe(session: Callable[[], Any], name: str, stack: str) -> HyperPodCluster:
    try:
        found = session().client("sagemaker").describe_cluster(ClusterName=name)
    except NoCredentialsError:
        raise HyperPodClusterError(
            stack, f"no AWS credentials to ask SageMaker about {name} (aws:profile, or AWS_* variables)"
        ) from None
    except ClientError as err:
        code, said = err.response["Error"]["Code"], str(err).lower()
        if code.startswith("ResourceNotFound") or "not found" in said or "could not find" in said:
            raise HyperPodClusterError(
                stack,
                f"no HyperPod cluster named {name} in this region (aws sagemaker list-clusters lists them)",
            ) from None
        if code in ("AccessDeniedException", "AccessDenied"):
            raise HyperPodClusterError(
                stack,
                f"SageMaker refused DescribeCluster on {name}: the stack's identity needs sagemaker:DescribeCluster",
            ) from None
        raise
    arn = ((found.get("Orchestrator") or {}).get("Eks") or {}).get("ClusterArn")
    return HyperPodCluster(
        name=name,
        status=found.get("ClusterStatus", ""),
        eks_cluster_name=arn.rpartition("/")[2] if arn else None,
        instance_types={g["InstanceGroupName"]: group_types(g) for g in found.get("InstanceGroups", [])},
        deep_health_checks={
            g["InstanceGroupName"]: tuple(g.get("OnStartDeepHealthChecks") or ())
            for g in found.get("InstanceGroups", [])
        },
    )


def group_types(group: dict[str, Any]) -> tuple[str, ...]:
    """An instance group's type, or a flexible group's current ones (InstanceRequirements)."""
    if group.get("InstanceType"):
        return (group["InstanceType"],)
    return tuple((group.get("InstanceRequirements") or {}).get("CurrentInstanceTypes") or ())


def resolve_hyperpod(cfg: StackConfig, session: Callable[[], Any]) -> StackConfig:
    """The config with the HyperPod cluster's EKS cluster as `eksClusterName`; unchanged without
    `hyperPodClusterName`. Stops with one sentence where it cannot deploy there."""
    name = cfg.existing_cluster.hyper_pod_cluster_name
    if name is None:
        return cfg
    cluster = describe(session, name, cfg.stack)
    if cluster.eks_cluster_name is None:
        raise HyperPodClusterError(
            cfg.stack,
            f"HyperPod cluster {name} is orchestrated by Slurm, not EKS: trainstack deploys onto EKS",
        )
    if cluster.status not in USABLE:
        raise HyperPodClusterError(
            cfg.stack, f"HyperPod cluster {name} is {cluster.status}; deploy once it is InService"
        )
    runs = {t for types in cluster.instance_types.values() for t in types}
    for i, g in enumerate(cfg.gpu_node_groups):
        # Only a group of a SageMaker type is HyperPod's; another is a node group of its EKS cluster.
        if g.hyperpod and g.instance_type not in runs:
            groups = (
                ", ".join(f"{n} ({', '.join(t)})" for n, t in sorted(cluster.instance_types.items()))
                or "none"
            )
            raise HyperPodClusterError(
                cfg.stack,
                f"gpuNodeGroups[{i}] ({g.name}) is {g.instance_type}, which no instance group of {name} runs "
                f"(its instance groups: {groups}); set its instanceType to one of them",
            )
    pulumi.log.info("\n".join(health_lines(cluster, cfg)))
    existing = dataclasses.replace(cfg.existing_cluster, eks_cluster_name=cluster.eks_cluster_name)
    return dataclasses.replace(cfg, existing_cluster=existing)


# What HyperPod's deep health checks can be (UpdateCluster's OnStartDeepHealthChecks): a stress test of
# the instance's GPUs (DCGM) and a connectivity test of its network (NCCL over EFA).
DEEP_HEALTH_CHECKS = ("InstanceStress", "InstanceConnectivity")


def health_lines(cluster: HyperPodCluster, cfg: StackConfig) -> list[str]:
    """HyperPod gates its nodes itself: its deep health checks on a new node, its health agents'
    labels, which every pod the stack sends there requires (components/jobs/hyperpod.py). The stack
    runs no gate of its own there and changes nothing of the cluster: it says, per GPU group, which
    checks the instance groups that serve it run, and what their owner turns on where none run."""
    lines = [
        "Node health (HyperPod's deep health checks on new nodes; every job pod requires its health "
        "agents' Schedulable label and prefers Passed deep health checks):"
    ]
    for g in cfg.gpu_node_groups:
        if not g.hyperpod:
            continue
        serving = sorted(n for n, types in cluster.instance_types.items() if g.instance_type in types)
        for group in serving:
            checks = cluster.deep_health_checks.get(group, ())
            missing = [c for c in DEEP_HEALTH_CHECKS if c not in checks]
            state = "ok   " if not missing else "WARN "
            ran = ", ".join(checks) if checks else "none: its new nodes join untested"
            fix = (
                f"; the cluster's owner adds {', '.join(missing)} to the instance group's OnStartDeepHealthChecks "
                "(aws sagemaker update-cluster)"
                if missing
                else ""
            )
            lines.append(f"  {state} {g.name}: instance group {group} ({g.instance_type}) runs {ran}{fix}")
    return lines
