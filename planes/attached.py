"""Compute plane on a cluster trainstack did not create: its provider, its described nodes, and
the stack's own namespace and service account on it (Pod Identity on EKS). Nothing of the cluster
itself is created or changed."""

from __future__ import annotations

from pathlib import Path

from components.attached_cluster import AttachedCluster, AttachedClusterArgs
from components.bucket import ArtifactBucket
from components.pod_identity import (
    EksAccess,
    TrainingPodIdentity,
    TrainingPodIdentityArgs,
)
from config import PROJECT_ROOT, StackConfig
from config.placements import placements
from planes.account import Account
from planes.compute import ComputePlane


def kubeconfig_path(configured: str) -> str:
    """`existingCluster.kubeconfig` as a path: `~` expanded, relative to the project."""
    return str((PROJECT_ROOT / Path(configured).expanduser()).resolve())


def attached_compute_plane(
    cfg: StackConfig, account: Account | None, bucket: ArtifactBucket | None
) -> ComputePlane:
    """The named cluster's provider, its described nodes, and the stack's own namespace and service
    account on it (with Pod Identity on EKS)."""
    e = cfg.existing_cluster
    cluster = AttachedCluster(
        "existing-cluster",
        AttachedClusterArgs(
            eks_cluster_name=e.eks_cluster_name,
            kubeconfig_path=kubeconfig_path(e.kubeconfig) if e.kubeconfig else None,
            context=e.context,
            region=cfg.region,
            aws_profile=cfg.aws_profile,
        ),
        account.opts if account else None,
        account.invoke_opts if account else None,
    )
    eks = EksAccess(cluster.cluster_name, []) if e.eks_cluster_name else None
    pod_identity = TrainingPodIdentity(
        "training-pods",
        TrainingPodIdentityArgs(
            provider=cluster.provider,
            eks=eks,
            bucket_arn=bucket.arn if bucket else None,
            kms_key_arn=bucket.kms_key.arn if bucket and bucket.kms_key else None,
            role_arn=e.pod_role_arn,
            namespace=cfg.training_namespace,
            existing_cluster=True,
        ),
        account.opts if account else None,
    )
    return ComputePlane(
        provider=cluster.provider,
        system_nodes=None,
        placements=placements(cfg),
        group_nodes={},
        pod_identity=pod_identity,
        cluster_name=cluster.cluster_name,
        kubeconfig=cluster.kubeconfig,
        kubeconfig_file=cluster.kubeconfig_file,
        kube_context=cluster.context,
        crd_provider=cluster.crd_provider,
    )
