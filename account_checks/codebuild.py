"""The CodeBuild GitHub source credential the image build's and the CI runner's webhooks need. Pulumi has no data
source for it; boto3 reads it with the stack's region and profile."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from account_checks.report import Check, aws_error
from config import PROJECT, StackConfig


def source_credential_check(cfg: StackConfig, session: Callable[[], Any]) -> Check:
    """CodeBuild webhooks on a GitHub repository need the account's GitHub credential for CodeBuild
    in the region; it is account-wide, so the stack checks for it rather than owning it."""
    key, value = (
        ("image.sourceRepository", cfg.image.source_repository)
        if cfg.image.source_repository
        else ("ci.runner", cfg.ci.runner)
    )
    repository = cfg.image.source_repository or cfg.ci.github_repository
    fix = (
        "import a GitHub token once per account and region: aws codebuild import-source-credentials "
        f"--server-type GITHUB --auth-type PERSONAL_ACCESS_TOKEN --token <token> --region {cfg.region}"
    )
    name, needs = (
        "CodeBuild GitHub credential",
        f"a GitHub source credential (webhooks of {repository})",
    )
    try:
        infos = session().client("codebuild").list_source_credentials()["sourceCredentialsInfos"]
    except Exception as err:
        return Check(
            name,
            needs,
            "not readable",
            f"{PROJECT}:{key}: could not list CodeBuild source credentials ({aws_error(err)}); {fix}",
        )
    github = [i for i in infos if i.get("serverType") == "GITHUB"]
    if github:
        return Check(name, needs, ", ".join(i.get("authType", "?") for i in github))
    return Check(
        name,
        needs,
        "none",
        f"{PROJECT}:{key} = {value}: CodeBuild has no GitHub "
        f"credential in {cfg.region}, so creating the webhook fails (ResourceNotFoundException: "
        f"Could not find access token); {fix}",
    )
