"""AWS access for this repository's GitHub Actions through OIDC: no long-lived keys anywhere.

Each role trusts GitHub's OIDC provider for one audience and one GitHub environment, never a branch
ref or `pull_request` (a pull request can edit its own workflow):
- preview (`<env>-preview`): `pulumi preview` of a pull request. Anyone who can push a branch runs
  code under it, so it changes nothing, decrypts nothing and reads no data or state: the settings
  of the services the stack uses (`preview_policy`) and view-only in the cluster.
- preview-secrets (`<env>-preview-secrets`, only with `ci.secretsKeyArn` or `ci.stateBucket`): a
  preview that needs this stack's state and secrets key, behind an environment a person approves.
- deploy (`<env>`): `pulumi up`. It creates VPCs, IAM roles and EKS clusters, so it is broad, but
  capped by the stack's permissions boundary (`stack_fence`): it can never touch another stack's
  resources, decrypt another key, read another stack's state, or create a role without the boundary.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from domain.names import STACK_TAG, ci_role_name, fit

GITHUB_OIDC_HOST = "token.actions.githubusercontent.com"
AUDIENCE = "sts.amazonaws.com"
IAM_POLICY_NAME_MAX = 128


@dataclass(frozen=True)
class GitHubCiAccessArgs:
    repository: str  # owner/repo
    owner_id: int | None  # with repository_id: also trust the immutable subject format
    repository_id: int | None
    environment: str  # the deploy environment; previews run in `<environment>-preview(-secrets)`
    oidc_provider_arn: str | None  # the account's provider, when another stack created it
    secrets_key_arn: str | None
    state_bucket: str | None  # a self-managed backend's bucket: previews read this stack's state there
    project: str
    stack: str
    role_prefix: str  # fixed names: trainstack-<stack>-github-{preview,preview-secrets,deploy}, -boundary
    cluster_name: str  # EKS tags what it creates for a node group with `eks:cluster-name`


def subjects(args: GitHubCiAccessArgs, context: str) -> list[str]:
    """`sub` claims for one context (environment:prod), in the
    classic form and, given the ids, the immutable `owner@id/repo@id` form of newer repositories."""
    found = [f"repo:{args.repository}:{context}"]
    if args.owner_id is not None and args.repository_id is not None:
        owner, name = args.repository.split("/", 1)
        found.append(f"repo:{owner}@{args.owner_id}/{name}@{args.repository_id}:{context}")
    return found


def github_trust(provider_arn: str, subs: list[str]) -> str:
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"Federated": provider_arn},
                    "Action": "sts:AssumeRoleWithWebIdentity",
                    "Condition": {
                        "StringEquals": {f"{GITHUB_OIDC_HOST}:aud": AUDIENCE, f"{GITHUB_OIDC_HOST}:sub": subs}
                    },
                }
            ],
        }
    )


# What `pulumi preview` of this stack reads: the configuration of the services the stack uses
# (describe, list, get of settings and policies), never their data. AWS's ReadOnlyAccess would also
# read every bucket's objects, DynamoDB items, SSM parameters and logs in the account.
PREVIEW_ACTIONS = sorted(
    [
        "autoscaling:Describe*",
        "codebuild:BatchGetProjects",
        "codebuild:ListProjects",
        "codebuild:ListSourceCredentials",  # the account checks: a GitHub credential for webhooks
        "ec2:Describe*",
        "ecr:DescribeImages",
        "ecr:DescribePullThroughCacheRules",
        "ecr:DescribeRepositories",
        "ecr:GetAuthorizationToken",
        "ecr:GetLifecyclePolicy",
        "ecr:GetRepositoryPolicy",
        "ecr:ListTagsForResource",
        "eks:Describe*",
        "eks:List*",
        "events:Describe*",
        "events:ListTagsForResource",
        "events:ListTargetsByRule",
        "iam:GetInstanceProfile",
        "iam:GetOpenIDConnectProvider",
        "iam:GetPolicy",
        "iam:GetPolicyVersion",
        "iam:GetRole",
        "iam:GetRolePolicy",
        "iam:ListAttachedRolePolicies",
        "iam:ListOpenIDConnectProviders",
        "iam:ListRolePolicies",
        "kms:DescribeKey",
        "kms:GetKeyPolicy",
        "kms:GetKeyRotationStatus",
        "kms:ListAliases",
        "kms:ListResourceTags",
        "logs:DescribeLogGroups",
        "logs:ListTagsForResource",
        "s3:GetAccelerateConfiguration",
        "s3:GetBucket*",
        "s3:GetEncryptionConfiguration",
        "s3:GetLifecycleConfiguration",
        "s3:GetReplicationConfiguration",
        "s3:ListAllMyBuckets",
        "scheduler:GetSchedule",
        "scheduler:ListSchedules",
        "secretsmanager:DescribeSecret",
        "servicequotas:GetAWSDefaultServiceQuota",  # the account checks read the EC2 vCPU quotas
        "servicequotas:GetServiceQuota",
        "ssm:DescribeParameters",
        "sts:GetCallerIdentity",
    ]
)
# Public parameters only (EKS-optimized AMI ids), not the account's own.
PUBLIC_SSM_PARAMETERS = "arn:aws:ssm:*::parameter/aws/service/*"


def preview_policy(args: GitHubCiAccessArgs) -> dict:
    """Settings of the stack's services and the stack's own SSM records: no kms:Decrypt, no state."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "DescribeStackServices", "Effect": "Allow", "Action": PREVIEW_ACTIONS, "Resource": "*"},
            {
                "Sid": "PublicParameters",
                "Effect": "Allow",
                "Action": ["ssm:GetParameter"],
                "Resource": PUBLIC_SSM_PARAMETERS,
            },
            {
                # The stack's own records (who created the cluster), read by every run.
                "Sid": "StackParameters",
                "Effect": "Allow",
                "Action": ["ssm:GetParameter", "ssm:GetParametersByPath", "ssm:ListTagsForResource"],
                "Resource": stack_parameters(args),
            },
        ],
    }


