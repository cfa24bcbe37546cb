"""Compose a stack from its config, plane by plane, as in the README's architecture diagram:

    account checks (quotas, AZs, reservations; nothing registered if one fails)
      ->  build plane (bucket, registry, image)  ->  compute plane (VPC, EKS, GPU nodes, pod IAM)
      ->  operators plane (device plugins, training operator, KubeRay)
      ->  queueing plane (Kueue queues per node group, cluster autoscaler)
      ->  jobs plane (PyTorchJob / RayJob / RayCluster, each through its group's queue)

On a cluster trainstack did not create (`existingCluster`) the compute plane only attaches: the
provider comes from the named cluster and the node groups are described, not created; a kubeconfig
stack (kind) uses no AWS at all. Each plane gets only what it needs from the one before. Returns
the stack outputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components.attached_cluster import AttachedCluster, AttachedClusterArgs
from components.bucket import CHECKPOINT_PREFIX, ArtifactBucket, ArtifactBucketArgs
from components.ci_access import GitHubCiAccess, GitHubCiAccessArgs
from components.cluster import Cluster, ClusterArgs
from components.gpu_node_group import GpuNodeGroup, GpuNodeGroupArgs
from components.image import ImageBuild, ImageBuildArgs
from components.jobs import (
    Checkpoints,
    JobSpec,
    JobTracking,
    NodeCheck,
    Placement,
    TrainingJob,
    TrainingJobArgs,
    gpu_placement,
)
from components.kind_image import KindImage, KindImageArgs
from components.network import Network, NetworkArgs
from components.operators import ClusterOperators, ClusterOperatorsArgs, HelmOperator
from components.pod_identity import (
    ClusterAutoscalerIdentity,
    ClusterAutoscalerIdentityArgs,
    EksAccess,
    TrainingPodIdentity,
    TrainingPodIdentityArgs,
)
from components.principals import same_principal
from components.queueing import AUTOSCALER_SERVICE_ACCOUNT, Queueing, QueueingArgs, QueueSpec
from components.registry import ImageRegistry, ImageRegistryArgs
from components.shared_storage import FsxCheckpoints, FsxCheckpointsArgs, S3Datasets, S3DatasetsArgs
from components.tracking import PORT_FORWARD, TrackingNetwork, TrackingServer, TrackingServerArgs
from components.verl import VERL_IMAGE
from conventions import SYSTEM_GROUP
from stacks.account import STACK_TAG, AccountFacts, check_account, check_existing_cluster, eks_cluster_name
from stacks.config import EKS_ADDON_VERSIONS, PROJECT, PROJECT_ROOT, StackConfig, under_mock_engine
from stacks.config.checks import catalog_placement, config_system_placement

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
    bucket: ArtifactBucket | None  # None: a kubeconfig stack, no AWS
    registry: ImageRegistry | None
    image: ImageBuild | KindImage | None  # None: image.builder none, every job names its image

    @property
    def image_uri(self) -> pulumi.Output[str] | None:
        return self.image.image_uri if self.image else None


@dataclass(frozen=True)
class SharedStorage:
    """What jobs mount besides their own volumes."""

    fsx: FsxCheckpoints | None
    fsx_groups: frozenset[str]  # GPU groups whose jobs keep checkpoints on it
    datasets: S3Datasets | None


@dataclass(frozen=True)
class ComputePlane:
    """The cluster as the later planes see it, created or attached."""

    provider: k8s.Provider
    system_nodes: pulumi.Resource | None  # operators wait for these (None: the cluster's own)
    placements: dict[str, Placement]  # per group (system included): what one node offers a job
    pod_identity: TrainingPodIdentity
    cluster_name: pulumi.Input[str]
    kubeconfig: pulumi.Output[str] | None  # None: the user's kubeconfig file (kubeconfig_file)
    kubeconfig_file: str | None = None
    kube_context: str | None = None
    node_groups: list[GpuNodeGroup] = field(default_factory=list)  # the ones the stack created
    autoscaler_identity: ClusterAutoscalerIdentity | None = None
    storage: SharedStorage | None = None
    eks: EksAccess | None = None  # the stack's own EKS cluster, for Pod Identity of what runs on it
    network: TrackingNetwork | None = None  # its private subnets and security group


@dataclass(frozen=True)
class Tracking:
    """What jobs log to, and the server when the stack runs one."""

    job: JobTracking
    server: TrackingServer | None = None


def build_stack(cfg: StackConfig) -> dict[str, Any]:
    if cfg.existing_cluster.named:
        return attached_stack(cfg)
    account = aws_account(cfg)
    facts = account_checks(cfg, account)
    ci = ci_access(cfg, account)
    build = build_plane(cfg, account)
    compute = compute_plane(cfg, account, facts, build.bucket, ci)
    operators = operators_plane(cfg, compute)
    queues = queueing_plane(cfg, compute, operators)
    tracking = tracking_plane(cfg, account, build, compute)
    jobs = jobs_plane(cfg, build, compute, operators, queues, tracking)
    return outputs(cfg, build, compute, operators, queues, jobs) | tracking_outputs(tracking) | ci_outputs(ci)


def attached_stack(cfg: StackConfig) -> dict[str, Any]:
    """The same planes on a cluster trainstack did not create: nothing of the cluster is created or
    changed; an EKS one is checked first, a kubeconfig one (kind) uses no AWS account at all."""
    account = aws_account(cfg) if cfg.existing_cluster.uses_aws else None
    if account is not None:
        existing_cluster_checks(cfg, account)
        build = build_plane(cfg, account)
    else:
        build = local_build_plane(cfg)
    compute = attached_compute_plane(cfg, account, build.bucket)
    operators = operators_plane(cfg, compute)
    queues = queueing_plane(cfg, compute, operators)
    tracking = tracking_plane(cfg, account, build, compute)
    jobs = jobs_plane(cfg, build, compute, operators, queues, tracking)
    return outputs(cfg, build, compute, operators, queues, jobs) | tracking_outputs(tracking)


def aws_account(cfg: StackConfig) -> Account:
    # One explicit provider carries region, profile and default tags to every AWS resource; the
    # image build's boto3 calls use the same region, profile and (checked) account.
    provider = aws.Provider(
        "aws",
        region=cfg.region,
        profile=cfg.aws_profile,
        default_tags={"tags": {STACK_TAG: cfg.stack, "managed-by": "pulumi", **cfg.tags}},
    )
    caller = aws.get_caller_identity(opts=pulumi.InvokeOptions(provider=provider))
    return Account(provider, caller.account_id, caller.arn)


def account_checks(cfg: StackConfig, account: Account) -> AccountFacts:
    """Quotas, AZs, reservations, the CodeBuild credential and the aws CLI, read before any resource
    that AWS creates is registered; stops with every problem found."""
    return check_account(
        cfg,
        account.account_id,
        account.caller_arn,
        account.invoke_opts,
        session=boto3_session(cfg),
        live=not under_mock_engine(),
    )


def boto3_session(cfg: StackConfig):
    """Made only when a check needs it: the stack's region and profile, as the provider uses."""
    return lambda: boto3.Session(profile_name=cfg.aws_profile, region_name=cfg.region)


