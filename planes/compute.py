"""Compute plane on the stack's own cluster: VPC, EKS, GPU and CPU node groups, pod identity (training pods
and the autoscaler). The shared storage the groups mount is composed beside it (stacks.created)."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from account_checks import AccountFacts
from components.bucket import ArtifactBucket
from components.ci_access import GitHubCiAccess
from components.cluster import Cluster, ClusterArgs
from components.gpu_node_group import GpuNodeGroup, GpuNodeGroupArgs
from components.network import Network, NetworkArgs
from components.pod_identity import (
    ClusterAutoscalerIdentity,
    ClusterAutoscalerIdentityArgs,
    EksAccess,
    TrainingPodIdentity,
    TrainingPodIdentityArgs,
)
from components.queueing import AUTOSCALER_SERVICE_ACCOUNT
from config import EKS_ADDON_VERSIONS, StackConfig
from config.placements import placements
from conventions import SYSTEM_GROUP
from domain.names import eks_cluster_name
from domain.network import PrivateNetwork
from domain.placement import Placement
from planes.account import Account
from planes.ci import ci_deploy_entry


@dataclass(frozen=True)
class OwnCluster:
    """What only a cluster the stack creates has: its network, its EKS cluster, its node groups and
    the autoscaler's identity."""

    network: Network
    cluster: Cluster
    node_groups: list[GpuNodeGroup]
    autoscaler_identity: ClusterAutoscalerIdentity | None

    @property
    def eks(self) -> EksAccess:
        """For Pod Identity of what runs on it."""
        return EksAccess.of(self.cluster)

    @property
    def private_network(self) -> PrivateNetwork[pulumi.Input[str]]:
        """Its private subnets and the cluster's security group."""
        return PrivateNetwork(
            self.network.vpc_id, self.network.private_subnet_ids, self.cluster.cluster_security_group_id
        )


@dataclass(frozen=True)
class ComputePlane:
    """The cluster as the later planes see it, created or attached."""

    provider: k8s.Provider
    system_nodes: pulumi.Resource | None  # operators wait for these (None: the cluster's own)
    placements: dict[str, Placement]  # per group (system included): what one node offers a job
    group_nodes: dict[str, pulumi.Resource]  # per group: the nodes its jobs' pods need (created ones)
    pod_identity: TrainingPodIdentity
    cluster_name: pulumi.Input[str]
    kubeconfig: pulumi.Output[str] | None  # None: the user's kubeconfig file (kubeconfig_file)
    kubeconfig_file: str | None = None
    kube_context: str | None = None
    own: OwnCluster | None = None  # None: a cluster the stack did not create
    crd_provider: k8s.Provider | None = (
        None  # a cluster it did not create: for the CRDs it applies (takes over kept ones)
    )


def compute_plane(
    cfg: StackConfig, account: Account, facts: AccountFacts, bucket: ArtifactBucket, ci: GitHubCiAccess | None
) -> ComputePlane:
    cluster_name = eks_cluster_name(cfg.stack)
    net = cfg.network
    network = Network(
        "vpc",
        NetworkArgs(
            cluster_name=cluster_name,
            vpc_cidr=net.vpc_cidr,
            zones=facts.zones.vpc_zones,
            nat_per_az=net.nat_gateways == "onePerAz",
            region=cfg.region,
            existing_vpc_id=net.existing_vpc_id,
            existing_private_subnet_ids=net.existing_private_subnet_ids,
            existing_private_subnet_zones=facts.zones.existing_subnet_zones,
            existing_public_subnet_ids=net.existing_public_subnet_ids,
        ),
        account.opts,
    )
    cc = cfg.cluster
    system = cc.system_node_group
    cluster = Cluster(
        "eks",
        ClusterArgs(
            cluster_name=cluster_name,
            kubernetes_version=cc.kubernetes_version,
            support_type=cc.support_type,
            addon_versions=EKS_ADDON_VERSIONS[cc.kubernetes_version],
            network=network,
            endpoint_public_access=cc.endpoint_public_access,
            endpoint_private_access=cc.endpoint_private_access,
            public_access_cidrs=cc.public_access_cidrs,
            admin_principals=cc.admin_principals,
            creator_arn=facts.creator.arn,
            creator_parameter=facts.creator.parameter,
            control_plane_logs=cc.control_plane_logs,
            control_plane_log_retention_days=cc.control_plane_log_retention_days,
            system_instance_type=system.instance_type,
            system_min_size=system.min_size,
            system_desired_size=system.desired_size,
            system_max_size=system.max_size,
            system_disk_size_gib=system.disk_size_gib,
            deletion_protection=cfg.storage.protect,
            aws_profile=cfg.aws_profile,
            node_monitoring_agent=cc.node_monitoring_agent,
            gpu_metrics=cc.gpu_metrics,
            ci_deploy_role_arn=ci_deploy_entry(ci, facts.creator.arn),
            ci_preview_role_arn=ci.preview_role.arn if ci else None,
        ),
        account.opts,
    )
    node_groups = [
        GpuNodeGroup(
            f"gpu-{g.name}",
            GpuNodeGroupArgs(
                group_name=g.name,
                instance_type=g.instance_type,
                instance=g.instance,
                node_count=g.node_count,
                min_nodes=g.min_nodes,
                autoscaled=cfg.autoscaled(g),
                efa=g.efa,
                capacity_type=g.capacity_type,
                capacity_reservation_id=g.capacity_reservation_id,
                placement_group=g.placement_group,
                disk_size_gib=g.disk_size_gib,
                disk_throughput_mibps=g.gp3_throughput_mibps,
                disk_iops=g.gp3_iops,
                cluster=cluster,
                kubernetes_version=cc.kubernetes_version,
                subnet_id=network.private_subnet_by_zone[facts.zones.group_zones[g.name]],
                vpc_id=network.vpc_id,
                gpu=g.gpu,
                lustre_client=g.name in cfg.fsx_groups,
                auto_repair=g.auto_repair,
                health_mode=cfg.health_mode(g),
            ),
            account.opts,
        )
        for g in cfg.gpu_node_groups
    ]
    pod_identity = TrainingPodIdentity(
        "training-pods",
        TrainingPodIdentityArgs(
            provider=cluster.provider,
            eks=EksAccess.of(cluster),
            bucket_arn=bucket.arn,
            kms_key_arn=bucket.kms_key.arn if bucket.kms_key else None,
        ),
        account.opts,
    )
    autoscaled = [ng.autoscaling_group_name for ng in node_groups if ng.autoscaled]
    autoscaler_identity = None
    if autoscaled:
        autoscaler_identity = ClusterAutoscalerIdentity(
            "cluster-autoscaler",
            ClusterAutoscalerIdentityArgs(
                cluster=cluster,
                region=cfg.region,
                account_id=account.account_id,
                autoscaling_group_names=autoscaled,
                namespace=AUTOSCALER_SERVICE_ACCOUNT[0],
                service_account=AUTOSCALER_SERVICE_ACCOUNT[1],
            ),
            account.opts,
        )
    return ComputePlane(
        provider=cluster.provider,
        system_nodes=cluster.system_nodes,
        placements=placements(cfg),
        group_nodes={SYSTEM_GROUP: cluster.system_nodes} | {ng.group_name: ng for ng in node_groups},
        pod_identity=pod_identity,
        cluster_name=cluster.cluster_name,
        kubeconfig=cluster.kubeconfig,
        own=OwnCluster(network, cluster, node_groups, autoscaler_identity),
    )
