"""Names the program builds from the project and stack names, kept within each service's limit: every
place that creates, reads or checks one of these resources builds its name here."""

from __future__ import annotations

import hashlib

PROJECT = "trainstack"  # the Pulumi project: config keys, AWS names, the CI roles
STACK_TAG = "trainstack:stack"  # on every AWS resource of the stack (the provider's default tags)

# AWS limits (characters) on the names the program builds from the project and stack names.
ECR_PULL_THROUGH_PREFIX_MAX = 30
ECR_REPOSITORY_MAX = 256
IAM_ROLE_NAME_MAX = 64
EKS_CLUSTER_NAME_MAX = 100
EKS_NODE_GROUP_NAME_MAX = 63
CODEBUILD_PROJECT_MAX = 150
SCHEDULE_GROUP_MAX = 64

# A batch Job's name is its pods' `job-name` label value: 63 characters at most.
JOB_NAME_MAX = 63


def fit(name: str, limit: int) -> str:
    """`name` if it is within `limit`, else its head and a hash of the whole: the same stack always
    gets the same name, and names that fit (every stack already deployed) never change."""
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:7]
    return f"{name[: limit - len(digest) - 1].rstrip('-')}-{digest}"


def eks_cluster_name(stack: str) -> str:
    return fit(f"{PROJECT}-{stack}", EKS_CLUSTER_NAME_MAX)


def node_group_name(cluster_name: str, group: str) -> str:
    """An EKS managed node group: the system group's, or a GPU group's (its config name)."""
    return fit(f"{cluster_name}-{group}", EKS_NODE_GROUP_NAME_MAX)


def codebuild_project_name(project: str, stack: str, image: str) -> str:
    return fit(f"{project}-{stack}-{image}", CODEBUILD_PROJECT_MAX)


def ci_runner_project_name(stack: str) -> str:
    """The CodeBuild project of the stack's GitHub Actions runner (the workflows' runs-on label)."""
    return fit(f"{PROJECT}-{stack}-github-runner", CODEBUILD_PROJECT_MAX)


def pull_through_prefix(codebuild_project: str) -> str:
    """The ECR pull-through cache of Docker Hub for one image build."""
    return fit(f"{codebuild_project}-dockerhub", ECR_PULL_THROUGH_PREFIX_MAX)


def ecr_repository_name(project: str, stack: str, repository: str) -> str:
    return fit(f"{project}/{stack}/{repository}", ECR_REPOSITORY_MAX)


def ci_role_name(role_prefix: str, use: str) -> str:
    """A GitHub Actions role (use: preview or deploy), fixed so the program knows it by name."""
    return fit(f"{role_prefix}-github-{use}", IAM_ROLE_NAME_MAX)


def iam_path(stack: str) -> str:
    """The IAM path of every role and policy the stack creates: its CI fence allows IAM writes,
    `iam:PassRole` and `sts:AssumeRole` under it and nowhere else."""
    return f"/{PROJECT}/{stack}/"


def schedule_group_name(stack: str) -> str:
    """EventBridge Scheduler's schedules take no tags: the stack's live in a group of its own,
    which its CI fence names."""
    return fit(f"{PROJECT}-{stack}", SCHEDULE_GROUP_MAX)


def control_plane_log_group(cluster_name: str) -> str:
    return f"/aws/eks/{cluster_name}/cluster"


def creator_parameter(stack: str) -> str:
    """The SSM parameter the first run records the cluster's creator in."""
    return f"/{PROJECT}/{stack}/eks-cluster-creator"
