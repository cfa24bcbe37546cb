"""The typed stack config: one schema for everything a `Pulumi.<stack>.yaml` can set.

`load_config` reads the Pulumi config of the running stack, checks it and returns a frozen
`StackConfig`, or raises one `ConfigError` that lists every problem. It runs before any resource
is registered. Defaults describe the cheap `dev` stack: one g6.xlarge node, no EFA.
"""

from __future__ import annotations

import dataclasses
import difflib
import ipaddress
import json
import re
import typing
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pulumi

from stacks.catalog import CPU_INSTANCE_TYPES, GPU_INSTANCE_TYPES, INSTANCE_TYPES, SUPPORTED_REGIONS
from stacks.schema import ABSENT, ConfigError, Problem, Reader, describe, setting

PROJECT = "trainstack"
PROJECT_ROOT = Path(__file__).resolve().parent.parent
REGION_KEY = "aws:region"
PROFILE_KEY = "aws:profile"

# Add-on versions are pinned per Kubernetes version: the latest EKS add-on builds in the EKS user
# guide's version tables (vpc-cni, coredns, kube-proxy; the agent from public pins). Check a pin with
# `aws eks describe-addon-versions --kubernetes-version <v> --addon-name <name>`.
EKS_ADDON_VERSIONS: dict[str, dict[str, str]] = {
    "1.33": {
        "vpc-cni": "v1.20.1-eksbuild.3",
        "coredns": "v1.12.4-eksbuild.1",
        "kube-proxy": "v1.33.5-eksbuild.2",
        "eks-pod-identity-agent": "v1.3.9-eksbuild.3",
    },
    "1.34": {
        "vpc-cni": "v1.20.1-eksbuild.3",
        "coredns": "v1.12.4-eksbuild.1",
        "kube-proxy": "v1.34.1-eksbuild.2",
        "eks-pod-identity-agent": "v1.3.9-eksbuild.3",
    },
}

KubernetesVersion = Literal["1.33", "1.34"]
CapacityType = Literal["ON_DEMAND", "SPOT", "CAPACITY_BLOCK"]
JobKind = Literal["PyTorchJob", "RayJob", "RayCluster"]
WaitMode = Literal["none", "running", "succeeded"]
ControlPlaneLog = Literal["api", "audit", "authenticator", "controllerManager", "scheduler"]
ComputeType = Literal[
    "BUILD_GENERAL1_SMALL",
    "BUILD_GENERAL1_MEDIUM",
    "BUILD_GENERAL1_LARGE",
    "BUILD_GENERAL1_XLARGE",
    "BUILD_GENERAL1_2XLARGE",
]


@dataclass(frozen=True)
class NetworkConfig:
    vpc_cidr: str = setting("vpcCidr", "CIDR of the VPC trainstack creates (/16 to /20).", "10.0.0.0/16")
    availability_zones: int = setting("availabilityZones", "AZs to spread subnets over (2-6).", 2)
    nat_gateways: Literal["single", "onePerAz"] = setting(
        "natGateways", "One NAT gateway for the VPC (cheap) or one per AZ (resilient).", "single"
    )
    existing_vpc_id: str | None = setting(
        "existingVpcId", "Use this VPC instead of creating one (then list its subnets).", None
    )
    existing_private_subnet_ids: tuple[str, ...] = setting(
        "existingPrivateSubnetIds", "Private subnets of the existing VPC, two AZs or more.", factory=tuple
    )
    existing_public_subnet_ids: tuple[str, ...] = setting(
        "existingPublicSubnetIds", "Public subnets of the existing VPC (load balancers).", factory=tuple
    )


@dataclass(frozen=True)
class SystemNodeGroupConfig:
    instance_type: str = setting("instanceType", "CPU instance type for operators.", "m6i.large")
    min_size: int = setting("minSize", "Smallest node count.", 1)
    desired_size: int = setting("desiredSize", "Node count at creation.", 2)
    max_size: int = setting("maxSize", "Largest node count.", 3)
    disk_size_gib: int = setting("diskSizeGiB", "Root volume size in GiB (20-1000).", 50)


@dataclass(frozen=True)
class ClusterConfig:
    kubernetes_version: KubernetesVersion = setting(
        "kubernetesVersion", "EKS Kubernetes version; add-ons are pinned per version.", "1.33"
    )
    endpoint_public_access: bool = setting("endpointPublicAccess", "Expose the API endpoint publicly.", True)
    endpoint_private_access: bool = setting(
        "endpointPrivateAccess", "Expose the API endpoint inside the VPC.", True
    )
    public_access_cidrs: tuple[str, ...] = setting(
        "publicAccessCidrs", "CIDRs allowed to reach the public endpoint.", factory=lambda: ("0.0.0.0/0",)
    )
    admin_principals: tuple[str, ...] = setting(
        "adminPrincipals", "IAM role/user ARNs granted cluster admin through access entries.", factory=tuple
    )
    control_plane_logs: tuple[ControlPlaneLog, ...] = setting(
        "controlPlaneLogs",
        "Control-plane log types sent to CloudWatch.",
        factory=lambda: ("api", "audit", "authenticator"),
    )
    system_node_group: SystemNodeGroupConfig = setting(
        "systemNodeGroup", "CPU node group for cluster operators.", factory=SystemNodeGroupConfig
    )