def existing_cluster_checks(cfg: StackConfig, account: Account) -> None:
    """The EKS cluster exists and can take the stack's pods' identity; the CodeBuild credential."""
    check_existing_cluster(
        cfg,
        account.account_id,
        account.invoke_opts,
        session=boto3_session(cfg),
        live=not under_mock_engine(),
    )


def ci_access(cfg: StackConfig, account: Account) -> GitHubCiAccess | None:
    ci = cfg.ci
    if ci.github_repository is None:
        return None
    return GitHubCiAccess(
        "github-actions",
        GitHubCiAccessArgs(
            repository=ci.github_repository,
            owner_id=ci.github_owner_id,
            repository_id=ci.github_repository_id,
            environment=ci.environment,
            branch=ci.branch,
            oidc_provider_arn=ci.oidc_provider_arn,
            secrets_key_arn=ci.secrets_key_arn,
            state_bucket=ci.state_bucket,
            project=PROJECT,
            stack=cfg.stack,
            role_prefix=f"{PROJECT}-{cfg.stack}",
        ),
        account.opts,
    )


def ci_deploy_entry(ci: GitHubCiAccess | None, account: Account, creator: str) -> pulumi.Output[str] | None:
    """The deploy role's cluster-admin entry, unless the deploy role created the cluster: EKS
    made the creator an admin itself, and a second entry for it fails. Whoever runs this
    `pulumi up` does not matter: the entries stay the same for every caller."""
    if ci is None:
        return None
    deploy_arn = f"arn:aws:iam::{account.account_id}:role/{ci.deploy_role_name}"
    if same_principal(creator, deploy_arn):
        pulumi.log.info(f"{deploy_arn} created the cluster; EKS made it cluster admin as the creator.")
        return None
    return ci.deploy_role.arn


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
    if cfg.image.builder == "none":
        return BuildPlane(bucket, registry, None)
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


