"""CI config: which GitHub repository and environments may preview and deploy the stack."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from config.names import PROJECT
from config.schema import Reader, setting

_GITHUB_REPO = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}")
# GitHub allows 255 characters; the longest name used is `<environment>-preview`.
_GITHUB_ENVIRONMENT = re.compile(r"[A-Za-z0-9._-]{1,247}")
# A role, not a user or a session: a bucket policy's aws:PrincipalArn of a role session is the role's.
_ROLE = re.compile(r"arn:aws[-a-z]*:iam::[0-9]{12}:role/[A-Za-z0-9+=,.@_/-]{1,576}")
_OIDC_PROVIDER = re.compile(
    r"arn:aws[-a-z]*:iam::[0-9]{12}:oidc-provider/token\.actions\.githubusercontent\.com"
)
# S3 bucket names: 3-63 lowercase letters, digits, '.' and '-', starting and ending alphanumeric.
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
# A key ARN, not an alias: IAM matches a key operation's Resource against the key's ARN only.
_KMS_KEY = re.compile(r"arn:aws[-a-z]*:kms:[a-z0-9-]+:[0-9]{12}:key/[A-Za-z0-9-]+")


@dataclass(frozen=True)
class CiConfig:
    github_repository: str | None = setting(
        "githubRepository", "owner/repo whose GitHub Actions may preview and deploy this stack (OIDC).", None
    )
    github_owner_id: int | None = setting(
        "githubOwnerId", "Numeric owner id: also trust the immutable OIDC subject format.", None
    )
    github_repository_id: int | None = setting(
        "githubRepositoryId", "Numeric repository id (with githubOwnerId).", None
    )
    environment: str | None = setting(
        "environment",
        "GitHub environment that deploys this stack; previews run in `<environment>-preview`. "
        "Unset: the stack's name.",
        None,
    )
    account_mode: Literal["perEnvironment", "shared"] = setting(
        "accountMode",
        "perEnvironment: this environment has an AWS account of its own (the default, recommended); "
        "shared: another environment's stack deploys into the same account (the fence keeps them apart).",
        "perEnvironment",
    )
    break_glass_role_arn: str | None = setting(
        "breakGlassRoleArn",
        "The role a person uses for the bootstrap `up` and repairs: besides the stack's own roles, the "
        "only principal the bucket's policy lets in (required with githubRepository).",
        None,
    )
    runner: Literal["github", "codebuild"] = setting(
        "runner",
        "Where the deploy's `pulumi up` runs: github (on the GitHub-hosted runner: the API endpoint must "
        "admit it) or codebuild (a CodeBuild project the stack creates in its VPC, which reaches a private "
        "endpoint; the deploy job starts it as the deploy role; needs stateBucket and secretsKeyArn; set "
        "vars.CI_RUNNER_PROJECT_<STACK> to output ciRunnerProject).",
        "github",
    )
    oidc_provider_arn: str | None = setting(
        "oidcProviderArn", "The account's GitHub OIDC provider, when another stack created it.", None
    )
    secrets_key_arn: str | None = setting(
        "secretsKeyArn",
        "KMS key ARN of the stack's awskms secrets provider: the deploy and preview roles may decrypt it.",
        None,
    )
    state_bucket: str | None = setting(
        "stateBucket",
        "S3 bucket of a self-managed state backend: the deploy and preview roles reach this "
        "stack's state there and no other stack's.",
        None,
    )


def check_ci(ci: CiConfig, r: Reader) -> None:
    k = f"{PROJECT}:ci"
    if ci.github_repository is None:
        if ci.runner != "github":
            r.problem(
                f"{k}.runner",
                ci.runner,
                "CI access is off without githubRepository",
                f"set {k}.githubRepository",
            )
        for key, value in (
            ("githubOwnerId", ci.github_owner_id),
            ("githubRepositoryId", ci.github_repository_id),
            ("environment", ci.environment),
            ("breakGlassRoleArn", ci.break_glass_role_arn),
            ("oidcProviderArn", ci.oidc_provider_arn),
            ("secretsKeyArn", ci.secrets_key_arn),
            ("stateBucket", ci.state_bucket),
        ):
            if value is not None:
                r.problem(
                    f"{k}.{key}",
                    value,
                    "CI access is off without githubRepository",
                    f"set {k}.githubRepository",
                )
        return
    if not _GITHUB_REPO.fullmatch(ci.github_repository):
        r.problem(f"{k}.githubRepository", ci.github_repository, "not a GitHub repository", "owner/repo")
    if ci.runner == "codebuild" and (ci.state_bucket is None or ci.secrets_key_arn is None):
        r.problem(
            f"{k}.runner",
            ci.runner,
            "the in-VPC deploy runs as the deploy role alone, with no Pulumi Cloud token or passphrase",
            f"a self-managed S3 backend: set {k}.stateBucket and {k}.secretsKeyArn (docs/ci.md), or runner github",
        )
    if (ci.github_owner_id is None) != (ci.github_repository_id is None):
        r.problem(
            f"{k}.githubOwnerId" if ci.github_owner_id is None else f"{k}.githubRepositoryId",
            None,
            "the immutable subject format needs both numeric ids",
            "both githubOwnerId and githubRepositoryId, or neither",
        )
    for key, value in (
        ("githubOwnerId", ci.github_owner_id),
        ("githubRepositoryId", ci.github_repository_id),
    ):
        if value is not None and value < 1:
            r.problem(
                f"{k}.{key}", value, "not a GitHub id", "a positive integer (gh api repos/<owner>/<repo>)"
            )
    if ci.break_glass_role_arn is None or not _ROLE.fullmatch(ci.break_glass_role_arn):
        r.problem(
            f"{k}.breakGlassRoleArn",
            ci.break_glass_role_arn,
            "the bucket's policy lets in only the stack's roles and this one: name the role a person uses"
            if ci.break_glass_role_arn is None
            else "not an IAM role ARN",
            "arn:aws:iam::<account>:role/<path/><name>",
        )
    if ci.environment is not None and not _GITHUB_ENVIRONMENT.fullmatch(ci.environment):
        r.problem(
            f"{k}.environment", ci.environment, "not a GitHub environment name", "letters, digits, . _ -"
        )
    if ci.oidc_provider_arn is not None and not _OIDC_PROVIDER.fullmatch(ci.oidc_provider_arn):
        r.problem(
            f"{k}.oidcProviderArn",
            ci.oidc_provider_arn,
            "not the GitHub OIDC provider's ARN",
            "arn:aws:iam::<account>:oidc-provider/token.actions.githubusercontent.com",
        )
    if ci.secrets_key_arn is not None and not _KMS_KEY.fullmatch(ci.secrets_key_arn):
        r.problem(
            f"{k}.secretsKeyArn",
            ci.secrets_key_arn,
            "not a KMS key ARN (an alias ARN matches no key operation in IAM)",
            "arn:aws:kms:<region>:<account>:key/<key id> (aws kms describe-key --key-id alias/<name>)",
        )
    if ci.state_bucket is not None and not _BUCKET.fullmatch(ci.state_bucket):
        r.problem(
            f"{k}.stateBucket",
            ci.state_bucket,
            "not an S3 bucket name",
            "the bucket of `pulumi login s3://<bucket>` (3-63 lowercase letters, digits, '.', '-')",
        )
