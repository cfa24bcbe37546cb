"""CI plane: the GitHub Actions OIDC roles and the stack's permissions boundary (when
`ci.githubRepository` is set) and the values to put in the repository's variables."""

from __future__ import annotations

import pulumi

from components.ci_access import GitHubCiAccess, GitHubCiAccessArgs
from config import PROJECT, StackConfig
from domain.names import eks_cluster_name
from domain.principals import same_principal
from planes.account import Account
from stack_outputs import StackOutputs


def ci_access(cfg: StackConfig, account: Account) -> GitHubCiAccess | None:
    ci = cfg.ci
    if ci.github_repository is None:
        return None
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
            cluster_name=eks_cluster_name(cfg.stack),
        ),
        account.account_id,
        account.opts,
    )


def ci_deploy_entry(ci: GitHubCiAccess | None, account: Account, creator: str) -> pulumi.Output[str] | None:
    """The deploy role's cluster-admin entry, unless the deploy role created the cluster: EKS
    made the creator an admin itself, and a second entry for it fails. Whoever runs this
    `pulumi up` does not matter: the entries stay the same for every caller."""
    if ci is None:
        return None
    deploy_arn = f"arn:aws:iam::{account.account_id}:role/{ci.deploy_role_name}"
    if same_principal(creator, deploy_arn):
        pulumi.log.info(f"{deploy_arn} created the cluster; EKS made it cluster admin as the creator.")
        return None
    return ci.deploy_role.arn


def ci_outputs(ci: GitHubCiAccess | None) -> StackOutputs:
    """The values to put in the repository's variables (see docs/ci.md)."""
    if ci is None:
        return {}
    return {
        "ciOidcProviderArn": ci.provider_arn,
        "ciPreviewRoleArn": ci.preview_role.arn,
        "ciDeployRoleArn": ci.deploy_role.arn,
    }
