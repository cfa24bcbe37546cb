"""`StackConfig`: the whole typed config of one stack, one field per top-level key, each plane's
settings in its own module; `load_config` (the package) reads and checks it."""

from __future__ import annotations

from dataclasses import dataclass

from config.build import ImageConfig, RegistryConfig, StorageConfig
from config.ci import CiConfig
from config.cluster import ClusterConfig
from config.datasets import DatasetConfig
from config.existing import ExistingClusterConfig
from config.jobs import JobConfig
from config.network import NetworkConfig
from config.node_groups import GpuNodeGroupConfig, default_gpu_node_groups
from config.operators import OperatorsConfig
from config.queueing import QueueingConfig
from config.schema import setting
from config.tracking import TrackingConfig
from conventions import TRAINING_NAMESPACE
from domain.catalog import image_compressed_gb, image_pull_minutes
from domain.node_health import (
    AUTOSCALER_NODE_STARTUP_MINUTES,
    DCGM_LEVELS,
    DEFAULT_DCGM_LEVEL,
    HealthMode,
    autoscaler_startup_minutes,
    burn_in_minutes,
    default_mode,
    startup_flag,
)


@dataclass(frozen=True)
class StackConfig:
    stack: str
    region: str
    aws_profile: str | None = None
    secret_job_env: bool = False  # `trainstack:jobs` holds a secret: every job env value is one
    tags: dict[str, str] = setting("tags", "Tags added to every AWS resource.", factory=dict)
    network: NetworkConfig = setting("network", "VPC and subnets.", factory=NetworkConfig)
    existing_cluster: ExistingClusterConfig = setting(
        "existingCluster",
        "A cluster trainstack did not create to deploy onto (then network and cluster are unused).",
        factory=ExistingClusterConfig,
    )
    cluster: ClusterConfig = setting("cluster", "EKS control plane and system nodes.", factory=ClusterConfig)
    gpu_node_groups: tuple[GpuNodeGroupConfig, ...] = setting(
        "gpuNodeGroups",
        "Node groups, one entry each: GPU groups, and CPU groups (gpu: false). May be empty: CPU jobs "
        "then run on the system nodes.",
        factory=default_gpu_node_groups,
    )
    image: ImageConfig = setting("image", "Training image build.", factory=ImageConfig)
    registry: RegistryConfig = setting("registry", "ECR repository.", factory=RegistryConfig)
    storage: StorageConfig = setting(
        "storage", "S3 bucket for build contexts, artifacts, checkpoints.", factory=StorageConfig
    )
    operators: OperatorsConfig = setting(
        "operators", "Cluster operators installed by the stack.", factory=OperatorsConfig
    )
    queueing: QueueingConfig = setting(
        "queueing", "Kueue admission and cluster autoscaler timings.", factory=QueueingConfig
    )
    ci: CiConfig = setting(
        "ci", "GitHub Actions access through OIDC (off unless githubRepository is set).", factory=CiConfig
    )
    tracking: TrackingConfig = setting(
        "tracking",
        "MLflow experiment tracking: an existing server, or one the stack runs.",
        factory=TrackingConfig,
    )
    datasets: tuple[DatasetConfig, ...] = setting(
        "datasets",
        "Text datasets tokenized once into the bucket (datasets/<name>/<spec digest>/) by a Job the stack "
        "runs; a changed spec prepares them again beside the old files.",
        factory=tuple,
    )
    jobs: tuple[JobConfig, ...] = setting("jobs", "Training jobs the stack launches.", factory=tuple)
    hf_token: str | None = setting(
        "hfToken",
        "Hugging Face token (a secret), given to jobs as HF_TOKEN through a Kubernetes Secret.",
        None,
    )
    tracking_token: str | None = setting(
        "trackingToken",
        "Bearer token for tracking.uri (a secret), given to jobs as MLFLOW_TRACKING_TOKEN.",
        None,
    )
    tracking_password: str | None = setting(
        "trackingPassword",
        "Basic-auth password for tracking.uri with tracking.username (a secret), as MLFLOW_TRACKING_PASSWORD.",
        None,
    )
    docker_hub_access_token: str | None = setting(
        "dockerHubAccessToken",
        "Docker Hub access token (a secret: `pulumi config set --secret`); see image.dockerHubUsername.",
        None,
    )

    @property
    def fsx_groups(self) -> tuple[str, ...]:
        """GPU groups whose jobs keep checkpoints on the FSx file system (none when it is off)."""
        fsx = self.storage.fsx
        if not fsx.enabled:
            return ()
        return fsx.node_groups or tuple(g.name for g in self.gpu_node_groups)

    @property
    def training_namespace(self) -> str:
        """Where jobs, their queues and Secrets go: the stack's own `training` on its cluster."""
        return self.existing_cluster.namespace if self.existing_cluster.named else TRAINING_NAMESPACE

    @property
    def system_node_count(self) -> int:
        """System nodes CPU jobs may use: the system group's at creation, or the described ones."""
        if self.existing_cluster.named:
            return self.existing_cluster.system_nodes.count
        return self.cluster.system_node_group.desired_size

    @property
    def fenced_after_seconds(self) -> int:
        """How long a hung GPU node holds a job's pods before the stack's fence acts
        (components/node_fence.py); 0 where it runs no fence: a cluster it did not create, no GPU
        group, no image of its own to run it in, or the setting off."""
        runs = not self.existing_cluster.named and bool(self.gpu_node_groups) and self.image.builder != "none"
        return self.cluster.fence_hung_nodes_after_seconds if runs else 0

    def health_mode(self, group: GpuNodeGroupConfig) -> HealthMode:
        """The group's health gate (components/health_gate.py): as set, else by its family where the
        gate can run: a cluster the stack created, a GPU group, the stack's own image to run the gate
        in, and the node monitoring agent, whose DCGM host engine the burn-in asks and whose
        conditions the watch reads."""
        if group.health.mode is not None:
            return group.health.mode
        runs = (
            not self.existing_cluster.named
            and group.gpu
            and self.image.builder != "none"
            and self.cluster.node_monitoring_agent
        )
        return default_mode(group.instance_type) if runs else "off"

    def burn_in_minutes(self, group: GpuNodeGroupConfig) -> float:
        """What the health gate's burn-in holds a fresh node of the group, its image pull aside; 0
        where the group is not burnt in. Two fresh nodes of an EFA group also run an all-reduce
        together (workload/trainer/health_gate.py)."""
        level = self.dcgm_level(group)
        if self.health_mode(group) != "burnIn" or group.facts is None or level not in DCGM_LEVELS:
            return 0.0
        return burn_in_minutes(level, group.instance, group.efa and group.node_count >= 2)

    def dcgm_level(self, group: GpuNodeGroupConfig) -> int:
        """The group's DCGM level: as set, else 2, or 1 where 2 would outlast the 15 minutes an
        autoscaler without `--max-node-startup-time` (Kubernetes 1.33, 1.34) waits for a new node."""
        if group.health.dcgm_level is not None:
            return group.health.dcgm_level
        if group.facts is None or startup_flag(self.cluster.kubernetes_version) or not self.autoscaled(group):
            return DEFAULT_DCGM_LEVEL
        pull = image_pull_minutes(image_compressed_gb(self.image.base_image))
        pairs = group.efa and group.node_count >= 2
        fits = (
            pull + burn_in_minutes(DEFAULT_DCGM_LEVEL, group.instance, pairs)
            <= AUTOSCALER_NODE_STARTUP_MINUTES
        )
        return DEFAULT_DCGM_LEVEL if fits or group.min_nodes >= group.node_count else 1

    def autoscaler_startup_minutes(self) -> int | None:
        """The autoscaler's `--max-node-startup-time` where a burnt-in group it scales needs longer
        than its 15-minute default (None: the default will do)."""
        if not startup_flag(self.cluster.kubernetes_version):
            return None  # its autoscaler has no such flag (config/checks.py keeps burn-ins inside 15 min)
        pull = image_pull_minutes(image_compressed_gb(self.image.base_image))
        gates = [
            pull + m for g in self.gpu_node_groups if self.autoscaled(g) and (m := self.burn_in_minutes(g))
        ]
        return autoscaler_startup_minutes(gates)

    def autoscaled(self, group: GpuNodeGroupConfig) -> bool:
        """The cluster autoscaler sizes the group per job from its minNodes; else it keeps every node."""
        return (
            self.operators.cluster_autoscaler.enabled
            and not group.sized_by_eks
            and not self.existing_cluster.named  # its node groups are not the stack's to scale
        )