@dataclass(frozen=True)
class GpuNodeGroupConfig:
    name: str = setting("name", "Node group name (lowercase, digits, '-'; at most 32).")
    instance_type: str = setting("instanceType", "NVIDIA GPU instance type from the catalog.")
    node_count: int = setting("nodeCount", "Number of nodes (1-64).", 1)
    efa: bool = setting("efa", "Attach EFA interfaces (instance type must support EFA).", False)
    capacity_type: CapacityType = setting("capacityType", "How the nodes are bought.", "ON_DEMAND")
    capacity_reservation_id: str | None = setting(
        "capacityReservationId", "Capacity reservation or Capacity Block id (cr-...).", None
    )
    placement_group: bool = setting(
        "placementGroup", "Put nodes in a cluster placement group (not with a reservation).", False
    )
    disk_size_gib: int = setting("diskSizeGiB", "Root volume size in GiB (50-16384).", 200)
    preflight: bool | None = setting(
        "preflight",
        "Check GPUs, EFA and all-reduce bandwidth before the first job (default: on with EFA).",
        None,
    )
    preflight_min_bus_bandwidth: int | None = setting(
        "preflightMinBusBandwidthGBps",
        "Preflight floor for all-reduce bus bandwidth (default: half the instance's network, in GB/s).",
        None,
    )
    availability_zone: str | None = setting(
        "availabilityZone",
        "AZ of the group's nodes (required with a reservation); default: a VPC AZ offering the type.",
        None,
    )

    @property
    def instance(self):
        return INSTANCE_TYPES[self.instance_type]


@dataclass(frozen=True)
class ImageConfig:
    builder: Literal["codebuild", "docker"] = setting(
        "builder", "Build in AWS CodeBuild, or locally with Docker (pulumi-docker).", "codebuild"
    )
    context: str = setting("context", "Build context directory, relative to the project.", "workload")
    base_image: str = setting(
        "baseImage",
        "CUDA PyTorch base image (Dockerfile BASE_IMAGE).",
        "pytorch/pytorch:2.9.1-cuda12.8-cudnn9-devel",
    )
    compute_type: ComputeType = setting("computeType", "CodeBuild compute type.", "BUILD_GENERAL1_LARGE")
    build_timeout_minutes: int = setting("buildTimeoutMinutes", "CodeBuild build timeout (5-480).", 60)
    nightly_rebuild: bool = setting("nightlyRebuild", "Rebuild every night (EventBridge schedule).", False)
    source_repository: str | None = setting(
        "sourceRepository", "GitHub HTTPS URL; when set, pushes trigger builds (webhook).", None
    )
    docker_hub_username: str | None = setting(
        "dockerHubUsername",
        "Docker Hub user for an ECR pull-through cache of the base image (with dockerHubAccessToken).",
        None,
    )


@dataclass(frozen=True)
class RegistryConfig:
    untagged_expiry_days: int = setting("untaggedExpiryDays", "Expire untagged images after N days.", 7)
    keep_last_images: int = setting("keepLastImages", "Keep only the newest N images.", 30)
    force_delete: bool = setting("forceDelete", "Allow deleting the repository with its images.", False)


@dataclass(frozen=True)
class StorageConfig:
    encryption: Literal["SSE-S3", "KMS"] = setting("encryption", "Bucket encryption.", "SSE-S3")
    checkpoint_retention_days: int = setting(
        "checkpointRetentionDays", "Expire checkpoints after N days (0 keeps them).", 30
    )
    build_context_retention_days: int = setting(
        "buildContextRetentionDays", "Keep superseded build contexts N days (the current one stays).", 14
    )
    protect: bool = setting(
        "protect", "Protect the bucket and registry from deletion (Pulumi protect, no force-destroy).", False
    )


@dataclass(frozen=True)
class JobConfig:
    name: str = setting("name", "Job name (Kubernetes name; at most 47 for Ray kinds).")
    kind: JobKind = setting("kind", "What to launch.")
    node_group: str = setting(
        "nodeGroup", "GPU node group the job runs on, or `system` for a CPU-only (gloo) job."
    )
    nodes: int = setting("nodes", "Nodes the job uses (at most the group's nodeCount).", 1)
    model: Literal["tiny", "small", "1b"] = setting("model", "Model size the default trainer trains.", "tiny")
    steps: int = setting("steps", "Optimizer steps of the default trainer (1-10000000).", 100)
    image: str | None = setting("image", "Container image (default: the image the stack builds).", None)
    command: tuple[str, ...] = setting(
        "command", "Container command (default: the workload's trainer for the kind).", factory=tuple
    )
    args: tuple[str, ...] = setting(
        "args", "Arguments appended to the trainer's (or to `command`).", factory=tuple
    )
    env: dict[str, str] = setting(
        "env",
        "Extra environment variables (kept in a Kubernetes Secret if `jobs` is a secret).",
        factory=dict,
    )
    wait: WaitMode = setting("wait", "What `pulumi up` waits for.", "running")
    timeout_minutes: int = setting("timeoutMinutes", "How long `pulumi up` waits (1-10080).", 60)


@dataclass(frozen=True)
class HelmOperatorConfig:
    enabled: bool = setting("enabled", "Install it (off where the cluster already runs one).", True)
    version: str | None = setting("version", "Chart version (default: the one trainstack pins).", None)
    values: dict[str, Any] = setting("values", "Chart values merged over trainstack's.", factory=dict)


@dataclass(frozen=True)
class TrainingOperatorConfig:
    enabled: bool = setting("enabled", "Install it (off where the cluster already runs one).", True)
    ref: str | None = setting(
        "ref", "Full commit SHA of kubeflow/trainer to install from (default: v1.9.4's).", None
    )