def local_build_plane(cfg: StackConfig) -> BuildPlane:
    """No AWS: the image is built by the local Docker and loaded into kind (or named per job)."""
    if cfg.image.builder != "kind":
        return BuildPlane(None, None, None)
    image = KindImage(
        "image",
        KindImageArgs(
            context_dir=PROJECT_ROOT / cfg.image.context,
            base_image=cfg.image.base_image,
            kind_cluster_name=cfg.existing_cluster.kind_cluster_name,
        ),
    )
    return BuildPlane(None, None, image)


def compute_plane(
    cfg: StackConfig, account: Account, facts: AccountFacts, bucket: ArtifactBucket, ci: GitHubCiAccess | None
) -> ComputePlane:
    cluster_name = eks_cluster_name(cfg)
    net = cfg.network
    network = Network(
        "vpc",
        NetworkArgs(
            cluster_name=cluster_name,
            vpc_cidr=net.vpc_cidr,
            zones=facts.vpc_zones,
            nat_per_az=net.nat_gateways == "onePerAz",
            region=cfg.region,
            existing_vpc_id=net.existing_vpc_id,
            existing_private_subnet_ids=net.existing_private_subnet_ids,
            existing_private_subnet_zones=facts.existing_subnet_zones,
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
            ci_deploy_role_arn=ci_deploy_entry(ci, account, facts.creator.arn),
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
                node_count=g.node_count,
                min_nodes=g.min_nodes,
                autoscaled=cfg.autoscaled(g),
                efa=g.efa,
                capacity_type=g.capacity_type,
                capacity_reservation_id=g.capacity_reservation_id,
                placement_group=g.placement_group,
                disk_size_gib=g.disk_size_gib,
                cluster=cluster,
                kubernetes_version=cc.kubernetes_version,
                subnet_id=network.private_subnet_by_zone[facts.group_zones[g.name]],
                vpc_id=network.vpc_id,
                lustre_client=g.name in cfg.fsx_groups,
                auto_repair=g.auto_repair,
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
        placements=placements(cfg, cluster, node_groups),
        pod_identity=pod_identity,
        cluster_name=cluster.cluster_name,
        kubeconfig=cluster.kubeconfig,
        node_groups=node_groups,
        autoscaler_identity=autoscaler_identity,
        storage=shared_storage(cfg, account, facts, network, cluster, bucket, pod_identity),
        eks=EksAccess.of(cluster),
        network=TrackingNetwork(
            network.vpc_id, network.private_subnet_ids, cluster.cluster_security_group_id
        ),
    )


def placements(cfg: StackConfig, cluster: Cluster, node_groups: list[GpuNodeGroup]) -> dict[str, Placement]:
    """What one node of each group offers a job's pods (GPU facts as EC2 reports them)."""
    found = {SYSTEM_GROUP: config_system_placement(cfg, cluster.system_nodes)}
    for ng, g in zip(node_groups, cfg.gpu_node_groups, strict=True):
        found[g.name] = gpu_placement(
            g.name, g.instance_type, ng.gpu_count, ng.efa_count, ng.vcpus, ng.memory_gib, g.hourly_usd, ng
        )
    return found


def shared_storage(
    cfg: StackConfig,
    account: Account,
    facts: AccountFacts,
    network: Network,
    cluster: Cluster,
    bucket: ArtifactBucket,
    pods: TrainingPodIdentity,
) -> SharedStorage:
    """FSx for Lustre in the AZ of the groups that mount it (the account checks made sure it is
    one), and the datasets through Mountpoint."""
    fsx = None
    if cfg.fsx_groups:
        zone = facts.group_zones[sorted(cfg.fsx_groups)[0]]
        f = cfg.storage.fsx
        fsx = FsxCheckpoints(
            "checkpoints-fsx",
            FsxCheckpointsArgs(
                cluster=cluster,
                subnet_id=network.private_subnet_by_zone[zone],
                vpc_id=network.vpc_id,
                client_security_group_ids=[cluster.cluster_security_group_id],
                storage_capacity_gib=f.storage_capacity_gib,
                throughput_per_tib=f.throughput_per_tib,
                bucket=bucket,
                account_id=account.account_id,
                region=cfg.region,
                namespace=pods.namespace,
                namespace_name=pods.namespace_name,
                protect=cfg.storage.protect,
            ),
            account.opts,
        )
    datasets = None
    if cfg.storage.datasets_mount:
        datasets = S3Datasets(
            "datasets-s3",
            S3DatasetsArgs(
                cluster=cluster, bucket=bucket, namespace=pods.namespace, namespace_name=pods.namespace_name
            ),
            account.opts,
        )
    return SharedStorage(fsx, frozenset(cfg.fsx_groups), datasets)


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
            kubeconfig_path=str((PROJECT_ROOT / Path(e.kubeconfig).expanduser()).resolve())
            if e.kubeconfig
            else None,
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
        ),
        account.opts if account else None,
    )
    found = {SYSTEM_GROUP: config_system_placement(cfg)}
    found |= {g.name: catalog_placement(g, g.hourly_usd) for g in cfg.gpu_node_groups}
    return ComputePlane(
        provider=cluster.provider,
        system_nodes=None,
        placements=found,
        pod_identity=pod_identity,
        cluster_name=cluster.cluster_name,
        kubeconfig=cluster.kubeconfig,
        kubeconfig_file=cluster.kubeconfig_file,
        kube_context=cluster.context,
    )


