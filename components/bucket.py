"""The stack's S3 bucket: build contexts and checkpoints under fixed prefixes, artifacts beside them."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.ci_fence import BucketFence, bucket_fence

BUILD_CONTEXT_PREFIX = "build-contexts/"
CHECKPOINT_PREFIX = "checkpoints/"
# Tokenized datasets (`trainer.prepare_data --out s3://<bucket>/datasets/...`), read by jobs.
DATASET_PREFIX = "datasets/"
# Multipart uploads of large checkpoints that never complete still cost storage.
ABORT_MULTIPART_AFTER_DAYS = 7
NONCURRENT_VERSION_DAYS = 7
# The default trainer deletes the checkpoints it no longer keeps (storage.checkpointsKept): on a
# versioned bucket each delete leaves a noncurrent version, which would hold a pruned checkpoint's
# bytes for NONCURRENT_VERSION_DAYS; a day (the lifecycle's least) keeps a slip recoverable.
CHECKPOINT_NONCURRENT_DAYS = 1


@dataclass(frozen=True)
class ArtifactBucketArgs:
    encryption: str  # "SSE-S3" | "KMS"
    checkpoint_retention_days: int  # 0 keeps checkpoints
    build_context_retention_days: int
    protect: bool
    fence: BucketFence | None = None  # with CI: only the stack's principals reach the bucket
    # The stack's FSx file systems linked to the bucket, which the fence lets in by their own roles;
    # made after the bucket (planes/storage.py), so an Output resolved then (stacks/created.py).
    fsx_file_system_ids: pulumi.Input[list[str]] | None = None


class ArtifactBucket(pulumi.ComponentResource):
    def __init__(self, name: str, args: ArtifactBucketArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainstack:storage:ArtifactBucket", name, None, opts)
        # Protected stacks refuse `pulumi destroy` on what holds data, and never empty it.
        keep_data = pulumi.ResourceOptions(parent=self, protect=args.protect, retain_on_delete=args.protect)

        self.kms_key = None
        if args.encryption == "KMS":
            self.kms_key = aws.kms.Key(
                f"{name}-key",
                description=f"Encrypts the {name} bucket",
                enable_key_rotation=True,
                deletion_window_in_days=30,
                opts=keep_data,  # losing the key loses every object it encrypted
            )

        self.bucket = aws.s3.Bucket(
            name,
            bucket_prefix=f"{name}-",
            force_destroy=not args.protect,
            opts=keep_data,
        )
        bucket_opts = pulumi.ResourceOptions(parent=self, depends_on=[self.bucket])

        aws.s3.BucketOwnershipControls(
            f"{name}-ownership",
            bucket=self.bucket.id,
            rule={"object_ownership": "BucketOwnerEnforced"},
            opts=bucket_opts,
        )
        self.public_access_block = aws.s3.BucketPublicAccessBlock(
            f"{name}-public-access",
            bucket=self.bucket.id,
            block_public_acls=True,
            block_public_policy=True,
            ignore_public_acls=True,
            restrict_public_buckets=True,
            opts=bucket_opts,
        )
        self.versioning = aws.s3.BucketVersioning(
            f"{name}-versioning",
            bucket=self.bucket.id,
            versioning_configuration={"status": "Enabled"},
            opts=bucket_opts,
        )
        sse = (
            {"sse_algorithm": "aws:kms", "kms_master_key_id": self.kms_key.arn}
            if self.kms_key
            else {"sse_algorithm": "AES256"}
        )
        self.encryption = aws.s3.BucketServerSideEncryptionConfiguration(
            f"{name}-encryption",
            bucket=self.bucket.id,
            rules=[
                {"apply_server_side_encryption_by_default": sse, "bucket_key_enabled": bool(self.kms_key)}
            ],
            opts=bucket_opts,
        )
        self.lifecycle = aws.s3.BucketLifecycleConfiguration(
            f"{name}-lifecycle",
            bucket=self.bucket.id,
            rules=lifecycle_rules(args),
            # Lifecycle rules on a versioned bucket must see versioning first.
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.versioning]),
        )
        self.policy = aws.s3.BucketPolicy(
            f"{name}-tls-only",
            bucket=self.bucket.id,
            policy=pulumi.Output.all(self.bucket.arn, args.fsx_file_system_ids or []).apply(
                lambda a: bucket_policy(
                    a[0], args.fence and dataclasses.replace(args.fence, fsx_file_system_ids=tuple(a[1]))
                )
            ),
            # A Deny policy cannot be written before the public access block settles.
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.public_access_block]),
        )

        self.bucket_name = self.bucket.bucket
        self.arn = self.bucket.arn
        self.register_outputs({"bucketName": self.bucket_name, "arn": self.arn})


def lifecycle_rules(args: ArtifactBucketArgs) -> list[dict]:
    rules: list[dict] = [
        {
            # The current context is what the CodeBuild project and the nightly schedule point at:
            # it never expires. Pulumi deletes a superseded one (a new hash is a new key), which
            # leaves a noncurrent version; that expires after the retention period.
            "id": "expire-superseded-build-contexts",
            "status": "Enabled",
            "filter": {"prefix": BUILD_CONTEXT_PREFIX},
            "noncurrent_version_expiration": {"noncurrent_days": args.build_context_retention_days},
            "expiration": {"expired_object_delete_marker": True},
        },
        {
            "id": "abort-incomplete-multipart-uploads",
            "status": "Enabled",
            "filter": {"prefix": ""},
            "abort_incomplete_multipart_upload": {"days_after_initiation": ABORT_MULTIPART_AFTER_DAYS},
        },
    ]
    checkpoints: dict = {
        "id": "checkpoint-retention",
        "status": "Enabled",
        "filter": {"prefix": CHECKPOINT_PREFIX},
        "noncurrent_version_expiration": {"noncurrent_days": CHECKPOINT_NONCURRENT_DAYS},
    }
    if args.checkpoint_retention_days > 0:
        checkpoints["expiration"] = {"days": args.checkpoint_retention_days}
    rules.append(checkpoints)
    return rules


def bucket_policy(bucket_arn: str, fence: BucketFence | None) -> str:
    """TLS only and, with CI, the stack's fence (components/ci_fence.py bucket_fence)."""
    tls = {
        "Sid": "DenyInsecureTransport",
        "Effect": "Deny",
        "Principal": "*",
        "Action": "s3:*",
        "Resource": [bucket_arn, f"{bucket_arn}/*"],
        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
    }
    fenced = bucket_fence(fence, bucket_arn) if fence is not None else []
    return json.dumps({"Version": "2012-10-17", "Statement": [tls, *fenced]})