@dataclass(frozen=True)
class OperatorsConfig:
    nvidia_device_plugin: HelmOperatorConfig = setting(
        "nvidiaDevicePlugin", "NVIDIA device plugin (Helm), on GPU nodes.", factory=HelmOperatorConfig
    )
    efa_device_plugin: HelmOperatorConfig = setting(
        "efaDevicePlugin",
        "EFA device plugin (Helm), on EFA nodes; only with an EFA group.",
        factory=HelmOperatorConfig,
    )
    training_operator: TrainingOperatorConfig = setting(
        "trainingOperator",
        "Kubeflow training operator v1 (PyTorchJob), on system nodes.",
        factory=TrainingOperatorConfig,
    )
    kuberay: HelmOperatorConfig = setting(
        "kuberay", "KubeRay operator (Helm; RayJob, RayCluster), on system nodes.", factory=HelmOperatorConfig
    )


@dataclass(frozen=True)
class CiConfig:
    github_repository: str | None = setting(
        "githubRepository", "owner/repo whose GitHub Actions may preview and deploy this stack (OIDC).", None
    )
    github_owner_id: int | None = setting(
        "githubOwnerId", "Numeric owner id: also trust the immutable OIDC subject format.", None
    )
    github_repository_id: int | None = setting(
        "githubRepositoryId", "Numeric repository id (with githubOwnerId).", None
    )
    environment: str | None = setting(
        "environment",
        "GitHub environment that previews and deploys this stack (prod); unset: PRs preview, `branch` deploys.",
        None,
    )
    branch: str = setting(
        "branch", "Branch whose pushes deploy the stack when no environment is set.", "main"
    )
    oidc_provider_arn: str | None = setting(
        "oidcProviderArn", "The account's GitHub OIDC provider, when another stack created it.", None
    )
    secrets_key_arn: str | None = setting(
        "secretsKeyArn",
        "KMS key of the stack's awskms secrets provider: the preview role may decrypt it.",
        None,
    )


def _default_gpu_node_groups() -> tuple[GpuNodeGroupConfig, ...]:
    return (GpuNodeGroupConfig(name="gpu", instance_type="g6.xlarge"),)


@dataclass(frozen=True)
class StackConfig:
    stack: str
    region: str
    aws_profile: str | None = None
    secret_job_env: bool = False  # `trainstack:jobs` holds a secret: every job env value is one
    tags: dict[str, str] = setting("tags", "Tags added to every AWS resource.", factory=dict)
    network: NetworkConfig = setting("network", "VPC and subnets.", factory=NetworkConfig)
    cluster: ClusterConfig = setting("cluster", "EKS control plane and system nodes.", factory=ClusterConfig)
    gpu_node_groups: tuple[GpuNodeGroupConfig, ...] = setting(
        "gpuNodeGroups", "GPU node groups, one entry each.", factory=_default_gpu_node_groups
    )
    image: ImageConfig = setting("image", "Training image build.", factory=ImageConfig)
    registry: RegistryConfig = setting("registry", "ECR repository.", factory=RegistryConfig)
    storage: StorageConfig = setting(
        "storage", "S3 bucket for build contexts, artifacts, checkpoints.", factory=StorageConfig
    )
    operators: OperatorsConfig = setting(
        "operators", "Cluster operators installed by the stack.", factory=OperatorsConfig
    )
    ci: CiConfig = setting(
        "ci", "GitHub Actions access through OIDC (off unless githubRepository is set).", factory=CiConfig
    )
    jobs: tuple[JobConfig, ...] = setting("jobs", "Training jobs the stack launches.", factory=tuple)
    hf_token: str | None = setting(
        "hfToken",
        "Hugging Face token (a secret), given to jobs as HF_TOKEN through a Kubernetes Secret.",
        None,
    )
    docker_hub_access_token: str | None = setting(
        "dockerHubAccessToken",
        "Docker Hub access token (a secret: `pulumi config set --secret`); see image.dockerHubUsername.",
        None,
    )


TOP_LEVEL = [f for f in StackConfig.__dataclass_fields__.values() if "key" in f.metadata]