def helm_operator(c) -> HelmOperator:
    return HelmOperator(c.enabled, c.version, c.values)


def operators_plane(cfg: StackConfig, compute: ComputePlane) -> ClusterOperators:
    ops = cfg.operators
    helm = helm_operator
    return ClusterOperators(
        "operators",
        ClusterOperatorsArgs(
            provider=compute.provider,
            system_nodes=compute.system_nodes,
            system_selector=compute.placements[SYSTEM_GROUP].node_selector,
            any_gpu=bool(cfg.gpu_node_groups),
            any_efa=any(g.efa for g in cfg.gpu_node_groups),
            nvidia_device_plugin=helm(ops.nvidia_device_plugin),
            efa_device_plugin=helm(ops.efa_device_plugin),
            kuberay=helm(ops.kuberay),
            training_operator_enabled=ops.training_operator.enabled,
            training_operator_ref=ops.training_operator.ref,
        ),
    )


def queueing_plane(cfg: StackConfig, compute: ComputePlane, operators: ClusterOperators) -> Queueing:
    by_group = compute.placements
    specs = [QueueSpec(by_group[SYSTEM_GROUP], cfg.system_node_count, provisioned=False)]
    specs += [
        QueueSpec(by_group[g.name], g.node_count, provisioned=cfg.autoscaled(g)) for g in cfg.gpu_node_groups
    ]
    q, cc = cfg.queueing, cfg.cluster
    pods = compute.pod_identity
    return Queueing(
        "queueing",
        QueueingArgs(
            provider=compute.provider,
            system_nodes=compute.system_nodes,
            operators=[r for r in (operators.training_operator, operators.kuberay_crds) if r is not None],
            namespace=pods.namespace,
            namespace_name=pods.namespace_name,
            queues=specs,
            kueue=helm_operator(cfg.operators.kueue),
            cluster_autoscaler=helm_operator(cfg.operators.cluster_autoscaler),
            cluster_name=eks_cluster_name(cfg),
            system_selector=by_group[SYSTEM_GROUP].node_selector,
            region=cfg.region,
            kubernetes_version=cc.kubernetes_version,
            idle_node_minutes=q.idle_node_minutes,
            pods_ready_timeout_minutes=q.pods_ready_timeout_minutes,
            max_node_provision_minutes=q.max_node_provision_minutes,
            autoscaler_identity=compute.autoscaler_identity.association
            if compute.autoscaler_identity
            else None,
        ),
    )