def stack_parameters(args: GitHubCiAccessArgs) -> list[str]:
    return [
        f"arn:aws:ssm:*:*:parameter/{args.project}/{args.stack}",
        f"arn:aws:ssm:*:*:parameter/{args.project}/{args.stack}/*",
    ]


def state_objects(args: GitHubCiAccessArgs) -> list[str]:
    """This stack's files in a self-managed backend (pulumi/pkg/backend/diy: `.pulumi/meta.yaml`,
    and `stacks/`, `backups/`, `history/`, `locks/` per `<project>/<stack>`)."""
    root = f"arn:aws:s3:::{args.state_bucket}/.pulumi"
    return [
        f"{root}/meta.yaml",
        f"{root}/stacks/{args.project}/{args.stack}.json*",
        *(f"{root}/{tree}/{args.project}/{args.stack}/*" for tree in ("backups", "history", "locks")),
    ]


def preview_secrets_policy(args: GitHubCiAccessArgs) -> dict:
    """A preview's reads plus this stack's state and secrets key (a preview takes no lock, so it
    writes nothing)."""
    statements = list(preview_policy(args)["Statement"])
    if args.state_bucket:
        bucket = f"arn:aws:s3:::{args.state_bucket}"
        statements += [
            {
                "Sid": "StackState",
                "Effect": "Allow",
                "Action": ["s3:GetObject"],
                "Resource": state_objects(args),
            },
            {
                "Sid": "ListState",
                "Effect": "Allow",
                "Action": ["s3:ListBucket"],
                "Resource": bucket,
                "Condition": {"StringLike": {"s3:prefix": [".pulumi/*"]}},
            },
        ]
    if args.secrets_key_arn:
        statements.append(
            {
                "Sid": "StackSecrets",
                "Effect": "Allow",
                "Action": ["kms:Decrypt"],
                "Resource": args.secrets_key_arn,
            }
        )
    return {"Version": "2012-10-17", "Statement": statements}


def deploy_policy(args: GitHubCiAccessArgs) -> dict:
    """Everything the boundary leaves, except the state bucket beyond this stack's own files."""
    if not args.state_bucket:
        return {
            "Version": "2012-10-17",
            "Statement": [{"Sid": "Deploy", "Effect": "Allow", "Action": "*", "Resource": "*"}],
        }
    bucket = f"arn:aws:s3:::{args.state_bucket}"
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "Deploy", "Effect": "Allow", "Action": "*", "NotResource": [bucket, f"{bucket}/*"]},
            {
                "Sid": "StackState",
                "Effect": "Allow",
                "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"],
                "Resource": state_objects(args),
            },
            {
                "Sid": "ListState",
                "Effect": "Allow",
                "Action": ["s3:ListBucket", "s3:GetBucketLocation"],
                "Resource": bucket,
            },
        ],
    }