# Kubernetes DNS-1123 labels; node groups are also part of AWS names, so they get a tighter bound.
# Whole-string patterns over ASCII classes only (always used with fullmatch): `$` would accept a
# trailing newline, and `\d`/`\w` non-ASCII digits and letters.
_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_PRINCIPAL = re.compile(r"arn:aws[-a-z]*:iam::[0-9]{12}:(role|user)/[A-Za-z0-9_+=,.@/-]+")
_ZONE = re.compile(r"[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-[0-9][a-z]")
_RESERVATION = re.compile(r"cr-[0-9a-f]{17}")
_VPC = re.compile(r"vpc-[0-9a-f]{8,17}")
_SUBNET = re.compile(r"subnet-[0-9a-f]{8,17}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_GITHUB = re.compile(r"https://github\.com/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+(\.git)?")
NAME_RULE = "lowercase letters, digits and '-', starting with a letter and ending with a letter or digit"
MAX_NODE_GROUP_NAME = 32
MAX_JOB_NAME = {"PyTorchJob": 63, "RayJob": 47, "RayCluster": 47}


def _closest(key: str, valid: list[str]) -> str:
    found = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    if not found:  # try the part after the namespace: `trainstak:storage` -> trainstack:storage
        tail = key.partition(":")[2]
        found = difflib.get_close_matches(tail, [v.partition(":")[2] for v in valid], n=1, cutoff=0.6)
        found = [v for v in valid if found and v.partition(":")[2] == found[0]]
    return f" (did you mean {found[0]}?)" if found else ""


def load_config(stack: str | None = None) -> StackConfig:
    """Read and check the running stack's config (from the Pulumi engine or the offline plan).

    A live run also refuses template values (see `template_values`); the offline plan renders
    them and lists them as warnings, so a template stack such as prod can still be planned."""
    from pulumi.runtime import config as rc

    stack = stack or pulumi.get_stack()
    keys = set(rc.CONFIG.get()) | set(rc.get_config_env())
    values = {k: rc.get_config(k) for k in keys}
    config = parse_config(stack, values, frozenset(k for k in keys if rc.is_config_secret(k)))
    if not _under_mock_engine():
        placeholders = template_values(config)
        if placeholders:
            raise ConfigError(stack, placeholders)
    return config


def _under_mock_engine() -> bool:
    from pulumi.runtime import mocks, settings

    return isinstance(settings.get_monitor(), mocks.MockMonitor)


# Values that only ever appear in documentation: RFC 5737 address blocks and the AWS docs' accounts.
DOCUMENTATION_NETWORKS = tuple(
    ipaddress.IPv4Network(n) for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24")
)
EXAMPLE_ACCOUNTS = ("123456789012", "111122223333", "444455556666", "777788889999")


def template_values(c: StackConfig) -> list[Problem]:
    """Settings a template stack file carries that no real deployment can use."""
    k = f"{PROJECT}:cluster"
    found = []
    if c.cluster.endpoint_public_access:
        for i, cidr in enumerate(c.cluster.public_access_cidrs):
            net = ipaddress.IPv4Network(cidr, strict=False)
            if any(net.subnet_of(doc) for doc in DOCUMENTATION_NETWORKS):
                found.append(
                    Problem(
                        f"{k}.publicAccessCidrs[{i}]",
                        cidr,
                        "a documentation address range: nothing there can reach the API endpoint, so "
                        "Pulumi could not reach the cluster it creates",
                        "the egress CIDR of the machines that run `pulumi up` (your network, CI runners), "
                        "or 0.0.0.0/0",
                    )
                )
    for i, arn in enumerate(c.cluster.admin_principals):
        if arn.split(":")[4] in EXAMPLE_ACCOUNTS:
            found.append(
                Problem(
                    f"{k}.adminPrincipals[{i}]",
                    arn,
                    "an example account from the AWS documentation",
                    "an IAM role or user of your account, or remove the entry",
                )
            )
    return found


# Keys whose values must be Pulumi secrets (encrypted in the stack file and the state).
SECRET_KEYS = (f"{PROJECT}:dockerHubAccessToken", f"{PROJECT}:hfToken")
SYSTEM_GROUP = "system"  # the system node group's name in job configs


def parse_config(
    stack: str, values: dict[str, str], secret_keys: frozenset[str] = frozenset()
) -> StackConfig:
    """Parse a flat Pulumi config map (`trainstack:key` -> JSON or plain string)."""
    reader = Reader()
    for key in SECRET_KEYS:
        if key in values and key not in secret_keys:
            reader.problem(
                key,
                "(plain text)",
                "must be a secret: a plain value would be stored unencrypted",
                f"pulumi config set --secret {key.partition(':')[2]} <value>",
            )
    known = {f.metadata["key"] for f in TOP_LEVEL}
    valid = sorted([f"{PROJECT}:{k}" for k in known] + [REGION_KEY, PROFILE_KEY])
    for full_key in sorted(values):
        ns, _, key = full_key.partition(":")
        if ns == PROJECT and key not in known:
            reader.problem(
                full_key, values[full_key], f"unknown key{_closest(full_key, valid)}", ", ".join(valid)
            )
        elif ns not in (PROJECT, "aws", "pulumi"):
            # A misspelt namespace would drop its whole section silently (protection off, say).
            reader.problem(
                full_key,
                values[full_key],
                f"unknown namespace '{ns}'{_closest(full_key, valid)}",
                f"keys under {PROJECT}:, aws:region, aws:profile",
            )

    for full_key in sorted(values):
        if full_key.startswith("aws:") and full_key not in (REGION_KEY, PROFILE_KEY):
            # The stack's explicit AWS provider, and the image build's boto3 calls, read only these:
            # anything else would be silently ignored by one of them.
            reader.problem(
                full_key,
                "(set)",
                "trainstack's AWS provider and image build read only aws:region and aws:profile",
                "aws:profile naming a profile (role_arn/source_profile there for an assumed role), "
                "or AWS_* environment variables",
            )
    region = values.get(REGION_KEY)
    if region is None:
        reader.problem(
            REGION_KEY,
            None,
            "required (the AWS provider and the catalog need it)",
            "a region such as us-east-1",
        )
        region = ""
    elif region not in SUPPORTED_REGIONS:
        reader.problem(REGION_KEY, region, "not a region trainstack supports", ", ".join(SUPPORTED_REGIONS))

    kwargs: dict = {}
    hints = typing.get_type_hints(StackConfig)
    for f in TOP_LEVEL:
        full_key = f"{PROJECT}:{f.metadata['key']}"
        if full_key not in values:
            continue
        raw = values[full_key]
        if hints[f.name] in (str, str | None):  # plain strings are passed as they are
            data = raw
        else:
            try:
                data = json.loads(raw) if isinstance(raw, str) else raw
            except (json.JSONDecodeError, RecursionError, ValueError):
                reader.shape_problem(full_key, raw, "not valid structured config", "a YAML object or list")
                continue
        read = reader.read_field(hints[f.name], data, full_key)
        if read is not ABSENT and read is not None:
            kwargs[f.name] = read
    config = StackConfig(
        stack=stack,
        region=region,
        aws_profile=values.get(PROFILE_KEY),
        secret_job_env=f"{PROJECT}:jobs" in secret_keys,
        **kwargs,
    )
    _check(config, reader)
    if reader.problems:
        raise ConfigError(stack, reader.problems)
    return config


def _check(c: StackConfig, r: Reader) -> None:
    """Value and cross-field rules. They run on every value that parsed (a malformed one keeps its
    default); problems about a malformed key, or rules leaning on malformed groups, stay quiet."""
    checks = Reader()
    groups_sound = not any(
        r.under_malformed(k) or k.startswith((f"{PROJECT}:gpuNodeGroups", f"{PROJECT}:cluster"))
        for k in r.malformed_keys
    )
    _check_values(c, checks, groups_sound)
    r.problems += [p for p in checks.problems if not r.under_malformed(p.key)]


_TAG_PUNCTUATION = set(" _.:/=+-@")


def _aws_tag_text(text: str) -> bool:
    """AWS tags allow letters, digits, spaces and _ . : / = + - @ (no control characters)."""
    return all(ch.isalnum() or ch in _TAG_PUNCTUATION for ch in text)


def _check_values(c: StackConfig, r: Reader, groups_sound: bool) -> None:
    p = PROJECT
    for k, v in c.tags.items():
        if (
            k.lower().startswith("aws:")
            or not 1 <= len(k) <= 128
            or len(v) > 256
            or not (_aws_tag_text(k) and _aws_tag_text(v))
        ):
            r.problem(
                f"{p}:tags.{k}",
                v,
                "not a valid AWS tag",
                "keys of 1-128 characters not starting with 'aws:', values up to 256, of letters, digits, "
                "spaces and _ . : / = + - @",
            )

    _check_network(c.network, r)
    _check_cluster(c.cluster, r)

    groups = c.gpu_node_groups
    if not groups:
        r.problem(f"{p}:gpuNodeGroups", [], "at least one GPU node group is needed", "a list of node groups")
    for name, n in Counter(g.name for g in groups).items():
        if n > 1:
            r.problem(f"{p}:gpuNodeGroups", name, f"name used by {n} node groups", "unique names")
    for i, g in enumerate(groups):
        _check_node_group(g, c.region, f"{p}:gpuNodeGroups[{i}]", r)

    by_name = {g.name: g for g in groups}
    for name, n in Counter(j.name for j in c.jobs).items():
        if n > 1:
            r.problem(f"{p}:jobs", name, f"name used by {n} jobs", "unique names")
    if not groups_sound:
        by_name = {}
    waited: Counter[str] = Counter()
    waited_jobs: Counter[str] = Counter()
    for j in c.jobs:
        if j.wait != "none":
            waited[j.node_group] += j.nodes
            waited_jobs[j.node_group] += 1
    for name, needed in waited.items():
        have = by_name[name].node_count if name in by_name else c.cluster.system_node_group.desired_size
        # One job too large for its group is reported on its own `nodes`.
        if name in by_name and waited_jobs[name] > 1 and needed > have:
            r.problem(
                f"{p}:jobs",
                name,
                f"the jobs `pulumi up` waits for on node group '{name}' need {needed} nodes at once; "
                f"it has {have}, so some would never start",
                "wait: none for jobs that may queue, fewer nodes, or a larger nodeCount",
            )
    for i, j in enumerate(c.jobs):
        _check_job(
            j,
            by_name if groups_sound else None,
            c.cluster.system_node_group.desired_size,
            c.operators,
            f"{p}:jobs[{i}]",
            r,
        )

    img = c.image
    if not _build_context_ok(img.context):
        r.problem(
            f"{p}:image.context",
            img.context,
            "no Dockerfile in that directory",
            "a directory of this project holding a Dockerfile",
        )
    if not _IMAGE_REF.fullmatch(img.base_image):
        r.problem(
            f"{p}:image.baseImage",
            img.base_image,
            "not an image reference",
            "[registry/]repository[:tag][@sha256:digest], e.g. pytorch/pytorch:2.9.1-cuda12.8-cudnn9-devel",
        )
    if not 5 <= img.build_timeout_minutes <= 480:
        r.problem(f"{p}:image.buildTimeoutMinutes", img.build_timeout_minutes, "out of range", "5-480")
    if img.source_repository is not None and not _GITHUB.fullmatch(img.source_repository):
        r.problem(
            f"{p}:image.sourceRepository",
            img.source_repository,
            "not a GitHub repository URL",
            "https://github.com/<owner>/<repo>",
        )
    if (img.docker_hub_username is None) != (c.docker_hub_access_token is None):
        r.problem(
            f"{p}:image.dockerHubUsername"
            if img.docker_hub_username is None
            else f"{p}:dockerHubAccessToken",
            None,
            "the Docker Hub pull-through cache needs both the user and the access token",
            "both set, or neither",
        )
    if img.builder == "docker" and (img.nightly_rebuild or img.source_repository):
        r.problem(
            f"{p}:image.builder",
            img.builder,
            "nightlyRebuild and sourceRepository need CodeBuild",
            "codebuild, or turn those off",
        )

    _check_operators(c.operators, r)
    _check_ci(c.ci, r)

    reg = c.registry
    if not 1 <= reg.untagged_expiry_days <= 365:
        r.problem(f"{p}:registry.untaggedExpiryDays", reg.untagged_expiry_days, "out of range", "1-365")
    if not 1 <= reg.keep_last_images <= 1000:
        r.problem(f"{p}:registry.keepLastImages", reg.keep_last_images, "out of range", "1-1000")
    if c.storage.protect and reg.force_delete:
        r.problem(
            f"{p}:registry.forceDelete",
            True,
            "a protected stack keeps its images",
            "false while storage.protect is true",
        )

    st = c.storage
    if not 0 <= st.checkpoint_retention_days <= 3650:
        r.problem(
            f"{p}:storage.checkpointRetentionDays",
            st.checkpoint_retention_days,
            "out of range",
            "0 (keep) to 3650",
        )
    if not 1 <= st.build_context_retention_days <= 365:
        r.problem(
            f"{p}:storage.buildContextRetentionDays", st.build_context_retention_days, "out of range", "1-365"
        )


_GITHUB_REPO = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}")
_GITHUB_ENVIRONMENT = re.compile(r"[A-Za-z0-9._-]{1,255}")
_BRANCH = re.compile(r"[A-Za-z0-9._/-]{1,255}")
_OIDC_PROVIDER = re.compile(
    r"arn:aws[-a-z]*:iam::[0-9]{12}:oidc-provider/token\.actions\.githubusercontent\.com"
)
_KMS_KEY = re.compile(r"arn:aws[-a-z]*:kms:[a-z0-9-]+:[0-9]{12}:(key|alias)/[A-Za-z0-9/_-]+")


