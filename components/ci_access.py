"""AWS access for this repository's GitHub Actions through OIDC: no long-lived keys anywhere.

A role's trust names GitHub's OIDC provider, one audience and one subject, and the subject carries
the workflow file and ref (`job_workflow_ref`, which the repository's OIDC subject customization
puts there: `SUBJECT_CLAIMS`). A GitHub environment alone is no gate: a workflow that names an
environment that does not exist creates it with no rules, so any branch could name `dev`.
- deploy (`<env>`): only `deploy.yml` on `main`, i.e. reviewed code, gets it. `pulumi up` creates
  VPCs, IAM roles and EKS clusters, so it is broad, but capped by the stack's fence (ci_fence.py),
  which its own policy repeats.
- preview (`<env>-preview`): `preview.yml` of a pull request, in an environment a person approves
  (required reviewers): the settings of the stack's services (no user data, no build
  environments, no objects), this stack's state and secrets key, view-only in the cluster.
Pull requests otherwise get the offline plan (`make plan`): no credentials at all.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.ci_fence import Fence, boundary_policy, stack_fence
from domain.names import ci_role_name, fit

GITHUB_OIDC_HOST = "token.actions.githubusercontent.com"
AUDIENCE = "sts.amazonaws.com"
IAM_POLICY_NAME_MAX = 128
# The repository's OIDC subject template (PUT repos/<owner>/<repo>/actions/oidc/customization/sub):
# `repo:<owner>/<repo>:environment:<env>:job_workflow_ref:<owner>/<repo>/<workflow>@<ref>`.
SUBJECT_CLAIMS = ["repo", "context", "job_workflow_ref"]
DEPLOY_WORKFLOW = ".github/workflows/deploy.yml"
PREVIEW_WORKFLOW = ".github/workflows/preview.yml"
DEPLOY_REF = "refs/heads/main"
PULL_REQUEST_REFS = "refs/pull/*/merge"  # a pull_request run's ref


@dataclass(frozen=True)
class GitHubCiAccessArgs:
    repository: str  # owner/repo
    owner_id: int | None  # with repository_id: also trust the immutable subject format
    repository_id: int | None
    environment: str  # the deploy environment; previews run in `<environment>-preview`
    oidc_provider_arn: str | None  # the account's provider, when another stack created it
    secrets_key_arn: str | None
    state_bucket: str | None  # a self-managed backend's bucket: previews read this stack's state there
    project: str
    stack: str
    role_prefix: str  # fixed names: trainstack-<stack>-github-{preview,deploy}, -boundary
    iam_path: str  # /trainstack/<stack>/: every role and policy of the stack
    cluster_name: str
    schedule_group: str
    # `ci.runner: codebuild`: the in-VPC deploy project (components/ci_runner.py), which runs `pulumi up`
    # as the deploy role; started only by the deploy role itself (codebuild:StartBuild).
    in_vpc_project_arn: str | None = None


def subjects(args: GitHubCiAccessArgs, use: str) -> list[str]:
    """`sub` claims of one role's workflow runs, in the classic form and, given the ids, the
    immutable `owner@id/repo@id` form of newer repositories."""
    environment, workflow, ref = {
        "deploy": (args.environment, DEPLOY_WORKFLOW, DEPLOY_REF),
        "preview": (f"{args.environment}-preview", PREVIEW_WORKFLOW, PULL_REQUEST_REFS),
    }[use]
    tail = f":environment:{environment}:job_workflow_ref:{args.repository}/{workflow}@{ref}"
    found = [f"repo:{args.repository}{tail}"]
    if args.owner_id is not None and args.repository_id is not None:
        owner, name = args.repository.split("/", 1)
        found.append(f"repo:{owner}@{args.owner_id}/{name}@{args.repository_id}{tail}")
    return found


def github_trust(provider_arn: str, subs: list[str], project_arn: str | None = None) -> str:
    """GitHub's OIDC for `subs`; with `project_arn`, also CodeBuild for that project only (its
    builds run as the role: the confused-deputy conditions CodeBuild documents, aws:SourceArn and
    aws:SourceAccount)."""
    # StringLike only where the subject has a wildcard (a pull request's number).
    audience = {f"{GITHUB_OIDC_HOST}:aud": AUDIENCE}
    if any("*" in s for s in subs):
        condition = {"StringEquals": audience, "StringLike": {f"{GITHUB_OIDC_HOST}:sub": subs}}
    else:
        condition = {"StringEquals": {**audience, f"{GITHUB_OIDC_HOST}:sub": subs}}
    statements: list[dict] = [
        {
            "Effect": "Allow",
            "Principal": {"Federated": provider_arn},
            "Action": "sts:AssumeRoleWithWebIdentity",
            "Condition": condition,
        }
    ]
    if project_arn is not None:
        account = project_arn.split(":")[4]
        statements.append(
            {
                "Effect": "Allow",
                "Principal": {"Service": "codebuild.amazonaws.com"},
                "Action": "sts:AssumeRole",
                "Condition": {"StringEquals": {"aws:SourceArn": project_arn, "aws:SourceAccount": account}},
            }
        )
    return json.dumps({"Version": "2012-10-17", "Statement": statements})


# What `pulumi preview` of this stack reads: the configuration of the services the stack uses
# (describe, list, get of settings and policies), never their data. AWS's ReadOnlyAccess would also
# read every bucket's objects, DynamoDB items, SSM parameters and logs in the account.
PREVIEW_ACTIONS = sorted(
    [
        "autoscaling:Describe*",
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
        "iam:ListRoles",  # the account checks: another stack's roles make the account shared
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


# What a preview must not read although the describe calls above return it: instances' and launch
# templates' user data, and CodeBuild projects' environment variables.
PREVIEW_DENIED = [
    "codebuild:BatchGetProjects",
    "ec2:DescribeInstanceAttribute",
    "ec2:DescribeLaunchTemplateVersions",
    "ec2:GetLaunchTemplateData",
]


def preview_policy(args: GitHubCiAccessArgs) -> dict:
    """The settings of the stack's services and the stack's own SSM records, state and secrets key
    (a preview takes no lock, so it writes nothing)."""
    statements: list[dict] = [
        {"Sid": "DescribeStackServices", "Effect": "Allow", "Action": PREVIEW_ACTIONS, "Resource": "*"},
        {"Sid": "NoUserDataOrBuildEnvironments", "Effect": "Deny", "Action": PREVIEW_DENIED, "Resource": "*"},
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
    ]
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


def deploy_policy(args: GitHubCiAccessArgs, fence: Fence) -> dict:
    """Everything but the fence (repeated here: the role's own policy holds it too), and in a shared
    state bucket only this stack's own files."""
    if not args.state_bucket:
        allow = [{"Sid": "Deploy", "Effect": "Allow", "Action": "*", "Resource": "*"}]
    else:
        bucket = f"arn:aws:s3:::{args.state_bucket}"
        allow = [
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
        ]
    return {"Version": "2012-10-17", "Statement": [*allow, *stack_fence(fence)]}


def boundary_name(args: GitHubCiAccessArgs) -> str:
    return fit(f"{args.role_prefix}-boundary", IAM_POLICY_NAME_MAX)


def boundary_arn(args: GitHubCiAccessArgs, account_id: str) -> str:
    """Fixed, so the policy can name itself in its own conditions."""
    return f"arn:aws:iam::{account_id}:policy{args.iam_path}{boundary_name(args)}"


def role_name(args: GitHubCiAccessArgs, use: str) -> str:
    """Fixed, so the program can tell when the deploy role itself runs `pulumi up`."""
    return ci_role_name(args.role_prefix, use)


def role_arn(args: GitHubCiAccessArgs, account_id: str, use: str) -> str:
    return f"arn:aws:iam::{account_id}:role{args.iam_path}{role_name(args, use)}"


def environments(args: GitHubCiAccessArgs) -> dict[str, str]:
    """The GitHub environment each role trusts, never the same for two roles."""
    return {"preview": f"{args.environment}-preview", "deploy": args.environment}


def fence_of(args: GitHubCiAccessArgs, account_id: str) -> Fence:
    return Fence(
        stack=args.stack,
        cluster_name=args.cluster_name,
        iam_path=args.iam_path,
        boundary_arn=boundary_arn(args, account_id),
        ci_arns=[
            *(role_arn(args, "*", use) for use in ("preview", "deploy")),
            f"arn:aws:iam::*:oidc-provider/{GITHUB_OIDC_HOST}",
        ],
        secrets_key_arn=args.secrets_key_arn,
        schedule_group=args.schedule_group,
        state_bucket=args.state_bucket,
        state_roles=tuple(role_arn(args, account_id, use) for use in ("preview", "deploy")),
    )


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
        fence = fence_of(args, account_id)
        boundary = aws.iam.Policy(
            f"{name}-boundary",
            name=boundary_name(args),
            path=args.iam_path,
            description=f"trainstack {args.stack}: no other stack's resources, keys or state",
            policy=json.dumps(boundary_policy(fence)),
            opts=child,
        )
        # Every role the stack creates passes this as its permissions_boundary (the fence refuses
        # CreateRole and policy changes on a role without it).
        self.boundary = (boundary, fence.boundary_arn)  # a plain value: the roles' transform sets it
        self.boundary_arn: pulumi.Output[str] = boundary.arn
        self.environments = environments(args)

        def role(use: str, policy: dict) -> aws.iam.Role:
            environment = self.environments[use]
            created = aws.iam.Role(
                f"{name}-{use}",
                name=role_name(args, use),
                path=args.iam_path,
                description=f"GitHub Actions of {args.repository}: pulumi {use} (environment {environment})",
                assume_role_policy=self.provider_arn.apply(
                    lambda arn: github_trust(
                        arn, subjects(args, use), args.in_vpc_project_arn if use == "deploy" else None
                    )
                ),
                permissions_boundary=boundary.arn,
                max_session_duration=3600 * 4,  # a first `up` with an EKS cluster takes ~30 min
                opts=child,
            )
            aws.iam.RolePolicy(f"{name}-{use}", role=created.id, policy=json.dumps(policy), opts=child)
            return created

        self.deploy_role_arn = role_arn(args, account_id, "deploy")
        self.preview_role = role("preview", preview_policy(args))
        self.deploy_role = role("deploy", deploy_policy(args, fence))
        self.register_outputs(
            {
                "oidcProviderArn": self.provider_arn,
                "boundaryArn": self.boundary_arn,
                "previewRoleArn": self.preview_role.arn,
                "deployRoleArn": self.deploy_role.arn,
            }
        )
