"""AWS access for this repository's GitHub Actions through OIDC: no long-lived keys anywhere.

Two roles per stack, each trusting GitHub's OIDC provider for one audience and one subject:
- preview: `pulumi preview` on pull requests (or, for a stack with an environment, in that
  environment). Anyone who can push a branch runs code under it, so it can change nothing and read
  no data: the settings of the services the stack uses (`preview_policy`), this stack's state in a
  self-managed backend, view-only in the cluster, and decrypt only this stack's secrets key.
- deploy: `pulumi up` from pushes to the deploy branch (or jobs in the stack's environment, which
  a person approves). Deploying creates VPCs, IAM roles and EKS clusters, so it is an admin role;
  its subject is what keeps it out of reach of branches.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from domain.names import ci_role_name

GITHUB_OIDC_HOST = "token.actions.githubusercontent.com"
AUDIENCE = "sts.amazonaws.com"
ADMIN_POLICY = "arn:aws:iam::aws:policy/AdministratorAccess"


@dataclass(frozen=True)
class GitHubCiAccessArgs:
    repository: str  # owner/repo
    owner_id: int | None  # with repository_id: also trust the immutable subject format
    repository_id: int | None
    environment: str | None  # set: both roles trust jobs in this environment only
    branch: str
    oidc_provider_arn: str | None  # the account's provider, when another stack created it
    secrets_key_arn: str | None
    state_bucket: str | None  # a self-managed backend's bucket: previews read this stack's state there
    project: str
    stack: str
    role_prefix: str  # roles get fixed names: trainstack-<stack>-github-{preview,deploy}


def subjects(args: GitHubCiAccessArgs, context: str) -> list[str]:
    """`sub` claims for one context (pull_request, ref:refs/heads/main, environment:prod), in the
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
    statements: list[dict] = [
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
            "Resource": [
                f"arn:aws:ssm:*:*:parameter/{args.project}/{args.stack}",
                f"arn:aws:ssm:*:*:parameter/{args.project}/{args.stack}/*",
            ],
        },
    ]
    if args.state_bucket:
        # The DIY backend's layout: .pulumi/meta.yaml and .pulumi/stacks/<project>/<stack>.json;
        # a preview takes no lock, so it writes nothing.
        bucket = f"arn:aws:s3:::{args.state_bucket}"
        statements += [
            {
                "Sid": "StackState",
                "Effect": "Allow",
                "Action": ["s3:GetObject"],
                "Resource": [
                    f"{bucket}/.pulumi/meta.yaml",
                    f"{bucket}/.pulumi/stacks/{args.project}/{args.stack}.json*",
                ],
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


def role_name(args: GitHubCiAccessArgs, use: str) -> str:
    """Fixed, so the program can tell when the deploy role itself runs `pulumi up`."""
    return ci_role_name(args.role_prefix, use)


def preview_environment(environment: str) -> str:
    """Previews of a stack with an environment run in their own one: a token of `<env>` (for
    `up`, restricted to the deploy branch) is never one a pull request's job can get."""
    return f"{environment}-preview"


def contexts(args: GitHubCiAccessArgs) -> tuple[str, str]:
    """(preview context, deploy context): never the same subject, so a preview job can never
    assume the deploy role."""
    if args.environment:
        return f"environment:{preview_environment(args.environment)}", f"environment:{args.environment}"
    return "pull_request", f"ref:refs/heads/{args.branch}"


class GitHubCiAccess(pulumi.ComponentResource):
    def __init__(self, name: str, args: GitHubCiAccessArgs, opts: pulumi.ResourceOptions | None = None):
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
        preview_context, deploy_context = contexts(args)

        def role(use: str, context: str) -> aws.iam.Role:
            return aws.iam.Role(
                f"{name}-{use}",
                name=role_name(args, use),
                description=f"GitHub Actions of {args.repository}: pulumi {use} ({context})",
                assume_role_policy=self.provider_arn.apply(
                    lambda arn: github_trust(arn, subjects(args, context))
                ),
                max_session_duration=3600 * 4,  # a first `up` with an EKS cluster takes ~30 min
                opts=child,
            )

        self.deploy_role_name = role_name(args, "deploy")
        self.preview_role = role("preview", preview_context)
        aws.iam.RolePolicy(
            f"{name}-preview", role=self.preview_role.id, policy=json.dumps(preview_policy(args)), opts=child
        )
        self.deploy_role = role("deploy", deploy_context)
        aws.iam.RolePolicyAttachment(
            f"{name}-deploy", role=self.deploy_role.name, policy_arn=ADMIN_POLICY, opts=child
        )
        self.register_outputs(
            {
                "oidcProviderArn": self.provider_arn,
                "previewRoleArn": self.preview_role.arn,
                "deployRoleArn": self.deploy_role.arn,
            }
        )
