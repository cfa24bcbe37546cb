"""Build plane: the bucket, the registry and the training image (CodeBuild, local Docker, or kind)."""

from __future__ import annotations

import platform
from dataclasses import dataclass

import pulumi

from account_checks.world import World
from components.bucket import ArtifactBucket, ArtifactBucketArgs
from components.ci_access import GitHubCiAccess
from components.image import ImageBuild, ImageBuildArgs
from components.jobs.verl import VERL_IMAGE
from components.kind_image import KindImage, KindImageArgs, architecture_problem
from components.registry import ImageRegistry, ImageRegistryArgs
from config import PROJECT_ROOT, StackConfig
from planes.account import Account
from planes.ci import ci_bucket_fence

ARCHIVE_DIR = PROJECT_ROOT / "build" / "contexts"


@dataclass(frozen=True)
class BuildPlane:
    bucket: ArtifactBucket | None  # None: a kubeconfig stack, no AWS
    registry: ImageRegistry | None
    image: ImageBuild | KindImage | None  # None: image.builder none, every job names its image

    @property
    def image_uri(self) -> pulumi.Output[str] | None:
        return self.image.image_uri if self.image else None

    @property
    def verl_image_uri(self) -> pulumi.Output[str] | None:
        """The stack's VERL image (verl and the EFA stack baked in), when a VERL job is configured."""
        return self.image.verl_image_uri if isinstance(self.image, ImageBuild) else None


def registry_args(cfg: StackConfig) -> ImageRegistryArgs:
    """Every repository the stack pushes to keeps images by the same rules."""
    return ImageRegistryArgs(
        untagged_expiry_days=cfg.registry.untagged_expiry_days,
        keep_last_images=cfg.registry.keep_last_images,
        force_delete=cfg.registry.force_delete,
        protect=cfg.storage.protect,
    )


def build_plane(
    cfg: StackConfig,
    account: Account,
    ci: GitHubCiAccess | None = None,
    fsx_file_system_ids: pulumi.Input[list[str]] | None = None,
) -> BuildPlane:
    """`fsx_file_system_ids`: the stack's FSx file systems the bucket's fence lets in (made later)."""
    bucket = ArtifactBucket(
        "artifacts",
        ArtifactBucketArgs(
            encryption=cfg.storage.encryption,
            checkpoint_retention_days=cfg.storage.checkpoint_retention_days,
            build_context_retention_days=cfg.storage.build_context_retention_days,
            protect=cfg.storage.protect,
            fence=ci_bucket_fence(cfg, account, ci),
            fsx_file_system_ids=fsx_file_system_ids,
        ),
        account.opts,
    )
    registry = ImageRegistry("training", registry_args(cfg), account.opts)
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
            verl_base_image=VERL_IMAGE if any(j.verl for j in cfg.jobs) else None,
        ),
        account.opts,
    )
    return BuildPlane(bucket, registry, image)


def local_build_plane(cfg: StackConfig, world: World) -> BuildPlane:
    """No AWS: the image is built by the local Docker and loaded into kind (or named per job)."""
    if cfg.image.builder != "kind":
        return BuildPlane(None, None, None)
    problem = architecture_problem(platform.machine())
    if problem and world.strict:  # offline, the plan warns (offline/plan.py)
        raise pulumi.RunError(problem)
    image = KindImage(
        "image",
        KindImageArgs(
            context_dir=PROJECT_ROOT / cfg.image.context,
            base_image=cfg.image.base_image,
            kind_cluster_name=cfg.existing_cluster.kind_cluster_name,
        ),
    )
    return BuildPlane(None, None, image)
