"""Compose a stack from its config: build plane, compute plane, pod IAM. Returns the stack outputs."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_aws as aws

from components.bucket import ArtifactBucket, ArtifactBucketArgs
from components.cluster import Cluster, ClusterArgs
from components.gpu_node_group import GpuNodeGroup, GpuNodeGroupArgs
from components.image import ImageBuild, ImageBuildArgs
from components.network import Network, NetworkArgs
from components.pod_identity import TrainingPodIdentity, TrainingPodIdentityArgs
from components.registry import ImageRegistry, ImageRegistryArgs
from stacks.config import EKS_ADDON_VERSIONS, PROJECT, PROJECT_ROOT, StackConfig

ARCHIVE_DIR = PROJECT_ROOT / "build" / "contexts"


def build_stack(cfg: StackConfig) -> dict[str, Any]:
    cluster_name = f"{PROJECT}-{cfg.stack}"
    # One explicit provider carries region and default tags to every AWS resource.
    aws_provider = aws.Provider(
        "aws",
        region=cfg.region,
        default_tags={"tags": {"trainstack:stack": cfg.stack, "managed-by": "pulumi", **cfg.tags}},
    )
    opts = pulumi.ResourceOptions(providers=[aws_provider])

    bucket = ArtifactBucket(
        "artifacts",
        ArtifactBucketArgs(
            encryption=cfg.storage.encryption,
            checkpoint_retention_days=cfg.storage.checkpoint_retention_days,
            build_context_retention_days=cfg.storage.build_context_retention_days,
            protect=cfg.storage.protect,
        ),
        opts,
    )
    registry = ImageRegistry(
        "training",
        ImageRegistryArgs(
            untagged_expiry_days=cfg.registry.untagged_expiry_days,
            keep_last_images=cfg.registry.keep_last_images,
            force_delete=cfg.registry.force_delete,
            protect=cfg.storage.protect,
        ),
        opts,
    )
    image = ImageBuild(
        "image",
        ImageBuildArgs(
            context_dir=PROJECT_ROOT / cfg.image.context,
            base_image=cfg.image.base_image,
            builder=cfg.image.builder,
            compute_type=cfg.image.compute_type,
            build_timeout_minutes=cfg.image.build_timeout_minutes,
            nightly_rebuild=cfg.image.nightly_rebuild,
            source_repository=cfg.image.source_repository,
            bucket=bucket,
            registry=registry,
            region=cfg.region,
            archive_dir=ARCHIVE_DIR / cfg.stack,
        ),
        opts,
    )

    net = cfg.network
    network = Network(
        "vpc",
        NetworkArgs(
            cluster_name=cluster_name,
            vpc_cidr=net.vpc_cidr,
            availability_zones=net.availability_zones,
            nat_per_az=net.nat_gateways == "onePerAz",
            existing_vpc_id=net.existing_vpc_id,
            existing_private_subnet_ids=net.existing_private_subnet_ids,
            existing_public_subnet_ids=net.existing_public_subnet_ids,
        ),
        opts,
    )
    cc = cfg.cluster
    system = cc.system_node_group
    cluster = Cluster(
        "eks",
        ClusterArgs(
            cluster_name=cluster_name,
            kubernetes_version=cc.kubernetes_version,
            addon_versions=EKS_ADDON_VERSIONS[cc.kubernetes_version],
            network=network,
            endpoint_public_access=cc.endpoint_public_access,
            endpoint_private_access=cc.endpoint_private_access,
            public_access_cidrs=cc.public_access_cidrs,
            admin_principals=cc.admin_principals,
            control_plane_logs=cc.control_plane_logs,
            system_instance_type=system.instance_type,
            system_min_size=system.min_size,
            system_desired_size=system.desired_size,
            system_max_size=system.max_size,
            system_disk_size_gib=system.disk_size_gib,
            deletion_protection=cfg.storage.protect,
        ),
        opts,
    )
    node_groups = [
        GpuNodeGroup(
            f"gpu-{g.name}",
            GpuNodeGroupArgs(
                group_name=g.name,
                instance_type=g.instance_type,
                node_count=g.node_count,
                efa=g.efa,
                capacity_type=g.capacity_type,
                capacity_reservation_id=g.capacity_reservation_id,
                placement_group=g.placement_group,
                disk_size_gib=g.disk_size_gib,
                cluster=cluster,
                subnet_id=network.private_subnet_ids[0],
                vpc_id=network.vpc_id,
            ),
            opts,
        )
        for g in cfg.gpu_node_groups
    ]
    pod_identity = TrainingPodIdentity(
        "training-pods",
        TrainingPodIdentityArgs(
            cluster=cluster,
            bucket_arn=bucket.arn,
            repository_arn=registry.arn,
            kms_key_arn=bucket.kms_key.arn if bucket.kms_key else None,
        ),
        opts,
    )

    return {
        "bucketName": bucket.bucket_name,
        "repositoryUrl": registry.repository_url,
        "imageUri": image.image_uri,
        "clusterName": cluster_name,
        "kubeconfig": cluster.kubeconfig,
        "trainingNamespace": pod_identity.namespace_name,
        "trainingServiceAccount": pod_identity.service_account_name,
        "trainingRoleArn": pod_identity.role.arn,
        "gpuNodeGroups": {
            ng.group_name: {
                "nodeGroupName": ng.node_group_name,
                "instanceType": g.instance_type,
                "nodes": g.node_count,
                "gpusPerNode": ng.gpu_count,
                "efaInterfacesPerNode": ng.efa_count,
            }
            for ng, g in zip(node_groups, cfg.gpu_node_groups, strict=True)
        },
    }