def tracking_plane(
    cfg: StackConfig, account: Account | None, build: BuildPlane, compute: ComputePlane
) -> Tracking | None:
    """The MLflow server jobs log to: the user's (its credentials in a Secret), or one the stack
    runs on the system nodes (only on its own cluster: the config refuses it elsewhere)."""
    t = cfg.tracking
    if not t.enabled:
        return None
    experiment = t.experiment_name(cfg.stack)
    if t.mode == "external":
        credentials = {"MLFLOW_TRACKING_TOKEN": cfg.tracking_token} if cfg.tracking_token else {}
        if cfg.tracking_password:
            credentials = {
                "MLFLOW_TRACKING_USERNAME": t.username,
                "MLFLOW_TRACKING_PASSWORD": cfg.tracking_password,
            }
        secret = training_secret(compute, "mlflow-credentials", credentials) if credentials else None
        return Tracking(
            JobTracking(
                t.uri, experiment, cfg.stack, secret.metadata.name if secret else None, tuple(credentials)
            )
        )
    server = TrackingServer(
        "tracking",
        TrackingServerArgs(
            provider=compute.provider,
            eks=compute.eks,
            system_selector=dict(compute.placements[SYSTEM_GROUP].node_selector),
            system_nodes=compute.system_nodes,
            bucket=build.bucket,
            database=t.server,
            network=compute.network,
            protect=cfg.storage.protect,
        ),
        account.opts,
    )
    return Tracking(JobTracking(server.uri, experiment, cfg.stack), server)


def tracking_outputs(tracking: Tracking | None) -> dict[str, Any]:
    if tracking is None:
        return {}
    found = {"trackingUri": tracking.job.uri, "trackingExperiment": tracking.job.experiment}
    if tracking.server is not None:  # no public endpoint: `trainstack` and people port-forward
        found["trackingPortForward"] = PORT_FORWARD
    return found


def jobs_plane(
    cfg: StackConfig,
    build: BuildPlane,
    compute: ComputePlane,
    operators: ClusterOperators,
    queues: Queueing,
    tracking: Tracking | None,
) -> list[TrainingJob]:
    pods, provider = compute.pod_identity, compute.provider
    hf_secret = None
    if cfg.hf_token is not None:
        hf_secret = training_secret(compute, "hf-token", {"HF_TOKEN": cfg.hf_token})
    by_group = compute.placements
    groups = {g.name: g for g in cfg.gpu_node_groups}
    jobs = []
    for j in cfg.jobs:
        env_secret = None
        if j.env and cfg.secret_job_env:
            env_secret = training_secret(compute, f"{j.name}-env", j.env)
        placement = by_group[j.node_group]
        group = groups.get(j.node_group)
        node_check = None
        if group is not None and group.checks_efa:
            node_check = NodeCheck(placement.gpus, placement.efa, group.min_bus_bandwidth_gbps)
        provisioned = group is not None and cfg.autoscaled(group)
        # Device plugins: a job's pods need the GPUs and EFA interfaces advertised.
        extra = [r for r in (hf_secret, env_secret, pods.association, *operators.device_plugins) if r]
        extra += storage_claims(compute.storage)
        jobs.append(
            TrainingJob(
                f"job-{j.name}",
                TrainingJobArgs(
                    spec=JobSpec(
                        j.name,
                        j.kind,
                        j.nodes,
                        j.model,
                        j.steps,
                        j.command,
                        j.args,
                        j.env,
                        j.wait,
                        j.timeout_minutes,
                        j.verl,
                    ),
                    placement=placement,
                    image=j.image or (VERL_IMAGE if j.verl else build.image_uri),
                    prep_image=build.image_uri,
                    checkpoints=checkpoints(cfg, build, compute.storage, j.node_group, j.name),
                    datasets_claim=compute.storage.datasets.claim_name
                    if compute.storage and compute.storage.datasets
                    else None,
                    namespace=pods.namespace_name,
                    service_account=pods.service_account_name,
                    provider=provider,
                    operator=operators.training_operator if j.kind == "PyTorchJob" else operators.kuberay,
                    queue=j.node_group,
                    provision_minutes=cfg.queueing.max_node_provision_minutes if provisioned else 0,
                    waits_for=[queues.local_queues[j.node_group], *extra],
                    env_secret=env_secret.metadata.name if env_secret else None,
                    hf_token_secret=hf_secret.metadata.name if hf_secret else None,
                    node_check=node_check,
                    head_selector=dict(by_group[SYSTEM_GROUP].node_selector),
                    tracking=tracking.job if tracking else None,
                ),
            )
        )
    return jobs


def training_secret(compute: ComputePlane, name: str, data: dict[str, str]) -> k8s.core.v1.Secret:
    """A Secret in the training namespace (its resource named as the object) that jobs read."""
    pods = compute.pod_identity
    return k8s.core.v1.Secret(
        name,
        metadata={"name": name, "namespace": pods.namespace_name},
        string_data={k: pulumi.Output.secret(v) for k, v in data.items()},
        opts=pulumi.ResourceOptions(provider=compute.provider, depends_on=[pods.namespace]),
    )


