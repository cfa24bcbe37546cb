"""Account plane: the explicit AWS provider every AWS resource goes through, who the stack runs
as, and the account checks that run before anything AWS creates is registered."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pulumi
import pulumi_aws as aws

from account_checks import AccountFacts, check_account, check_existing_cluster
from account_checks.world import World
from config import StackConfig
from domain.names import STACK_TAG, iam_path


@dataclass(frozen=True)
class Account:
    """Where the stack deploys: the explicit AWS provider and who it runs as, the IAM path of every
    role and policy the stack creates, and (with CI) the permissions boundary every role must carry."""

    provider: aws.Provider
    account_id: str
    caller_arn: str
    iam_path: str
    boundary: tuple[aws.iam.Policy, str] | None = None  # the policy, and its ARN

    @property
    def opts(self) -> pulumi.ResourceOptions:
        transforms = [in_iam_path(self.iam_path)]
        if self.boundary is not None:
            transforms.append(permissions_boundary(*self.boundary))
        return pulumi.ResourceOptions(providers=[self.provider], transforms=transforms)

    def with_boundary(self, boundary: tuple[aws.iam.Policy, str] | None) -> Account:
        return replace(self, boundary=boundary)

    @property
    def invoke_opts(self) -> pulumi.InvokeOptions:
        return pulumi.InvokeOptions(provider=self.provider)


IAM_PATHED = ("aws:iam/role:Role", "aws:iam/policy:Policy")


def in_iam_path(path: str) -> pulumi.ResourceTransform:
    """Resource transform: every IAM role and policy below the resources it is given to (pulumi-eks's
    included) lives under the stack's path, which the CI fence allows IAM writes, PassRole and
    AssumeRole in (components/ci_fence.py)."""

    def with_path(args: pulumi.ResourceTransformArgs) -> pulumi.ResourceTransformResult | None:
        if args.type_ not in IAM_PATHED:
            return None
        return pulumi.ResourceTransformResult(props={**args.props, "path": path}, opts=args.opts)

    return with_path


def permissions_boundary(boundary: aws.iam.Policy, arn: str) -> pulumi.ResourceTransform:
    """Resource transform: every IAM role below the resources it is given to (the components and
    their children, pulumi-eks's roles included) carries the CI fence's permissions boundary, and
    is created after it: the CI deploy role may create or change a role only with it
    (components/ci_fence.py stack_fence)."""

    def with_boundary(args: pulumi.ResourceTransformArgs) -> pulumi.ResourceTransformResult | None:
        if args.type_ != "aws:iam/role:Role":
            return None
        return pulumi.ResourceTransformResult(
            props={**args.props, "permissionsBoundary": arn},
            opts=pulumi.ResourceOptions.merge(args.opts, pulumi.ResourceOptions(depends_on=[boundary])),
        )

    return with_boundary


def aws_account(cfg: StackConfig) -> Account:
    # One explicit provider carries region, profile and default tags to every AWS resource; the
    # image build's boto3 calls use the same region, profile and (checked) account.
    provider = aws.Provider(
        "aws",
        region=cfg.region,
        profile=cfg.aws_profile,
        default_tags={"tags": {STACK_TAG: cfg.stack, "managed-by": "pulumi", **cfg.tags}},
    )
    caller = aws.get_caller_identity(opts=pulumi.InvokeOptions(provider=provider))
    return Account(provider, caller.account_id, caller.arn, iam_path(cfg.stack))


def account_checks(cfg: StackConfig, account: Account, world: World) -> AccountFacts:
    """Quotas, AZs, reservations, the CodeBuild credential and the aws CLI, read before any resource
    that AWS creates is registered; stops with every problem found."""
    return check_account(
        cfg,
        account.account_id,
        account.caller_arn,
        account.invoke_opts,
        session=world.session(cfg),
        aws_cli=world.aws_cli(),
    )


def existing_cluster_checks(cfg: StackConfig, account: Account, world: World) -> None:
    """The EKS cluster exists and can take the stack's pods' identity; the CodeBuild credential."""
    check_existing_cluster(
        cfg,
        account.account_id,
        account.invoke_opts,
        session=world.session(cfg),
        aws_cli=world.aws_cli(),
    )
