"""The training image (and, for a stack with VERL jobs, the VERL image): a build context in S3, a
CodeBuild project, and a build per content change and image.

Both are targets of one Dockerfile (workload/Dockerfile): `training`, and `verl` (VERL's image with
the EFA stack and verl baked in) when `verl_base_image` is given. With `builder: docker` the same
images are built by pulumi-docker on the machine running Pulumi. Either way `image_uri` and
`verl_image_uri` are the pushed images pinned by digest (`<repo>@sha256:...`), so a job always
runs exactly what was built. The tag is `build-<hash of context, buildspec, base image and
target>`, so a tag names one build's inputs and an existing tag can be reused instead of rebuilt.

The base image comes from Docker Hub, which rate-limits anonymous pulls per IP (and CodeBuild
shares IPs). With Docker Hub credentials configured, builds pull it through an ECR pull-through
cache instead: authenticated, and cached in the account after the first pull.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pulumi
import pulumi_aws as aws
import pulumi_docker as docker

from components.bucket import BUILD_CONTEXT_PREFIX, ArtifactBucket
from components.build_trigger import ImageBuildTrigger
from components.iam import service_trust
from components.registry import STACK_BUILD_TAG_PREFIX, ImageRegistry
from domain.names import codebuild_project_name, pull_through_prefix, schedule_group_name

BUILDSPEC = Path(__file__).with_name("buildspec.yml")
CODEBUILD_IMAGE = "aws/codebuild/standard:7.0"
LOG_RETENTION_DAYS = 30
NIGHTLY_SCHEDULE = "cron(0 3 * * ? *)"  # 03:00 UTC
DOCKER_HUB = "registry-1.docker.io"
# ECR reads pull-through cache credentials only from secrets named with this prefix.
PULL_THROUGH_SECRET_PREFIX = "ecr-pullthroughcache/"
# Left out of the context: they change without changing the image.
IGNORED_PARTS = {"__pycache__", ".pytest_cache", ".ruff_cache", ".DS_Store"}
FIXED_ZIP_TIME = (1980, 1, 1, 0, 0, 0)


def context_archive(directory: Path) -> bytes:
    """Zip a directory deterministically: same files give the same bytes, whatever their mtimes."""
    files = sorted(
        p
        for p in directory.rglob("*")
        if p.is_file() and not IGNORED_PARTS & set(p.relative_to(directory).parts) and p.suffix != ".pyc"
    )
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in files:
            info = zipfile.ZipInfo(path.relative_to(directory).as_posix(), date_time=FIXED_ZIP_TIME)
            mode = 0o755 if os.access(path, os.X_OK) else 0o644
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, path.read_bytes(), compresslevel=9)
    return buffer.getvalue()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


TRAINING_TARGET = "training"
# The lock files pin x86_64 wheels only (workload/requirements.lock: uv's --python-platform
# x86_64-manylinux_2_28), so every image is built for amd64.
IMAGE_PLATFORM = "linux/amd64"
VERL_TARGET = "verl"


def image_tag(archive: bytes, base_image: str, target: str = TRAINING_TARGET) -> str:
    """`build-<hash>` of everything that goes into the image: one tag, one set of build inputs."""
    inputs = [archive, BUILDSPEC.read_bytes(), base_image.encode(), target.encode()]
    return STACK_BUILD_TAG_PREFIX + sha256(b"\0".join(inputs))


@dataclass(frozen=True)
class ImageBuildArgs:
    context_dir: Path
    base_image: str
    builder: str  # "codebuild" | "docker"
    compute_type: str
    build_timeout_minutes: int
    nightly_rebuild: bool
    source_repository: str | None
    docker_hub_username: str | None
    docker_hub_access_token: str | None  # from a secret config value; kept secret here
    bucket: ArtifactBucket
    registry: ImageRegistry
    region: str
    account_id: str
    aws_profile: str | None
    archive_dir: Path  # where the zipped context is written before upload
    verl_base_image: str | None = None  # set: also build the VERL image (components/jobs/verl.py VERL_IMAGE)


def docker_build(context_dir: Path, base_image: str, target: str = TRAINING_TARGET) -> dict:
    """How the local Docker builds one image (pulumi-docker), for ECR or for kind: `base_image`
    is the target's base (BASE_IMAGE for training, VERL_BASE_IMAGE for verl)."""
    base_arg = "VERL_BASE_IMAGE" if target == VERL_TARGET else "BASE_IMAGE"
    return {
        "context": str(context_dir),
        "dockerfile": str(context_dir / "Dockerfile"),
        "args": {base_arg: base_image},
        "target": target,
        "platform": IMAGE_PLATFORM,
    }


