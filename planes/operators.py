"""Operators plane: device plugins, the training operator, Trainer v2 with JobSet and KubeRay, on the
system nodes. On a cluster the stack did not create, what the cluster already runs is read first, and each operator is
installed, reused as it is, or the program stops before registering anything on the cluster."""

from __future__ import annotations

import pulumi_aws as aws

from account_checks.checkpoint_claim import check_checkpoint_claim
from account_checks.cluster_access import ClusterAddress
from account_checks.node_drivers import check_drivers
from account_checks.operator_decisions import (
    OperatorDecision,
    check_install_rights,
    decide_operators,
    group_labels,
    read_operators,
)
from account_checks.world import World
from components.jobs.kinds import KINDS
from components.operators import ClusterOperators, ClusterOperatorsArgs, HelmOperator
from config import StackConfig
from conventions import SYSTEM_GROUP
from planes.account import Account
from planes.attached import kubeconfig_path
from planes.compute import ComputePlane


def helm_operator(c, repository: str | None) -> HelmOperator:
    return HelmOperator(c.enabled, c.version, c.values, repository=repository)


def cluster_address(cfg: StackConfig, account: Account | None) -> ClusterAddress:
    e = cfg.existing_cluster
    if account is None:
        return ClusterAddress(kubeconfig_file=kubeconfig_path(e.kubeconfig), context=e.context)
    found = aws.eks.get_cluster(name=e.eks_cluster_name, opts=account.invoke_opts)
    return ClusterAddress(
        endpoint=found.endpoint,
        ca_data=found.certificate_authorities[0].data,
        eks_cluster_name=found.name,
        region=cfg.region,
    )


def existing_operators(
    cfg: StackConfig, account: Account | None, world: World
) -> dict[str, OperatorDecision]:
    """What the cluster runs, read with the stack's credentials through the client factory of the
    world the program runs in, and each operator's decision; stops (ClusterReadError,
    ClusterOperatorsError, NodeDriverError) on a cluster it cannot read, a collision, an operator the
    jobs cannot use, or GPU nodes whose driver the training image cannot use. Called before anything
    is registered (stacks.attached)."""
    connect = world.kubernetes_clients(world.session(cfg))
    address = cluster_address(cfg, account)
    inventory = read_operators(connect, address, cfg.stack, cfg.training_namespace)
    check_checkpoint_claim(connect, address, cfg)
    frameworks = tuple(sorted({KINDS[j.kind].kueue_framework for j in cfg.jobs}))
    decisions = decide_operators(cfg, inventory, frameworks)
    check_install_rights(connect, address, cfg.stack, decisions)
    check_drivers(cfg, inventory.nodes())  # the nodes read with the operators
    return decisions


def operators_plane(
    cfg: StackConfig, compute: ComputePlane, decisions: dict[str, OperatorDecision] | None = None
) -> ClusterOperators:
    """`decisions`: on a cluster the stack did not create, what to do with each operator
    (existing_operators); None on the stack's own cluster, where it installs every one enabled.
    On a cluster it did not create, what it installs carries the stack's name (`owner`)."""
    ops = cfg.operators
    attached = decisions is not None
    decisions = decisions or {}
    owner = cfg.stack if attached else None

    def installs(key: str, c) -> bool:
        return c.enabled and (key not in decisions or decisions[key].action == "install")

    def helm(key: str, c) -> HelmOperator:
        return HelmOperator(installs(key, c), c.version, c.values, owner, ops.chart_repository)

    labels = group_labels(cfg)
    return ClusterOperators(
        "operators",
        ClusterOperatorsArgs(
            provider=compute.provider,
            system_nodes=compute.system_nodes,
            system_selector=compute.placements[SYSTEM_GROUP].node_selector,
            any_gpu=any(g.gpu for g in cfg.gpu_node_groups),  # no device plugin for CPU groups
            any_efa=any(g.efa for g in cfg.gpu_node_groups),
            nvidia_device_plugin=helm("nvidiaDevicePlugin", ops.nvidia_device_plugin),
            efa_device_plugin=helm("efaDevicePlugin", ops.efa_device_plugin),
            kuberay=helm("kuberay", ops.kuberay),
            trainer=helm("trainer", ops.trainer),
            jobset_installed=installs("jobset", ops.on_any_cluster()["jobset"]),
            training_operator_enabled=installs("trainingOperator", ops.training_operator),
            training_operator_ref=ops.training_operator.ref,
            manifest_mirror=ops.manifest_mirror,
            hyperpod=any(g.hyperpod for g in cfg.gpu_node_groups),
            kueue=helm("kueue", ops.kueue),
            gpu_groups=labels if attached else None,
            efa_groups={g.name: labels[g.name] for g in cfg.gpu_node_groups if g.efa} if attached else None,
            owner=owner,
            crd_provider=compute.crd_provider,
        ),
    )