# What a key's data operations are: the fence keeps them to the stack's own keys.
KMS_DATA_ACTIONS = [
    "kms:CreateGrant",
    "kms:Decrypt",
    "kms:DisableKey",
    "kms:Encrypt",
    "kms:GenerateDataKey*",
    "kms:PutKeyPolicy",
    "kms:ReEncrypt*",
    "kms:ScheduleKeyDeletion",
]
# IAM actions that give a role permissions: allowed only on roles that carry the stack's boundary
# (each supports the iam:PermissionsBoundary condition key, per the IAM service authorization
# reference; AWS's "delegate permissions boundaries" example uses exactly this set).
BOUNDED_ROLE_ACTIONS = [
    "iam:AttachRolePolicy",
    "iam:CreateRole",
    "iam:DeleteRolePolicy",
    "iam:DetachRolePolicy",
    "iam:PutRolePermissionsBoundary",
    "iam:PutRolePolicy",
]
# What the deploy role may never change: its own access (the boundary, the CI roles, the provider).
IAM_WRITE_ACTIONS = [
    "iam:Add*",
    "iam:Attach*",
    "iam:Create*",
    "iam:Delete*",
    "iam:Detach*",
    "iam:Put*",
    "iam:Remove*",
    "iam:Set*",
    "iam:Tag*",
    "iam:Untag*",
    "iam:Update*",
]


def stack_fence(args: GitHubCiAccessArgs, boundary_arn: str) -> list[dict]:
    """The denies of the stack's permissions boundary. An explicit deny wins over any allow
    (IAM's policy evaluation logic), so a role under this boundary reaches no other stack's
    resources whatever its own policies say.

    AWS puts a resource's tags in `aws:ResourceTag/<key>` and a request's in `aws:RequestTag/<key>`
    and `aws:TagKeys`; negated operators (StringNotEquals) match when the key is absent, so
    "tagged, and not ours" is `Null: false` together with `StringNotEquals`."""
    tag = f"aws:ResourceTag/{STACK_TAG}"
    cluster_tag = "aws:ResourceTag/eks:cluster-name"
    role_arns = [
        f"arn:aws:iam::*:role/{role_name(args, use)}" for use in ("preview", "preview-secrets", "deploy")
    ]
    provider = f"arn:aws:iam::*:oidc-provider/{GITHUB_OIDC_HOST}"
    kms: dict = {
        "Sid": "OnlyOurKeys",
        "Effect": "Deny",
        "Action": KMS_DATA_ACTIONS,
        # Direct calls only: a service using a key on the caller's behalf (EBS, S3) sets kms:ViaService.
        "Condition": {"StringNotEquals": {tag: args.stack}, "Null": {"kms:ViaService": "true"}},
    }
    if args.secrets_key_arn:
        kms["NotResource"] = [args.secrets_key_arn]  # the secrets provider's key, made outside the stack
    else:
        kms["Resource"] = "*"
    return [
        {
            "Sid": "NotOtherStacks",
            "Effect": "Deny",
            "Action": "*",
            "Resource": "*",
            "Condition": {"Null": {tag: "false"}, "StringNotEquals": {tag: args.stack}},
        },
        {
            # Instances, ENIs and Auto Scaling groups EKS creates for another cluster's node groups.
            "Sid": "NotOtherClusters",
            "Effect": "Deny",
            "Action": "*",
            "Resource": "*",
            "Condition": {
                "Null": {cluster_tag: "false"},
                "StringNotEquals": {cluster_tag: args.cluster_name},
            },
        },
        {
            # The stack tag is set to this stack or not at all: no claiming another stack's resource,
            # no creating one in another stack's name, no removing the tag.
            "Sid": "StackTagIsOurs",
            "Effect": "Deny",
            "Action": "*",
            "Resource": "*",
            "Condition": {
                "ForAnyValue:StringEquals": {"aws:TagKeys": [STACK_TAG]},
                "StringNotEquals": {f"aws:RequestTag/{STACK_TAG}": args.stack},
            },
        },
        kms,
        {
            "Sid": "RolesCarryTheBoundary",
            "Effect": "Deny",
            "Action": BOUNDED_ROLE_ACTIONS,
            "Resource": "*",
            "Condition": {"StringNotEquals": {"iam:PermissionsBoundary": boundary_arn}},
        },
        {
            "Sid": "BoundaryStays",
            "Effect": "Deny",
            "Action": ["iam:DeleteRolePermissionsBoundary", "iam:DeleteUserPermissionsBoundary"],
            "Resource": "*",
        },
        {
            # Users take access keys, which outlive the workflow's session.
            "Sid": "NoUsers",
            "Effect": "Deny",
            "Action": [
                "iam:CreateAccessKey",
                "iam:CreateLoginProfile",
                "iam:CreateUser",
                "iam:UpdateLoginProfile",
            ],
            "Resource": "*",
        },
        {
            # CI access itself changes only with a person's credentials (see docs/ci.md).
            "Sid": "CiAccessStays",
            "Effect": "Deny",
            "Action": IAM_WRITE_ACTIONS,
            "Resource": [boundary_arn, provider, *role_arns],
        },
    ]