def docker_hub_cache_path(base_image: str, prefix: str) -> str:
    """The path of a Docker Hub image inside an ECR pull-through cache (official images live
    under `library/` on Docker Hub)."""
    return f"{prefix}/{base_image if '/' in base_image else 'library/' + base_image}"


class ImageBuild(pulumi.ComponentResource):
    image_uri: pulumi.Output[str]
    verl_image_uri: pulumi.Output[str] | None

    def __init__(self, name: str, args: ImageBuildArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainstack:build:ImageBuild", name, None, opts)
        archive = context_archive(args.context_dir)
        self.context_hash = sha256(archive)
        self.image_tag = image_tag(archive, args.base_image)
        self.verl_image_tag = (
            image_tag(archive, args.verl_base_image, VERL_TARGET) if args.verl_base_image else None
        )
        self.verl_image_uri = None
        if args.builder == "docker":
            self.image_uri = self._docker_build(name, args, args.base_image, TRAINING_TARGET, self.image_tag)
            if args.verl_base_image and self.verl_image_tag:
                self.verl_image_uri = self._docker_build(
                    f"{name}-verl", args, args.verl_base_image, VERL_TARGET, self.verl_image_tag
                )
        else:
            self.image_uri = self._codebuild(name, args, archive)
        self.register_outputs(
            {
                "imageUri": self.image_uri,
                "imageTag": self.image_tag,
                "verlImageUri": self.verl_image_uri,
                "verlImageTag": self.verl_image_tag,
            }
        )

    def _docker_build(
        self, name: str, args: ImageBuildArgs, base_image: str, target: str, tag: str
    ) -> pulumi.Output[str]:
        repo = args.registry.repository
        token = aws.ecr.get_authorization_token_output(
            registry_id=repo.registry_id, opts=pulumi.InvokeOptions(parent=self)
        )
        image = docker.Image(
            name,
            image_name=pulumi.Output.concat(repo.repository_url, ":", tag),
            build=docker_build(args.context_dir, base_image, target),
            registry={
                "server": repo.repository_url,
                "username": token.user_name,
                "password": pulumi.Output.secret(token.password),
            },
            opts=pulumi.ResourceOptions(parent=self),
        )
        return image.repo_digest

    def _codebuild(self, name: str, args: ImageBuildArgs, archive: bytes) -> pulumi.Output[str]:
        child = pulumi.ResourceOptions(parent=self)
        project_name = codebuild_project_name(pulumi.get_project(), pulumi.get_stack(), name)
        buildspec = BUILDSPEC.read_text()
        bucket, repo = args.bucket, args.registry.repository

        args.archive_dir.mkdir(parents=True, exist_ok=True)
        archive_path = args.archive_dir / f"{self.context_hash}.zip"
        for stale in args.archive_dir.glob("*.zip"):  # only the current context is uploaded
            if stale != archive_path:
                stale.unlink(missing_ok=True)  # a concurrent preview of the stack may remove it first
        # Written whole, then renamed: a concurrent preview never reads half an archive.
        partial = archive_path.with_suffix(f".{os.getpid()}.part")
        partial.write_bytes(archive)
        partial.replace(archive_path)
        key = f"{BUILD_CONTEXT_PREFIX}{self.context_hash}.zip"
        context_object = aws.s3.BucketObjectv2(
            f"{name}-context",
            bucket=bucket.bucket_name,
            key=key,
            source=pulumi.FileAsset(str(archive_path)),
            opts=child,
        )
        source_location = pulumi.Output.concat(bucket.bucket_name, "/", key)

        self.log_group = aws.cloudwatch.LogGroup(
            f"{name}-logs",
            name=f"/aws/codebuild/{project_name}",
            retention_in_days=LOG_RETENTION_DAYS,
            opts=child,
        )
        self.role = aws.iam.Role(
            f"{name}-codebuild",
            assume_role_policy=json.dumps(service_trust("codebuild.amazonaws.com")),
            opts=child,
        )
        kms_arn = bucket.kms_key.arn if bucket.kms_key else None
        base_image, verl_base_image = args.base_image, args.verl_base_image
        cache_arn = None
        if args.docker_hub_username and args.docker_hub_access_token:
            cache_prefix = pull_through_prefix(project_name)
            self._docker_hub_cache(name, cache_prefix, args)
            registry_host = f"{args.account_id}.dkr.ecr.{args.region}.amazonaws.com"
            base_image = f"{registry_host}/{docker_hub_cache_path(args.base_image, cache_prefix)}"
            if args.verl_base_image:
                verl_base_image = (
                    f"{registry_host}/{docker_hub_cache_path(args.verl_base_image, cache_prefix)}"
                )
            cache_arn = f"arn:aws:ecr:{args.region}:{args.account_id}:repository/{cache_prefix}/*"
        self.role_policy = aws.iam.RolePolicy(
            f"{name}-codebuild",
            role=self.role.id,
            policy=pulumi.Output.all(
                log_group=self.log_group.arn,
                bucket=bucket.arn,
                repository=repo.arn,
                kms=kms_arn,
            ).apply(
                lambda a: json.dumps(
                    codebuild_policy(a["log_group"], a["bucket"], a["repository"], a["kms"], cache_arn)
                )
            ),
            opts=child,
        )

        # With a source repository the primary source is GitHub (webhooks need that); builds from
        # `pulumi up` and the schedule override it with the uploaded context.
        if args.source_repository:
            source = {
                "type": "GITHUB",
                "location": args.source_repository,
                "git_clone_depth": 1,
                "buildspec": buildspec,
            }
            context_dir = args.context_dir.name
        else:
            source = {"type": "S3", "location": source_location, "buildspec": buildspec}
            context_dir = "."
        self.project = aws.codebuild.Project(
            f"{name}-project",
            name=project_name,
            description="Builds the trainstack images (training, VERL) and pushes them to ECR",
            service_role=self.role.arn,
            build_timeout=args.build_timeout_minutes,
            artifacts={"type": "NO_ARTIFACTS"},
            source=source,
            environment={
                "type": "LINUX_CONTAINER",
                "image": CODEBUILD_IMAGE,
                "compute_type": args.compute_type,
                "privileged_mode": True,  # docker build needs the daemon
                "environment_variables": [
                    {"name": "REPOSITORY_URI", "value": repo.repository_url},
                    {"name": "BASE_IMAGE", "value": base_image},
                    *([{"name": "VERL_BASE_IMAGE", "value": verl_base_image}] if verl_base_image else []),
                    {"name": "CONTEXT_HASH", "value": self.context_hash},
                    {"name": "CONTEXT_DIR", "value": context_dir},
                ],
            },
            logs_config={"cloudwatch_logs": {"group_name": self.log_group.name, "status": "ENABLED"}},
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.role_policy]),
        )

        def trigger(trigger_name: str, target: str, tag: str) -> ImageBuildTrigger:
            return ImageBuildTrigger(
                trigger_name,
                {
                    "region": args.region,
                    "project_name": self.project.name,
                    "source_location": source_location,
                    "image_tag": tag,
                    "target": target,
                    "repository_url": repo.repository_url,
                    "repository_name": repo.name,
                    "timeout_minutes": args.build_timeout_minutes,
                    "account_id": args.account_id,
                    "aws_profile": args.aws_profile,
                },
                opts=pulumi.ResourceOptions(parent=self, depends_on=[context_object, self.project]),
            )

        self.trigger = trigger(f"{name}-build", TRAINING_TARGET, self.image_tag)
        if self.verl_image_tag:
            # A build of its own (CodeBuild runs the two side by side), pushed to the same repository.
            self.verl_image_uri = trigger(f"{name}-verl-build", VERL_TARGET, self.verl_image_tag).image_uri

        if args.nightly_rebuild:
            self._nightly(name, source_location)
        if args.source_repository:
            aws.codebuild.Webhook(
                f"{name}-webhook",
                project_name=self.project.name,
                build_type="BUILD",
                filter_groups=[
                    {
                        "filters": [
                            {"type": "EVENT", "pattern": "PUSH"},
                            {"type": "HEAD_REF", "pattern": "^refs/heads/main$"},
                            {"type": "FILE_PATH", "pattern": f"^{context_dir}/"},
                        ]
                    }
                ],
                opts=child,
            )
        return self.trigger.image_uri

    def _docker_hub_cache(self, name: str, prefix: str, args: ImageBuildArgs) -> None:
        child = pulumi.ResourceOptions(parent=self)
        secret = aws.secretsmanager.Secret(
            f"{name}-dockerhub",
            name_prefix=f"{PULL_THROUGH_SECRET_PREFIX}{prefix}-",
            description="Docker Hub credentials for the ECR pull-through cache of the base image",
            recovery_window_in_days=7,
            opts=child,
        )
        version = aws.secretsmanager.SecretVersion(
            f"{name}-dockerhub",
            secret_id=secret.id,
            secret_string=pulumi.Output.secret(
                json.dumps(
                    {"username": args.docker_hub_username, "accessToken": args.docker_hub_access_token}
                )
            ),
            opts=child,
        )
        aws.ecr.PullThroughCacheRule(
            f"{name}-dockerhub",
            ecr_repository_prefix=prefix,
            upstream_registry_url=DOCKER_HUB,
            credential_arn=secret.arn,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[version]),
        )

    def _nightly(self, name: str, source_location: pulumi.Output[str]) -> None:
        child = pulumi.ResourceOptions(parent=self)
        role = aws.iam.Role(
            f"{name}-scheduler",
            assume_role_policy=json.dumps(service_trust("scheduler.amazonaws.com")),
            opts=child,
        )
        aws.iam.RolePolicy(
            f"{name}-scheduler",
            role=role.id,
            policy=self.project.arn.apply(
                lambda arn: json.dumps(
                    {
                        "Version": "2012-10-17",
                        "Statement": [{"Effect": "Allow", "Action": "codebuild:StartBuild", "Resource": arn}],
                    }
                )
            ),
            opts=child,
        )
        # Schedules take no tags: the stack's CI fence names its group instead (ci_fence.py).
        group = aws.scheduler.ScheduleGroup(
            f"{name}-schedules", name=schedule_group_name(pulumi.get_stack()), opts=child
        )
        aws.scheduler.Schedule(
            f"{name}-nightly",
            group_name=group.name,
            schedule_expression=NIGHTLY_SCHEDULE,
            flexible_time_window={"mode": "OFF"},
            target={
                "arn": "arn:aws:scheduler:::aws-sdk:codebuild:startBuild",
                "role_arn": role.arn,
                "input": pulumi.Output.json_dumps(
                    {
                        "ProjectName": self.project.name,
                        "SourceTypeOverride": "S3",
                        "SourceLocationOverride": source_location,
                        "EnvironmentVariablesOverride": [
                            {"Name": "CONTEXT_DIR", "Value": ".", "Type": "PLAINTEXT"}
                        ],
                    }
                ),
            },
            opts=child,
        )


