"""CI plane: the GitHub Actions OIDC roles and the stack's permissions boundary (when
`ci.githubRepository` is set) and the values to put in the repository's variables."""

from __future__ import annotations

import pulumi

from components.ci_access import GitHubCiAccess, GitHubCiAccessArgs
from components.ci_fence import BucketFence
from components.ci_runner import CiRunner, CiRunnerArgs
from config import PROJECT, StackConfig
from domain.names import ci_runner_project_name, eks_cluster_name, iam_path, schedule_group_name
from domain.network import PrivateNetwork
from domain.principals import same_principal
from planes.account import Account
from stack_outputs import StackOutputs


def ci_access(cfg: StackConfig, account: Account) -> GitHubCiAccess | None:
    ci = cfg.ci
    if ci.github_repository is None:
        return None
    pulumi.log.info(account_mode_line(cfg, account.account_id))
    return GitHubCiAccess(
        "github-actions",
        GitHubCiAccessArgs(
            repository=ci.github_repository,
            owner_id=ci.github_owner_id,
            repository_id=ci.github_repository_id,
            environment=ci.environment or cfg.stack,
            oidc_provider_arn=ci.oidc_provider_arn,
            secrets_key_arn=ci.secrets_key_arn,
            state_bucket=ci.state_bucket,
            project=PROJECT,
            stack=cfg.stack,
            role_prefix=f"{PROJECT}-{cfg.stack}",
            iam_path=iam_path(cfg.stack),
            cluster_name=eks_cluster_name(cfg.stack),
            schedule_group=schedule_group_name(cfg.stack),
            in_vpc_project_arn=(
                f"arn:aws:codebuild:{cfg.region}:{account.account_id}:project/{ci_runner_project_name(cfg.stack)}"
                if ci.runner == "codebuild"
                else None
            ),
        ),
        account.account_id,
        account.opts,
    )


def account_mode_line(cfg: StackConfig, account_id: str) -> str:
    """What the plan says of the stack's account: its own environment's, or shared (fenced)."""
    fence = f"fenced by {iam_path(cfg.stack)} and {PROJECT}-{cfg.stack}-boundary"
    if cfg.ci.account_mode == "shared":
        return (
            f"CI access: account {account_id} is shared with other environments' stacks ({fence}; "
            f"the bucket lets in only {cfg.stack}'s roles and {cfg.ci.break_glass_role_arn})."
        )
    return f"CI access: account {account_id} is {cfg.stack}'s own (account per environment; {fence})."


def ci_bucket_fence(cfg: StackConfig, account: Account, ci: GitHubCiAccess | None) -> BucketFence | None:
    """With CI, the bucket lets in the stack's own principals and the break-glass role only."""
    if ci is None or cfg.ci.break_glass_role_arn is None:
        return None
    return BucketFence(
        cfg.stack, account.account_id, iam_path(cfg.stack), ci.deploy_role_arn, cfg.ci.break_glass_role_arn
    )


def ci_deploy_entry(ci: GitHubCiAccess | None, creator: str) -> pulumi.Output[str] | None:
    """The deploy role's cluster-admin entry, unless the deploy role created the cluster: EKS
    made the creator an admin itself, and a second entry for it fails. Whoever runs this
    `pulumi up` does not matter: the entries stay the same for every caller."""
    if ci is None:
        return None
    deploy_arn = ci.deploy_role_arn
    if same_principal(creator, deploy_arn):
        pulumi.log.info(f"{deploy_arn} created the cluster; EKS made it cluster admin as the creator.")
        return None
    return ci.deploy_role.arn


def ci_runner(
    cfg: StackConfig,
    account: Account,
    ci: GitHubCiAccess | None,
    network: PrivateNetwork[pulumi.Input[str]] | None,
) -> CiRunner | None:
    """With `ci.runner: codebuild`, the project that runs the deploy's `pulumi up` inside the stack's
    VPC as the deploy role, started by the deploy job."""
    if ci is None or cfg.ci.runner != "codebuild" or network is None:
        return None
    return CiRunner(
        "ci-runner",
        CiRunnerArgs(
            project_name=ci_runner_project_name(cfg.stack),
            repository=cfg.ci.github_repository,
            stack=cfg.stack,
            deploy_role_arn=ci.deploy_role.arn,
            network=network,
        ),
        account.opts,
    )


def ci_outputs(ci: GitHubCiAccess | None, runner: CiRunner | None = None) -> StackOutputs:
    """The values to put in the repository's variables (see docs/ci.md)."""
    if ci is None:
        return {}
    found: StackOutputs = {
        "ciOidcProviderArn": ci.provider_arn,
        "ciPreviewRoleArn": ci.preview_role.arn,
        "ciDeployRoleArn": ci.deploy_role.arn,
    }
    if runner is not None:
        found["ciRunnerProject"] = runner.project_name
    return found