def _check_ci(ci: CiConfig, r: Reader) -> None:
    k = f"{PROJECT}:ci"
    if ci.github_repository is None:
        for key, value in (
            ("githubOwnerId", ci.github_owner_id),
            ("githubRepositoryId", ci.github_repository_id),
            ("environment", ci.environment),
            ("oidcProviderArn", ci.oidc_provider_arn),
            ("secretsKeyArn", ci.secrets_key_arn),
        ):
            if value is not None:
                r.problem(
                    f"{k}.{key}",
                    value,
                    "CI access is off without githubRepository",
                    f"set {k}.githubRepository",
                )
        return
    if not _GITHUB_REPO.fullmatch(ci.github_repository):
        r.problem(f"{k}.githubRepository", ci.github_repository, "not a GitHub repository", "owner/repo")
    if (ci.github_owner_id is None) != (ci.github_repository_id is None):
        r.problem(
            f"{k}.githubOwnerId" if ci.github_owner_id is None else f"{k}.githubRepositoryId",
            None,
            "the immutable subject format needs both numeric ids",
            "both githubOwnerId and githubRepositoryId, or neither",
        )
    for key, value in (
        ("githubOwnerId", ci.github_owner_id),
        ("githubRepositoryId", ci.github_repository_id),
    ):
        if value is not None and value < 1:
            r.problem(
                f"{k}.{key}", value, "not a GitHub id", "a positive integer (gh api repos/<owner>/<repo>)"
            )
    if ci.environment is not None and not _GITHUB_ENVIRONMENT.fullmatch(ci.environment):
        r.problem(
            f"{k}.environment", ci.environment, "not a GitHub environment name", "letters, digits, . _ -"
        )
    if not _BRANCH.fullmatch(ci.branch):
        r.problem(f"{k}.branch", ci.branch, "not a branch name", "a branch such as main")
    if ci.oidc_provider_arn is not None and not _OIDC_PROVIDER.fullmatch(ci.oidc_provider_arn):
        r.problem(
            f"{k}.oidcProviderArn",
            ci.oidc_provider_arn,
            "not the GitHub OIDC provider's ARN",
            "arn:aws:iam::<account>:oidc-provider/token.actions.githubusercontent.com",
        )
    if ci.secrets_key_arn is not None and not _KMS_KEY.fullmatch(ci.secrets_key_arn):
        r.problem(
            f"{k}.secretsKeyArn",
            ci.secrets_key_arn,
            "not a KMS key ARN",
            "arn:aws:kms:<region>:<account>:key/<id>",
        )


