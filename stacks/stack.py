"""Compose a stack from its config, plane by plane, as in the README's architecture diagram:

    build plane (bucket, registry, image)  ->  compute plane (VPC, EKS, GPU nodes, pod IAM)
      ->  operators plane (device plugins, training operator, KubeRay)

Each plane gets only what it needs from the one before. Returns the stack outputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

from components.bucket import ArtifactBucket, ArtifactBucketArgs
from components.cluster import Cluster, ClusterArgs
from components.gpu_node_group import GpuNodeGroup, GpuNodeGroupArgs
from components.image import ImageBuild, ImageBuildArgs
from components.network import (
    Network,
    NetworkArgs,
    available_zones,
    existing_subnet_zones,
    zone_for_instance_type,
)
from components.operators import ClusterOperators, ClusterOperatorsArgs, HelmOperator
from components.pod_identity import TrainingPodIdentity, TrainingPodIdentityArgs
from components.registry import ImageRegistry, ImageRegistryArgs
from stacks.config import EKS_ADDON_VERSIONS, PROJECT, PROJECT_ROOT, StackConfig

ARCHIVE_DIR = PROJECT_ROOT / "build" / "contexts"


@dataclass(frozen=True)
class Account:
    """Where the stack deploys: the explicit AWS provider and who it runs as."""

    provider: aws.Provider
    account_id: str
    caller_arn: str

    @property
    def opts(self) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(providers=[self.provider])

    @property
    def invoke_opts(self) -> pulumi.InvokeOptions:
        return pulumi.InvokeOptions(provider=self.provider)


@dataclass(frozen=True)
class BuildPlane:
    bucket: ArtifactBucket
    registry: ImageRegistry
    image: ImageBuild


@dataclass(frozen=True)
class ComputePlane:
    cluster: Cluster
    node_groups: list[GpuNodeGroup]
    pod_identity: TrainingPodIdentity


def build_stack(cfg: StackConfig) -> dict[str, Any]:
    account = aws_account(cfg)
    build = build_plane(cfg, account)
    compute = compute_plane(cfg, account, build.bucket)
    operators = operators_plane(cfg, compute.cluster)
    return outputs(cfg, build, compute, operators)


def aws_account(cfg: StackConfig) -> Account:
    # One explicit provider carries region, profile and default tags to every AWS resource; the
    # image build's boto3 calls use the same region, profile and (checked) account.
    provider = aws.Provider(
        "aws",
        region=cfg.region,
        profile=cfg.aws_profile,
        default_tags={"tags": {"trainstack:stack": cfg.stack, "managed-by": "pulumi", **cfg.tags}},
    )
    caller = aws.get_caller_identity(opts=pulumi.InvokeOptions(provider=provider))
    return Account(provider, caller.account_id, caller.arn)


def build_plane(cfg: StackConfig, account: Account) -> BuildPlane:
    bucket = ArtifactBucket(
        "artifacts",
        ArtifactBucketArgs(
            encryption=cfg.storage.encryption,
            checkpoint_retention_days=cfg.storage.checkpoint_retention_days,
            build_context_retention_days=cfg.storage.build_context_retention_days,
            protect=cfg.storage.protect,
        ),
        account.opts,
    )
    registry = ImageRegistry(
        "training",
        ImageRegistryArgs(
            untagged_expiry_days=cfg.registry.untagged_expiry_days,
            keep_last_images=cfg.registry.keep_last_images,
            force_delete=cfg.registry.force_delete,
            protect=cfg.storage.protect,
        ),
        account.opts,
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
            docker_hub_username=cfg.image.docker_hub_username,
            docker_hub_access_token=cfg.docker_hub_access_token,
            bucket=bucket,
            registry=registry,
            region=cfg.region,
            account_id=account.account_id,
            aws_profile=cfg.aws_profile,
            archive_dir=ARCHIVE_DIR / cfg.stack,
        ),
        account.opts,
    )
    return BuildPlane(bucket, registry, image)


def compute_plane(cfg: StackConfig, account: Account, bucket: ArtifactBucket) -> ComputePlane:
    cluster_name = f"{PROJECT}-{cfg.stack}"
    net = cfg.network
    existing_subnets = existing_subnet_zones(net.existing_private_subnet_ids, account.invoke_opts)
    candidates = list(existing_subnets) or available_zones(account.invoke_opts)[: net.availability_zones]
    # Each GPU group goes to one AZ that offers its instance type; a created VPC spans those too.
    group_zones = {
        g.name: zone_for_instance_type(
            g.instance_type,
            g.availability_zone,
            candidates,
            f"{PROJECT}:gpuNodeGroups[{i}]",
            account.invoke_opts,
            fixed_zones=bool(net.existing_vpc_id),
        )
        for i, g in enumerate(cfg.gpu_node_groups)
    }
    vpc_zones = () if net.existing_vpc_id else tuple(dict.fromkeys([*candidates, *group_zones.values()]))
    network = Network(
        "vpc",
        NetworkArgs(
            cluster_name=cluster_name,
            vpc_cidr=net.vpc_cidr,
            zones=vpc_zones,
            nat_per_az=net.nat_gateways == "onePerAz",
            region=cfg.region,
            existing_vpc_id=net.existing_vpc_id,
            existing_private_subnet_ids=net.existing_private_subnet_ids,
            existing_private_subnet_zones=existing_subnets,
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
            addon_versions=EKS_ADDON_VERSIONS[cc.kubernetes_version],
            network=network,
            endpoint_public_access=cc.endpoint_public_access,
            endpoint_private_access=cc.endpoint_private_access,
            public_access_cidrs=cc.public_access_cidrs,
            admin_principals=cc.admin_principals,
            deployer_arn=account.caller_arn,
            control_plane_logs=cc.control_plane_logs,
            system_instance_type=system.instance_type,
            system_min_size=system.min_size,
            system_desired_size=system.desired_size,
            system_max_size=system.max_size,
            system_disk_size_gib=system.disk_size_gib,
            deletion_protection=cfg.storage.protect,
        ),
        account.opts,
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
                kubernetes_version=cc.kubernetes_version,
                subnet_id=network.private_subnet_by_zone[group_zones[g.name]],
                vpc_id=network.vpc_id,
            ),
            account.opts,
        )
        for g in cfg.gpu_node_groups
    ]
    pod_identity = TrainingPodIdentity(
        "training-pods",
        TrainingPodIdentityArgs(
            cluster=cluster,
            bucket_arn=bucket.arn,
            kms_key_arn=bucket.kms_key.arn if bucket.kms_key else None,
        ),
        account.opts,
    )
    return ComputePlane(cluster, node_groups, pod_identity)


def operators_plane(cfg: StackConfig, cluster: Cluster) -> ClusterOperators:
    ops = cfg.operators

    def helm(c) -> HelmOperator:
        return HelmOperator(c.enabled, c.version, c.values)

    return ClusterOperators(
        "operators",
        ClusterOperatorsArgs(
            provider=cluster.provider,
            system_nodes=cluster.system_nodes,
            any_efa=any(g.efa for g in cfg.gpu_node_groups),
            nvidia_device_plugin=helm(ops.nvidia_device_plugin),
            efa_device_plugin=helm(ops.efa_device_plugin),
            kuberay=helm(ops.kuberay),
            training_operator_enabled=ops.training_operator.enabled,
            training_operator_ref=ops.training_operator.ref,
        ),
    )


def outputs(
    cfg: StackConfig, build: BuildPlane, compute: ComputePlane, operators: ClusterOperators
) -> dict[str, Any]:
    cluster, pods = compute.cluster, compute.pod_identity
    return {
        "bucketName": build.bucket.bucket_name,
        "repositoryUrl": build.registry.repository_url,
        "imageUri": build.image.image_uri,
        "clusterName": cluster.cluster_name,
        "kubeconfig": cluster.kubeconfig,
        "trainingNamespace": pods.namespace_name,
        "trainingServiceAccount": pods.service_account_name,
        "trainingRoleArn": pods.role.arn,
        "gpuNodeGroups": {
            ng.group_name: {
                "nodeGroupName": ng.node_group_name,
                "instanceType": g.instance_type,
                "nodes": g.node_count,
                "gpusPerNode": ng.gpu_count,
                "efaInterfacesPerNode": ng.efa_count,
            }
            for ng, g in zip(compute.node_groups, cfg.gpu_node_groups, strict=True)
        },
        "operators": {
            **{key: f"{r.namespace}/{r.release}" for key, r in operators.installed_charts.items()},
            "trainingOperator": operators.training_operator_url,
        },
    }
