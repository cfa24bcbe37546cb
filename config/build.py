"""Build plane config: the training image's build, its ECR repository and the S3 bucket."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from config.names import PROJECT
from config.schema import Reader, setting

ComputeType = Literal[
    "BUILD_GENERAL1_SMALL",
    "BUILD_GENERAL1_MEDIUM",
    "BUILD_GENERAL1_LARGE",
    "BUILD_GENERAL1_XLARGE",
    "BUILD_GENERAL1_2XLARGE",
]

_GITHUB = re.compile(r"https://github\.com/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+(\.git)?")
# [registry[:port]/]path[:tag][@sha256:hex], lowercase path components as Docker requires.
_IMAGE_REF = re.compile(
    r"([A-Za-z0-9.-]+(:[0-9]+)?/)?[a-z0-9]+([._-]+[a-z0-9]+)*(/[a-z0-9]+([._-]+[a-z0-9]+)*)*"
    r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[0-9a-f]{64})?"
)
_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}")
# nvidia/cuda:13.0.3-base-ubuntu24.04 by its multi-arch index digest, as several unrelated public
# projects pin it (not read from Docker Hub here, which is out of reach): a tag can be re-pushed,
# a digest names one image. `docker buildx imagetools inspect <tag>` prints the current one.
DEFAULT_BASE_IMAGE = "nvidia/cuda:13.0.3-base-ubuntu24.04@sha256:7c7413a56200486f71f181cad9310f6fd31b6bb21816ade15fc9c1e1e927a5c1"


@dataclass(frozen=True)
class ImageConfig:
    builder: Literal["codebuild", "docker", "kind", "none"] = setting(
        "builder",
        "Build in AWS CodeBuild; locally with Docker (pulumi-docker) and push to ECR; locally and load "
        "into kind (existingCluster.kubeconfig); or none (every job names its image).",
        "codebuild",
    )
    context: str = setting(
        "context",
        "Build context directory, relative to the project or absolute (your own repository): a "
        "Dockerfile with a stage `training`, and a smoke_test.py the build runs in its WORKDIR.",
        "workload",
    )
    base_image: str = setting(
        "baseImage",
        "CUDA base image without a torch of its own (Dockerfile BASE_IMAGE), pinned by digest "
        "(name:tag@sha256:...): torch comes from workload/requirements.lock, built for CUDA 13.0.",
        DEFAULT_BASE_IMAGE,
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


FSX_THROUGHPUTS = (125, 250, 500, 1000)  # MB/s per TiB, PERSISTENT_2 SSD


@dataclass(frozen=True)
class FsxConfig:
    enabled: bool = setting("enabled", "A shared FSx for Lustre file system for checkpoints.", False)
    storage_capacity_gib: int = setting(
        "storageCapacityGiB", "Size: 1200, 2400, or a multiple of 2400 GiB (it only grows, by 2400).", 1200
    )
    throughput_per_tib: int = setting(
        "throughputPerTiB", "MB/s per TiB of storage: 125, 250, 500 or 1000 (baseline = size x this).", 125
    )
    node_groups: tuple[str, ...] = setting(
        "nodeGroups", "GPU groups whose jobs mount it (default: all); all must be in one AZ.", factory=tuple
    )


@dataclass(frozen=True)
class StorageConfig:
    encryption: Literal["SSE-S3", "KMS"] = setting("encryption", "Bucket encryption.", "SSE-S3")
    checkpoint_retention_days: int = setting(
        "checkpointRetentionDays", "Expire checkpoints after N days (0 keeps them).", 30
    )
    checkpoints_kept: int = setting(
        "checkpointsKept",
        "The default trainer keeps its newest N complete checkpoints, on its volume and in S3, "
        "and deletes older ones as it saves (1-100).",
        3,
    )
    checkpoint_keep_every: int = setting(
        "checkpointKeepEvery",
        "Also keep every checkpoint whose step is a multiple of M (0: none beyond the newest).",
        0,
    )
    build_context_retention_days: int = setting(
        "buildContextRetentionDays", "Keep superseded build contexts N days (the current one stays).", 14
    )
    protect: bool = setting(
        "protect", "Protect the bucket and registry from deletion (Pulumi protect, no force-destroy).", False
    )
    fsx: FsxConfig = setting(
        "fsx", "FSx for Lustre at /checkpoints, linked to the bucket's checkpoints/.", factory=FsxConfig
    )
    datasets_mount: bool = setting(
        "datasetsMount",
        "Mount the bucket's datasets/ read-only at /datasets in every job (Mountpoint for S3).",
        False,
    )


def check_image(img: ImageConfig, docker_hub_token_set: bool, r: Reader) -> None:
    p = PROJECT
    if not _IMAGE_REF.fullmatch(img.base_image):
        r.problem(
            f"{p}:image.baseImage",
            img.base_image,
            "not an image reference",
            "[registry/]repository[:tag]@sha256:<64 hex>, e.g. " + DEFAULT_BASE_IMAGE,
        )
    elif not _DIGEST.search(img.base_image):
        r.problem(
            f"{p}:image.baseImage",
            img.base_image,
            "not pinned by digest: a tag can be pushed again, and the build would take whatever it names then",
            "[registry/]repository[:tag]@sha256:<64 hex>, e.g. " + DEFAULT_BASE_IMAGE,
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
    if (img.docker_hub_username is None) == docker_hub_token_set:
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


def check_registry(reg: RegistryConfig, protected: bool, r: Reader) -> None:
    p = PROJECT
    if not 1 <= reg.untagged_expiry_days <= 365:
        r.problem(f"{p}:registry.untaggedExpiryDays", reg.untagged_expiry_days, "out of range", "1-365")
    if not 1 <= reg.keep_last_images <= 1000:
        r.problem(f"{p}:registry.keepLastImages", reg.keep_last_images, "out of range", "1-1000")
    if protected and reg.force_delete:
        r.problem(
            f"{p}:registry.forceDelete",
            True,
            "a protected stack keeps its images",
            "false while storage.protect is true",
        )


def check_storage(st: StorageConfig, r: Reader) -> None:
    p = PROJECT
    fsx, k = st.fsx, f"{p}:storage.fsx"
    size = fsx.storage_capacity_gib
    if not (size in (1200, 2400) or (size > 0 and size % 2400 == 0)) or size > 2_400_000:
        r.problem(
            f"{k}.storageCapacityGiB",
            size,
            "not a size FSx for Lustre (PERSISTENT_2) takes",
            "1200, 2400, or a multiple of 2400",
        )
    if fsx.throughput_per_tib not in FSX_THROUGHPUTS:
        r.problem(
            f"{k}.throughputPerTiB",
            fsx.throughput_per_tib,
            "not a PERSISTENT_2 throughput tier",
            ", ".join(map(str, FSX_THROUGHPUTS)),
        )
    if not 0 <= st.checkpoint_retention_days <= 3650:
        r.problem(
            f"{p}:storage.checkpointRetentionDays",
            st.checkpoint_retention_days,
            "out of range",
            "0 (keep) to 3650",
        )
    if not 1 <= st.checkpoints_kept <= 100:
        r.problem(f"{p}:storage.checkpointsKept", st.checkpoints_kept, "out of range", "1-100")
    if not 0 <= st.checkpoint_keep_every <= 10_000_000:
        r.problem(
            f"{p}:storage.checkpointKeepEvery",
            st.checkpoint_keep_every,
            "out of range",
            "0 (none) to 10000000",
        )
    if not 1 <= st.build_context_retention_days <= 365:
        r.problem(
            f"{p}:storage.buildContextRetentionDays", st.build_context_retention_days, "out of range", "1-365"
        )