_COMMIT = re.compile(r"[0-9a-f]{40}")
_CHART_VERSION = re.compile(r"v?[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.-]+)?")


def _check_operators(o: OperatorsConfig, r: Reader) -> None:
    k = f"{PROJECT}:operators"
    if o.training_operator.ref is not None and not _COMMIT.fullmatch(o.training_operator.ref):
        r.problem(
            f"{k}.trainingOperator.ref",
            o.training_operator.ref,
            "not a full commit SHA (a tag or branch can move)",
            "40 lowercase hex digits",
        )
    for key, op in (
        ("nvidiaDevicePlugin", o.nvidia_device_plugin),
        ("efaDevicePlugin", o.efa_device_plugin),
        ("kuberay", o.kuberay),
    ):
        if op.version is not None and not _CHART_VERSION.fullmatch(op.version):
            r.problem(
                f"{k}.{key}.version", op.version, "not a chart version", "an exact version such as 1.7.0"
            )


# [registry[:port]/]path[:tag][@sha256:hex], lowercase path components as Docker requires.
_IMAGE_REF = re.compile(
    r"([A-Za-z0-9.-]+(:[0-9]+)?/)?[a-z0-9]+([._-]+[a-z0-9]+)*(/[a-z0-9]+([._-]+[a-z0-9]+)*)*"
    r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[0-9a-f]{64})?"
)


def _build_context_ok(context: str) -> bool:
    """A directory inside the project with a Dockerfile (checked without letting an odd path,
    too long for the OS or with a NUL, raise)."""
    if not context or len(context) > 255 or "\0" in context or Path(context).is_absolute():
        return False
    try:
        path = (PROJECT_ROOT / context).resolve()
        return path.is_relative_to(PROJECT_ROOT) and (path / "Dockerfile").is_file()
    except (OSError, ValueError):
        return False