def boundary_policy(args: GitHubCiAccessArgs, boundary_arn: str) -> dict:
    """The permissions boundary: everything but the fence. Effective permissions are the role's
    own policies intersected with this, less every deny."""
    allow = {"Sid": "WithinTheFence", "Effect": "Allow", "Action": "*", "Resource": "*"}
    return {"Version": "2012-10-17", "Statement": [allow, *stack_fence(args, boundary_arn)]}


def boundary_name(args: GitHubCiAccessArgs) -> str:
    return fit(f"{args.role_prefix}-boundary", IAM_POLICY_NAME_MAX)


def boundary_arn(args: GitHubCiAccessArgs, account_id: str) -> str:
    """Fixed, so the policy can name itself in its own conditions."""
    return f"arn:aws:iam::{account_id}:policy/{boundary_name(args)}"


def role_name(args: GitHubCiAccessArgs, use: str) -> str:
    """Fixed, so the program can tell when the deploy role itself runs `pulumi up`."""
    return ci_role_name(args.role_prefix, use)


def environments(args: GitHubCiAccessArgs) -> dict[str, str]:
    """The GitHub environment each role trusts, never the same for two roles: a preview job's token
    can never assume the deploy role. `<env>` is for `up` (restricted to main), `<env>-preview` for
    any pull request, `<env>-preview-secrets` for an approved preview that reads state and secrets."""
    found = {"preview": f"{args.environment}-preview", "deploy": args.environment}
    if args.secrets_key_arn or args.state_bucket:
        found["preview-secrets"] = f"{args.environment}-preview-secrets"
    return found


class GitHubCiAccess(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: GitHubCiAccessArgs, account_id: str, opts: pulumi.ResourceOptions | None = None
    ):
        super().__init__("trainstack:ci:GitHubCiAccess", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        if args.oidc_provider_arn:
            provider_arn: pulumi.Input[str] = args.oidc_provider_arn
        else:
            # One per account: a second stack in the account names this one's ARN instead.
            provider_arn = aws.iam.OpenIdConnectProvider(
                f"{name}-github",
                url=f"https://{GITHUB_OIDC_HOST}",
                client_id_lists=[AUDIENCE],
                opts=child,
            ).arn
        self.provider_arn = pulumi.Output.from_input(provider_arn)
        arn = boundary_arn(args, account_id)
        boundary = aws.iam.Policy(
            f"{name}-boundary",
            name=boundary_name(args),
            description=f"trainstack {args.stack}: no other stack's resources, keys or state",
            policy=json.dumps(boundary_policy(args, arn)),
            opts=child,
        )
        # Every role the stack creates passes this as its permissions_boundary (the fence refuses
        # CreateRole and policy changes on a role without it).
        self.boundary = (boundary, arn)  # the ARN as a plain value: the roles' transform sets it
        self.boundary_arn: pulumi.Output[str] = boundary.arn
        self.environments = environments(args)

        def role(use: str, policy: dict) -> aws.iam.Role:
            environment = self.environments[use]
            created = aws.iam.Role(
                f"{name}-{use}",
                name=role_name(args, use),
                description=f"GitHub Actions of {args.repository}: pulumi {use} (environment {environment})",
                assume_role_policy=self.provider_arn.apply(
                    lambda arn: github_trust(arn, subjects(args, f"environment:{environment}"))
                ),
                permissions_boundary=boundary.arn,
                max_session_duration=3600 * 4,  # a first `up` with an EKS cluster takes ~30 min
                opts=child,
            )
            aws.iam.RolePolicy(f"{name}-{use}", role=created.id, policy=json.dumps(policy), opts=child)
            return created

        self.deploy_role_name = role_name(args, "deploy")
        self.preview_role = role("preview", preview_policy(args))
        self.preview_secrets_role = (
            role("preview-secrets", preview_secrets_policy(args))
            if "preview-secrets" in self.environments
            else None
        )
        self.deploy_role = role("deploy", deploy_policy(args))
        self.register_outputs(
            {
                "oidcProviderArn": self.provider_arn,
                "boundaryArn": self.boundary_arn,
                "previewRoleArn": self.preview_role.arn,
                "deployRoleArn": self.deploy_role.arn,
            }
        )
