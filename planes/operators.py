"""Operators plane: device plugins, the training operator and KubeRay, on the system nodes. On a
cluster the stack did not create, what the cluster already runs is read first, and each operator is
installed, reused as it is, or the program stops before registering anything on the cluster."""

from __future__ import annotations

import pulumi_aws as aws

from account_checks.cluster_inventory import (
    ClusterAddress,
    OperatorDecision,
    api_client,
    decide_operators,
    group_labels,
    own_record,
    read_cluster,
)
from components.operators import ClusterOperators, ClusterOperatorsArgs, HelmOperator
from config import StackConfig, under_mock_engine
from conventions import SYSTEM_GROUP
from planes.account import Account, boto3_session
from planes.attached import kubeconfig_path
from planes.compute import ComputePlane


def helm_operator(c) -> HelmOperator:
    return HelmOperator(c.enabled, c.version, c.values)


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


def existing_operators(cfg: StackConfig, account: Account | None) -> dict[str, OperatorDecision]:
    """What the cluster runs, read with the stack's credentials, and each operator's decision;
    stops (ClusterOperatorsError) on a collision or an operator the jobs cannot use. Called before
    anything is registered (stacks.attached)."""
    live = not under_mock_engine()
    api = api_client(cluster_address(cfg, account), boto3_session(cfg), live)
    with api:
        inventory = read_cluster(api, cfg.training_namespace)
    return decide_operators(cfg, inventory)


def operators_plane(
    cfg: StackConfig, compute: ComputePlane, decisions: dict[str, OperatorDecision] | None = None
) -> ClusterOperators:
    """`decisions`: on a cluster the stack did not create, what to do with each operator
    (existing_operators); None on the stack's own cluster, where it installs every one enabled."""
    ops = cfg.operators
    attached = decisions is not None
    decisions = decisions or {}

    def installs(key: str, c) -> bool:
        return c.enabled and (key not in decisions or decisions[key].action == "install")

    def helm(key: str, c) -> HelmOperator:
        return HelmOperator(installs(key, c), c.version, c.values)

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
            training_operator_enabled=installs("trainingOperator", ops.training_operator),
            training_operator_ref=ops.training_operator.ref,
            kueue=helm("kueue", ops.kueue),
            gpu_groups=labels if attached else None,
            efa_groups={g.name: labels[g.name] for g in cfg.gpu_node_groups if g.efa} if attached else None,
            own_record=own_record(decisions) if attached else None,
            record_namespace=compute.pod_identity.namespace if attached else None,
        ),
    )