def _check_network(n: NetworkConfig, r: Reader) -> None:
    k = f"{PROJECT}:network"
    try:
        net = ipaddress.IPv4Network(n.vpc_cidr)
        if not 16 <= net.prefixlen <= 20:
            r.problem(f"{k}.vpcCidr", n.vpc_cidr, "prefix length out of range", "/16 to /20")
    except ValueError:
        r.problem(f"{k}.vpcCidr", n.vpc_cidr, "not an IPv4 CIDR", "a CIDR such as 10.0.0.0/16")
    if not 2 <= n.availability_zones <= 6:
        r.problem(f"{k}.availabilityZones", n.availability_zones, "out of range", "2-6 (EKS needs two AZs)")
    if n.existing_vpc_id is None:
        if n.existing_private_subnet_ids or n.existing_public_subnet_ids:
            r.problem(
                f"{k}.existingVpcId",
                None,
                "subnets given without their VPC",
                "the id of the VPC that holds them",
            )
        return
    if not _VPC.fullmatch(n.existing_vpc_id):
        r.problem(f"{k}.existingVpcId", n.existing_vpc_id, "not a VPC id", "vpc-<hex>")
    if len(n.existing_private_subnet_ids) < 2:
        r.problem(
            f"{k}.existingPrivateSubnetIds",
            list(n.existing_private_subnet_ids),
            "too few subnets",
            "two or more, in different AZs",
        )
    for key, ids in (
        ("existingPrivateSubnetIds", n.existing_private_subnet_ids),
        ("existingPublicSubnetIds", n.existing_public_subnet_ids),
    ):
        for i, s in enumerate(ids):
            if not _SUBNET.fullmatch(s):
                r.problem(f"{k}.{key}[{i}]", s, "not a subnet id", "subnet-<hex>")
        for s, count in Counter(ids).items():
            if count > 1:
                r.problem(f"{k}.{key}", s, f"listed {count} times", "each subnet once")


def _check_cluster(c: ClusterConfig, r: Reader) -> None:
    k = f"{PROJECT}:cluster"
    if not (c.endpoint_public_access or c.endpoint_private_access):
        r.problem(
            f"{k}.endpointPrivateAccess",
            False,
            "the API endpoint would be unreachable",
            "true, or endpointPublicAccess true",
        )
    for i, cidr in enumerate(c.public_access_cidrs):
        try:
            ipaddress.IPv4Network(cidr)
        except ValueError:
            r.problem(
                f"{k}.publicAccessCidrs[{i}]", cidr, "not an IPv4 CIDR", "a CIDR such as 203.0.113.0/24"
            )
    for i, arn in enumerate(c.admin_principals):
        if not _PRINCIPAL.fullmatch(arn):
            r.problem(
                f"{k}.adminPrincipals[{i}]",
                arn,
                "not an IAM role or user ARN",
                "arn:aws:iam::<account>:role/<name>",
            )
    for arn, n in Counter(c.admin_principals).items():
        if n > 1:  # EKS allows one access entry per principal
            r.problem(f"{k}.adminPrincipals", arn, f"listed {n} times", "each principal once")
    s = c.system_node_group
    sk = f"{k}.systemNodeGroup"
    if s.instance_type not in CPU_INSTANCE_TYPES:
        r.problem(
            f"{sk}.instanceType",
            s.instance_type,
            "not a CPU instance type in the catalog",
            ", ".join(CPU_INSTANCE_TYPES),
        )
    if not 1 <= s.min_size <= 20:
        r.problem(f"{sk}.minSize", s.min_size, "out of range (operators need a node)", "1-20")
    if not 1 <= s.max_size <= 20:
        r.problem(f"{sk}.maxSize", s.max_size, "out of range", "1-20")
    elif s.min_size > s.max_size:
        r.problem(f"{sk}.maxSize", s.max_size, f"smaller than minSize ({s.min_size})", f"{s.min_size}-20")
    if 1 <= s.min_size <= s.max_size <= 20 and not s.min_size <= s.desired_size <= s.max_size:
        r.problem(
            f"{sk}.desiredSize",
            s.desired_size,
            f"outside minSize ({s.min_size}) and maxSize ({s.max_size})",
            f"{s.min_size}-{s.max_size}",
        )
    if not 20 <= s.disk_size_gib <= 1000:
        r.problem(f"{sk}.diskSizeGiB", s.disk_size_gib, "out of range", "20-1000")


def _check_node_group(g: GpuNodeGroupConfig, region: str, k: str, r: Reader) -> None:
    if not _LABEL.fullmatch(g.name) or len(g.name) > MAX_NODE_GROUP_NAME:
        r.problem(
            f"{k}.name",
            g.name,
            "not a valid node group name",
            f"{NAME_RULE}; at most {MAX_NODE_GROUP_NAME} characters",
        )
    if g.name == SYSTEM_GROUP:
        r.problem(f"{k}.name", g.name, "reserved for the system node group", "any other name")
    if g.preflight_min_bus_bandwidth is not None and not 1 <= g.preflight_min_bus_bandwidth <= 10_000:
        r.problem(
            f"{k}.preflightMinBusBandwidthGBps", g.preflight_min_bus_bandwidth, "out of range", "1-10000 GB/s"
        )
    if g.preflight and not g.efa:
        r.problem(
            f"{k}.preflight",
            True,
            "the preflight checks EFA and cross-node bandwidth; this group has no EFA",
            "false or unset, or efa: true",
        )
    if g.instance_type not in GPU_INSTANCE_TYPES:
        r.problem(
            f"{k}.instanceType",
            g.instance_type,
            "not an NVIDIA GPU instance type in the catalog",
            ", ".join(GPU_INSTANCE_TYPES),
        )
        return
    it = g.instance
    if not 1 <= g.node_count <= 64:
        r.problem(f"{k}.nodeCount", g.node_count, "out of range", "1-64")
    if g.efa and not it.efa_supported:
        efa_types = ", ".join(t for t in GPU_INSTANCE_TYPES if INSTANCE_TYPES[t].efa_supported)
        r.problem(
            f"{k}.efa",
            True,
            f"{g.instance_type} has no EFA interfaces",
            f"false, or an EFA instance type ({efa_types})",
        )
    if g.capacity_type == "CAPACITY_BLOCK" and not g.capacity_reservation_id:
        r.problem(
            f"{k}.capacityReservationId",
            None,
            "CAPACITY_BLOCK needs the Capacity Block's reservation id",
            "cr- followed by 17 hex digits",
        )
    if g.availability_zone is not None and not (
        _ZONE.fullmatch(g.availability_zone) and g.availability_zone[:-1] == region
    ):
        r.problem(
            f"{k}.availabilityZone",
            g.availability_zone,
            f"not an AZ of the stack's region {region}",
            f"an AZ such as {region}a",
        )
    if g.capacity_reservation_id is not None:
        if g.availability_zone is None:
            r.problem(
                f"{k}.availabilityZone",
                None,
                "a capacity reservation or Capacity Block launches only in its own AZ",
                "the reservation's AZ (aws ec2 describe-capacity-reservations --capacity-reservation-ids ...)",
            )
        if not _RESERVATION.fullmatch(g.capacity_reservation_id):
            r.problem(
                f"{k}.capacityReservationId",
                g.capacity_reservation_id,
                "not a capacity reservation id",
                "cr- followed by 17 hex digits",
            )
        if g.capacity_type == "SPOT":
            r.problem(
                f"{k}.capacityType",
                "SPOT",
                "Spot capacity cannot target a reservation",
                "ON_DEMAND or CAPACITY_BLOCK with a reservation",
            )
        if g.placement_group:
            r.problem(
                f"{k}.placementGroup",
                True,
                "a placement group breaks reservations bought without it (InsufficientInstanceCapacity)",
                "false when capacityReservationId is set",
            )
    if not it.on_demand and g.capacity_type != "CAPACITY_BLOCK":
        r.problem(
            f"{k}.capacityType",
            g.capacity_type,
            f"{g.instance_type} is sold only as Capacity Blocks",
            "CAPACITY_BLOCK",
        )
    if not 50 <= g.disk_size_gib <= 16384:
        r.problem(f"{k}.diskSizeGiB", g.disk_size_gib, "out of range", "50-16384")


