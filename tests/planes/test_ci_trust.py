"""Whom the CI roles trust: GitHub's OIDC token whose subject carries the environment and the
workflow file at its ref (`job_workflow_ref`, through the repository's subject customization). A
branch that names the `dev` environment in a workflow of its own (GitHub creates a missing
environment with no rules) gets no role; only deploy.yml on main gets the deploy role."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from support.iam_eval import trusts
from support.paths import ROOT
from support.plans import ci_config, plan

from components.ci_access import SUBJECT_CLAIMS

HOST = "token.actions.githubusercontent.com"
PROVIDER = f"arn:aws:iam::123456789012:oidc-provider/{HOST}"


def github_roles(run) -> dict[str, dict]:
    return {
        r.name.removeprefix("github-actions-"): json.loads(r.inputs["assumeRolePolicy"])
        for r in run.by_type("aws:iam/role:Role")
        if r.name.startswith("github-actions-")
    }


def subject(environment: str, workflow: str, ref: str, repo: str = "acme/train") -> str:
    """The customized subject (SUBJECT_CLAIMS) of a job in `environment`."""
    return f"repo:{repo}:environment:{environment}:job_workflow_ref:{repo}/.github/workflows/{workflow}@{ref}"


def token(sub: str) -> dict:
    return {f"{HOST}:aud": "sts.amazonaws.com", f"{HOST}:sub": sub}


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_only_deploy_yml_on_main_gets_the_deploy_role_and_previews_need_their_environment(stack):
    trust = github_roles(plan(stack, ci=ci_config()))
    assert set(trust) == {"preview", "deploy"}
    deploy, preview = trust["deploy"], trust["preview"]
    (statement,) = deploy["Statement"]
    assert statement["Principal"] == {"Federated": PROVIDER}
    assert statement["Condition"]["StringEquals"][f"{HOST}:sub"] == [
        subject(stack, "deploy.yml", "refs/heads/main")
    ]
    assert trusts(deploy, token(subject(stack, "deploy.yml", "refs/heads/main")))
    assert trusts(preview, token(subject(f"{stack}-preview", "preview.yml", "refs/pull/42/merge")))
    other = "prod" if stack == "dev" else "dev"
    for sub in [
        # a branch's own workflow naming the deploy environment, or deploy.yml on a branch
        subject(stack, "evil.yml", "refs/heads/feature"),
        subject(stack, "deploy.yml", "refs/heads/feature"),
        subject(stack, "preview.yml", "refs/pull/42/merge"),
        subject(stack, "deploy.yml", "refs/heads/main", repo="acme/fork"),
        subject(other, "deploy.yml", "refs/heads/main"),
        f"repo:acme/train:environment:{stack}",  # the default subject, without the workflow
        "repo:acme/train:ref:refs/heads/main",
        "repo:acme/train:pull_request",
    ]:
        assert not trusts(deploy, token(sub)), sub
        assert not trusts(preview, token(sub)), sub
    for sub in [
        subject(f"{stack}-preview", "evil.yml", "refs/pull/42/merge"),
        subject(f"{stack}-preview", "preview.yml", "refs/heads/feature"),
        subject(f"{other}-preview", "preview.yml", "refs/pull/42/merge"),
    ]:
        assert not trusts(preview, token(sub)), sub
    assert not trusts(deploy, {f"{HOST}:sub": subject(stack, "deploy.yml", "refs/heads/main")})  # no aud


def test_both_subject_formats_and_an_explicit_environment():
    run = plan(
        "prod",
        ci=ci_config(
            environment="live", githubOwnerId=1234, githubRepositoryId=5678, oidcProviderArn=PROVIDER
        ),
    )
    assert run.by_type("aws:iam/openIdConnectProvider:OpenIdConnectProvider") == []  # another stack's
    trust = github_roles(run)
    (statement,) = trust["deploy"]["Statement"]
    assert statement["Condition"]["StringEquals"][f"{HOST}:sub"] == [
        subject("live", "deploy.yml", "refs/heads/main"),
        subject("live", "deploy.yml", "refs/heads/main").replace(
            "repo:acme/train:", "repo:acme@1234/train@5678:"
        ),
    ]
    (statement,) = trust["preview"]["Statement"]
    assert statement["Condition"]["StringLike"][f"{HOST}:sub"][0] == subject(
        "live-preview", "preview.yml", "refs/pull/*/merge"
    )
    assert not trusts(trust["deploy"], token(subject("prod", "deploy.yml", "refs/heads/main")))


def test_the_outputs_name_the_two_roles_in_the_path():
    outputs = plan("dev", ci=ci_config()).outputs
    assert (
        outputs["ciDeployRoleArn"]
        == "arn:aws:iam::123456789012:role/trainstack/dev/trainstack-dev-github-deploy"
    )
    assert (
        outputs["ciPreviewRoleArn"]
        == "arn:aws:iam::123456789012:role/trainstack/dev/trainstack-dev-github-preview"
    )


# --- the workflows' subject check -------------------------------------------------------------


def run_check(
    answer: dict,
    script: str = "oidc_subject_check.py",
    asked: str = "/repos/acme/train/actions/oidc/customization/sub",
    **env,
) -> subprocess.CompletedProcess:
    """A workflow check in .github against a stand-in for GitHub's API answering `answer`."""
    seen: list[str] = []

    class Api(BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append(f"{self.path} {self.headers['Authorization']}")
            body = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Api)
    threading.Thread(target=server.handle_request, daemon=True).start()
    env = {
        "GITHUB_API_URL": f"http://127.0.0.1:{server.server_port}",
        "GITHUB_REPOSITORY": "acme/train",
        "GH_TOKEN": "t0ken",
        **env,
    }
    proc = subprocess.run(
        [sys.executable, str(ROOT / ".github" / script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    server.server_close()
    assert seen == [f"{asked} Bearer t0ken"]
    return proc


def test_the_subject_check_passes_only_the_customization_the_roles_trust():
    assert run_check({"use_default": False, "include_claim_keys": SUBJECT_CLAIMS}).returncode == 0
    for answer in (
        {"use_default": True},
        {"use_default": False, "include_claim_keys": ["repo", "context"]},
    ):
        proc = run_check(answer)
        assert proc.returncode == 1
        assert "::error::the repository's OIDC subject claims are" in proc.stdout
        assert "docs/ci.md" in proc.stdout


def test_a_deploy_of_anything_but_mains_head_stops_before_it_takes_a_role():
    """Re-running an older deploy run presents the same OIDC claims (the trust names the ref, not the
    commit): the job compares the commit it deploys with main's head and stops."""
    head = "a" * 40

    def check(deployed: str) -> subprocess.CompletedProcess:
        return run_check(
            {"sha": head}, "main_head_check.py", "/repos/acme/train/commits/main", GITHUB_SHA=deployed
        )

    assert check(head).returncode == 0
    old = check("b" * 40)
    assert old.returncode == 1
    assert old.stdout.startswith(
        "::error::this run deploys bbbbbbbbbbbb, and main is at aaaaaaaaaaaa: a re-run of an older deploy "
        "would roll the stack back without review"
    )


def test_a_job_in_an_environment_without_reviewers_stops_before_it_takes_a_role():
    """GitHub creates an environment a job names and nobody set up, unprotected: the preview would take
    the role that decrypts the stack's secrets with nobody's approval. The check reads the environment's
    protection rules first."""

    def check(rules: list) -> subprocess.CompletedProcess:
        asked = "/repos/acme/train/environments/prod-preview"
        answer = {"name": "prod-preview", "protection_rules": rules}
        return run_check(answer, "environment_check.py", asked, ENVIRONMENT="prod-preview")

    reviewed = [
        {"type": "required_reviewers", "reviewers": [{"type": "Team", "reviewer": {"slug": "ml-platform"}}]}
    ]
    assert check(reviewed).returncode == 0
    for rules in (
        [],
        [{"type": "wait_timer", "wait_timer": 5}],
        [{"type": "required_reviewers", "reviewers": []}],
    ):
        proc = check(rules)
        assert proc.returncode == 1, rules
        assert proc.stdout.startswith(
            "::error::the environment prod-preview requires no reviewer, so this job ran with nobody's approval"
        )
