"""AWS names the program builds from the project and stack names, kept within each service's limit."""

from __future__ import annotations

import hashlib

# AWS limits (characters) on the names the program builds from the project and stack names.
ECR_PULL_THROUGH_PREFIX_MAX = 30
ECR_REPOSITORY_MAX = 256
IAM_ROLE_NAME_MAX = 64
EKS_CLUSTER_NAME_MAX = 100
EKS_NODE_GROUP_NAME_MAX = 63
CODEBUILD_PROJECT_MAX = 150


def fit(name: str, limit: int) -> str:
    """`name` if it is within `limit`, else its head and a hash of the whole: the same stack always
    gets the same name, and names that fit (every stack already deployed) never change."""
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:7]
    return f"{name[: limit - len(digest) - 1].rstrip('-')}-{digest}"