def codebuild_policy(
    log_group_arn: str,
    bucket_arn: str,
    repository_arn: str,
    kms_key_arn: str | None,
    pull_through_cache_arn: str | None = None,
) -> dict:
    statements = [
        {
            "Sid": "OwnLogs",
            "Effect": "Allow",
            "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
            "Resource": [log_group_arn, f"{log_group_arn}:*"],
        },
        {
            "Sid": "ReadBuildContexts",
            "Effect": "Allow",
            "Action": ["s3:GetObject", "s3:GetObjectVersion"],
            "Resource": f"{bucket_arn}/{BUILD_CONTEXT_PREFIX}*",
        },
        {
            "Sid": "LocateBucket",
            "Effect": "Allow",
            "Action": ["s3:GetBucketLocation", "s3:GetBucketAcl"],
            "Resource": bucket_arn,
        },
        {
            "Sid": "PushImage",
            "Effect": "Allow",
            "Action": [
                "ecr:BatchCheckLayerAvailability",
                "ecr:BatchGetImage",
                "ecr:CompleteLayerUpload",
                "ecr:GetDownloadUrlForLayer",
                "ecr:InitiateLayerUpload",
                "ecr:PutImage",
                "ecr:UploadLayerPart",
            ],
            "Resource": repository_arn,
        },
        {
            # AWS defines no resource for GetAuthorizationToken: "*" is the only value it accepts.
            "Sid": "RegistryLogin",
            "Effect": "Allow",
            "Action": "ecr:GetAuthorizationToken",
            "Resource": "*",
        },
    ]
    if pull_through_cache_arn:
        # The first pull of a cached image creates its repository and imports it from upstream.
        statements.append(
            {
                "Sid": "PullBaseImageThroughCache",
                "Effect": "Allow",
                "Action": [
                    "ecr:BatchCheckLayerAvailability",
                    "ecr:BatchGetImage",
                    "ecr:BatchImportUpstreamImage",
                    "ecr:CreateRepository",
                    "ecr:GetDownloadUrlForLayer",
                ],
                "Resource": pull_through_cache_arn,
            }
        )
    if kms_key_arn:
        statements.append(
            {"Sid": "DecryptContexts", "Effect": "Allow", "Action": ["kms:Decrypt"], "Resource": kms_key_arn}
        )
    return {"Version": "2012-10-17", "Statement": statements}