def storage_claims(storage: SharedStorage | None) -> list[pulumi.Resource]:
    """The claims a job's pods mount: they must be bound before the pods start."""
    if storage is None:
        return []
    return [s.claim for s in (storage.fsx, storage.datasets) if s is not None]


def checkpoints(
    cfg: StackConfig, build: BuildPlane, storage: SharedStorage | None, group: str, job: str
) -> Checkpoints:
    """A job's checkpoints: in the stack's bucket; on a kubeconfig stack on the nodes' shared path
    or under the user's S3 URI. A relaunch finds them under the same job name."""
    e = cfg.existing_cluster
    if storage is not None and storage.fsx is not None and group in storage.fsx_groups:
        # The file system exports to S3 itself: no per-rank upload, and a relaunch finds them there.
        return Checkpoints(claim=storage.fsx.claim_name, sub_path=f"{CHECKPOINT_PREFIX}{job}")
    if e.checkpoint_host_path:
        return Checkpoints(host_path=f"{e.checkpoint_host_path.rstrip('/')}/{job}")
    if e.s3:
        return Checkpoints(f"{e.s3.uri.rstrip('/')}/{CHECKPOINT_PREFIX}{job}/", e.s3.credentials_secret)
    return Checkpoints(pulumi.Output.concat("s3://", build.bucket.bucket_name, f"/{CHECKPOINT_PREFIX}{job}/"))


def ci_outputs(ci: GitHubCiAccess | None) -> dict[str, Any]:
    """The values to put in the repository's variables (see the README's CI section)."""
    if ci is None:
        return {}
    return {
        "ciOidcProviderArn": ci.provider_arn,
        "ciPreviewRoleArn": ci.preview_role.arn,
        "ciDeployRoleArn": ci.deploy_role.arn,
    }


def outputs(
    cfg: StackConfig,
    build: BuildPlane,
    compute: ComputePlane,
    operators: ClusterOperators,
    queues: Queueing,
    jobs: list[TrainingJob],
) -> dict[str, Any]:
    pods = compute.pod_identity
    found = {
        "clusterName": compute.cluster_name,
        "trainingNamespace": pods.namespace_name,
        "trainingServiceAccount": pods.service_account_name,
        "gpuNodeGroups": gpu_group_outputs(cfg, compute),
        "operators": {
            **{
                key: f"{r.namespace}/{r.release}"
                for key, r in (operators.installed_charts | queues.installed_charts).items()
            },
            "trainingOperator": operators.training_operator_url,
        },
        "jobs": {j.spec_name: j.summary for j in jobs},
        "gpusTotal": sum(compute.placements[g.name].gpus * g.node_count for g in cfg.gpu_node_groups),
    }
    if compute.kubeconfig is not None:
        found["kubeconfig"] = compute.kubeconfig
    if compute.kubeconfig_file is not None:  # the user's own file: `trainstack` reads it from there
        found["kubeconfigFile"] = compute.kubeconfig_file
        found["kubeContext"] = compute.kube_context
    if pods.role_arn is not None:
        found["trainingRoleArn"] = pods.role_arn
    if build.bucket is not None:
        found["bucketName"] = build.bucket.bucket_name
    if build.registry is not None:
        found["repositoryUrl"] = build.registry.repository_url
    if build.image is not None:
        found["imageUri"] = build.image.image_uri
    return found


def gpu_group_outputs(cfg: StackConfig, compute: ComputePlane) -> dict[str, dict[str, Any]]:
    created = {ng.group_name: ng for ng in compute.node_groups}
    found = {}
    for g in cfg.gpu_node_groups:
        p, ng = compute.placements[g.name], created.get(g.name)
        autoscaled = ng is not None and ng.autoscaled
        found[g.name] = {
            # The stack's node group, or (existing cluster) how its nodes are found.
            **({"nodeGroupName": ng.node_group_name} if ng else {"nodeSelector": dict(p.node_selector)}),
            "instanceType": g.instance_type,
            "nodes": g.node_count,
            "minNodes": g.min_nodes if autoscaled else g.node_count,
            "autoscaled": autoscaled,
            "gpusPerNode": p.gpus,
            "efaInterfacesPerNode": p.efa,
        }
    return found
