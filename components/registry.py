"""The ECR repository the training image is pushed to."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from domain.names import ecr_repository_name


@dataclass(frozen=True)
class ImageRegistryArgs:
    untagged_expiry_days: int
    keep_last_images: int
    force_delete: bool
    protect: bool
    kms_key_arn: pulumi.Input[str] | None = None


class ImageRegistry(pulumi.ComponentResource):
    def __init__(self, name: str, args: ImageRegistryArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainstack:build:ImageRegistry", name, None, opts)
        encryption = (
            {"encryption_type": "KMS", "kms_key": args.kms_key_arn}
            if args.kms_key_arn is not None
            else {"encryption_type": "AES256"}
        )
        self.repository = aws.ecr.Repository(
            name,
            name=ecr_repository_name(pulumi.get_project(), pulumi.get_stack(), name),
            # Jobs run images pinned by digest; immutable tags keep a tag meaning one build.
            image_tag_mutability="IMMUTABLE",
            image_scanning_configuration={"scan_on_push": True},
            encryption_configurations=[encryption],
            force_delete=args.force_delete,
            opts=pulumi.ResourceOptions(parent=self, protect=args.protect, retain_on_delete=args.protect),
        )
        self.lifecycle_policy = aws.ecr.LifecyclePolicy(
            f"{name}-lifecycle",
            repository=self.repository.name,
            policy=lifecycle_policy(args.untagged_expiry_days, args.keep_last_images),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.repository_url = self.repository.repository_url
        self.arn = self.repository.arn
        self.register_outputs({"repositoryUrl": self.repository_url, "arn": self.arn})


# Tags: `pulumi up` builds push `build-<context hash>`; nightly and webhook builds push
# `scheduled-<context hash>-<UTC time>`. Each kind is counted on its own, so nightly builds never
# push the image the stack runs out of the newest N.
STACK_BUILD_TAG_PREFIX = "build-"
SCHEDULED_BUILD_TAG_PREFIX = "scheduled-"


def lifecycle_policy(untagged_expiry_days: int, keep_last_images: int) -> str:
    rules = [
        {
            "rulePriority": 1,
            "description": f"Expire untagged images after {untagged_expiry_days} days",
            "selection": {
                "tagStatus": "untagged",
                "countType": "sinceImagePushed",
                "countUnit": "days",
                "countNumber": untagged_expiry_days,
            },
            "action": {"type": "expire"},
        }
    ]
    for priority, (prefix, what) in enumerate(
        ((SCHEDULED_BUILD_TAG_PREFIX, "scheduled builds"), (STACK_BUILD_TAG_PREFIX, "stack builds")), start=2
    ):
        rules.append(
            {
                "rulePriority": priority,
                "description": f"Keep the newest {keep_last_images} {what}",
                "selection": {
                    "tagStatus": "tagged",
                    "tagPrefixList": [prefix],
                    "countType": "imageCountMoreThan",
                    "countNumber": keep_last_images,
                },
                "action": {"type": "expire"},
            }
        )
    return json.dumps({"rules": rules}, indent=2)