def _check_job(
    j: JobConfig,
    groups: dict[str, GpuNodeGroupConfig] | None,
    system_nodes: int,
    operators: OperatorsConfig,
    k: str,
    r: Reader,
) -> None:
    limit = MAX_JOB_NAME[j.kind]
    if not _LABEL.fullmatch(j.name) or len(j.name) > limit:
        r.problem(
            f"{k}.name", j.name, f"not a valid {j.kind} name", f"{NAME_RULE}; at most {limit} characters"
        )
    if groups is None:  # the node groups did not parse: nothing to check the job against
        count, label = 0, ""
    elif j.node_group == SYSTEM_GROUP:
        count, label = system_nodes, f"the system node group has {system_nodes} node(s) at creation"
    elif j.node_group in groups:
        count = groups[j.node_group].node_count
        label = f"node group '{j.node_group}' has {count} node(s)"
    else:
        count = 0
        r.problem(
            f"{k}.nodeGroup",
            j.node_group,
            "no node group has that name",
            ", ".join([*groups, SYSTEM_GROUP]),
        )
    if count and not 1 <= j.nodes <= count:
        r.problem(f"{k}.nodes", j.nodes, label, f"1-{count}")
    if not 1 <= j.steps <= 10_000_000:
        r.problem(f"{k}.steps", j.steps, "out of range", "1-10000000")
    if j.image is not None and (not j.image.strip() or any(c.isspace() for c in j.image)):
        r.problem(f"{k}.image", j.image, "not an image reference", "registry/repository:tag or @sha256:...")
    needs = "trainingOperator" if j.kind == "PyTorchJob" else "kuberay"
    enabled = operators.training_operator.enabled if j.kind == "PyTorchJob" else operators.kuberay.enabled
    if not enabled:
        r.problem(
            f"{k}.kind",
            j.kind,
            f"operators.{needs} is turned off, and nothing else in the stack runs a {j.kind}",
            f"turn operators.{needs} back on, or remove the job",
        )
    for name in j.env:
        if not _ENV_NAME.fullmatch(name):
            r.problem(
                f"{k}.env.{name}",
                j.env[name],
                "not a valid environment variable name",
                "letters, digits and '_', not starting with a digit",
            )
    if not 1 <= j.timeout_minutes <= 10080:
        r.problem(f"{k}.timeoutMinutes", j.timeout_minutes, "out of range", "1-10080 (one week)")
    if j.kind == "RayCluster" and j.wait == "succeeded":
        r.problem(
            f"{k}.wait", "succeeded", "a RayCluster runs until deleted and never succeeds", "none | running"
        )


def reference_rows() -> list[tuple[str, str, str, str]]:
    """(key, type, default, description) for every setting, for the README's config reference."""
    rows = [
        (REGION_KEY, "string", "(required)", "AWS region of the stack (also read by the AWS provider)."),
        (
            PROFILE_KEY,
            "string",
            "unset",
            "AWS profile for the stack's provider and the image build's AWS calls.",
        ),
    ]

    def walk(cls, prefix):
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if "key" not in f.metadata:
                continue
            tp = hints[f.name]
            key = f"{prefix}{f.metadata['key']}"
            item = typing.get_args(tp)[0] if typing.get_origin(tp) is tuple else None
            if dataclasses.is_dataclass(item):
                rows.append((key, "list of objects", _default(f), f.metadata["doc"]))
                walk(item, f"{key}[].")
            elif dataclasses.is_dataclass(tp):
                rows.append((key, "object", "", f.metadata["doc"]))
                walk(tp, f"{key}.")
            else:
                rows.append((key, describe(tp), _default(f), f.metadata["doc"]))

    walk(StackConfig, f"{PROJECT}:")
    return rows


def _default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return "(required)"
    if value is None:
        return "unset"
    if isinstance(value, tuple) and value and dataclasses.is_dataclass(value[0]):
        return ", ".join(f"{v.name} ({v.instance_type})" for v in value)
    if isinstance(value, tuple):
        return json.dumps(list(value))
    return json.dumps(value)
