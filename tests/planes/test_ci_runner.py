"""`ci.runner: codebuild`: the deploy's `pulumi up` runs inside the stack's VPC, in a CodeBuild project
the deploy job starts as the deploy role (components/ci_runner.py), so it reaches an API endpoint no
GitHub-hosted runner can (listed CIDRs or private); and no workflow but an approved deploy job can
start it: there is no webhook for a branch's or a fork's workflow to match."""

from __future__ import annotations

import json

import pytest
import yaml
from support.paths import ROOT
from support.plans import ci_config, plan

from components.ci_runner import deploy_buildspec
from config.schema import ConfigError

PROJECT = "aws:codebuild/project:Project"
SELF_MANAGED = {
    "stateBucket": "acme-pulumi-state",
    "secretsKeyArn": "arn:aws:kms:us-east-1:123456789012:key/1",
}
PROJECT_ARN = "arn:aws:codebuild:us-east-1:123456789012:project/trainstack-dev-github-runner"


@pytest.fixture(scope="module")
def runner_plan():
    return plan("dev", ci=ci_config(runner="codebuild", **SELF_MANAGED))


def test_the_deploy_builds_in_the_private_subnets_and_reaches_the_api(runner_plan):
    project = runner_plan.one(PROJECT, "ci-runner-project").inputs
    assert project["name"] == runner_plan.outputs["ciRunnerProject"] == "trainstack-dev-github-runner"
    assert project["source"]["location"] == "https://github.com/acme/train.git"
    assert project["vpcConfig"]["subnets"] == ["vpc-private-a-id", "vpc-private-b-id"]
    assert project["vpcConfig"]["securityGroupIds"] == ["ci-runner-sg-id"]
    assert project["concurrentBuildLimit"] == 1
    rule = runner_plan.one(
        "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule", "ci-runner-api"
    ).inputs
    assert (rule["fromPort"], rule["toPort"], rule["ipProtocol"]) == (443, 443, "tcp")
    assert rule["referencedSecurityGroupId"] == "ci-runner-sg-id"
    assert rule["securityGroupId"] == "sg-0e4c5a1b2c3d4e5f6"  # EKS's cluster group: the API answers there


def test_no_workflow_but_the_approved_deploy_job_can_start_it(runner_plan):
    """Before: a webhook on WORKFLOW_JOB_QUEUED filtered by the workflow's `name: deploy`, which a
    branch's or a fork's workflow sets as it likes, ran that workflow's job in the VPC. Now there is
    no webhook; the build runs as the deploy role, which CodeBuild may assume for this project only,
    and which GitHub gives only the deploy workflow of main in its protected environment."""
    assert runner_plan.by_type("aws:codebuild/webhook:Webhook") == []
    project = runner_plan.one(PROJECT, "ci-runner-project").inputs
    deploy = runner_plan.one("aws:iam/role:Role", "github-actions-deploy").inputs
    assert (
        project["serviceRole"] == "arn:aws:iam::123456789012:role/trainstack/dev/trainstack-dev-github-deploy"
    )
    trust = json.loads(deploy["assumeRolePolicy"])["Statement"]
    (github,) = [s for s in trust if "Federated" in s["Principal"]]
    assert github["Condition"]["StringEquals"]["token.actions.githubusercontent.com:sub"] == [
        "repo:acme/train:environment:dev:job_workflow_ref:acme/train/.github/workflows/deploy.yml@refs/heads/main"
    ]
    (codebuild,) = [s for s in trust if s["Principal"] == {"Service": "codebuild.amazonaws.com"}]
    assert codebuild["Condition"] == {
        "StringEquals": {"aws:SourceArn": PROJECT_ARN, "aws:SourceAccount": "123456789012"}
    }
    # The preview role is not the build's and stays GitHub's alone.
    preview = json.loads(
        runner_plan.one("aws:iam/role:Role", "github-actions-preview").inputs["assumeRolePolicy"]
    )
    assert all("Federated" in s["Principal"] for s in preview["Statement"])
    # Without the runner, the deploy role trusts GitHub alone.
    plain = plan("dev", ci=ci_config(**SELF_MANAGED)).one("aws:iam/role:Role", "github-actions-deploy").inputs
    assert all("Federated" in s["Principal"] for s in json.loads(plain["assumeRolePolicy"])["Statement"])


def test_the_build_runs_the_stacks_commands_on_pinned_inputs():
    spec = yaml.safe_load(deploy_buildspec("dev"))
    install = spec["phases"]["install"]["commands"]
    assert (
        ".venv/bin/python -m pip install --require-hashes --only-binary :all: -r requirements.lock" in install
    )
    assert "sha256sum -c -" in install[-1] and "pulumi-$v-checksums.txt" in install[-1]
    assert (
        spec["phases"]["build"]["commands"][-1]
        == "pulumi up --yes --non-interactive --skip-preview --stack dev"
    )


def test_the_deploy_job_starts_the_build_from_a_github_hosted_runner():
    deploy = yaml.safe_load((ROOT / ".github" / "workflows" / "deploy.yml").read_text())
    for job, env in (("up-dev", "DEV"), ("up-prod", "PROD")):
        steps = deploy["jobs"][job]["steps"]
        assert deploy["jobs"][job]["runs-on"] == "ubuntu-24.04"
        names = [s.get("name") or s.get("uses", "") for s in steps]
        in_vpc = next(s for s in steps if s.get("run") == ".venv/bin/python .github/in_vpc_up.py")
        assert in_vpc["if"] == f"vars.CI_RUNNER_PROJECT_{env} != ''"
        # After the checks and the role: main's head, by an approved job.
        assert names.index(in_vpc["name"]) > names.index(
            "The commit is main's head (a re-run of an older deploy deploys nothing)"
        )
        action = next(s for s in steps if s.get("uses", "").startswith("pulumi/actions@"))
        assert action["if"] == f"vars.CI_RUNNER_PROJECT_{env} == ''"


def test_no_runner_unless_asked_never_without_ci_and_only_on_a_self_managed_backend():
    run = plan("dev", ci=ci_config(**SELF_MANAGED))
    assert [p.name for p in run.by_type(PROJECT)] == ["image-project"]
    assert "ciRunnerProject" not in run.outputs
    with pytest.raises(ConfigError, match=r"trainstack:ci\.runner = \"codebuild\": CI access is off"):
        plan("dev", ci={"runner": "codebuild"})
    with pytest.raises(ConfigError) as err:
        plan("dev", ci=ci_config(runner="codebuild"))
    assert (
        'trainstack:ci.runner = "codebuild": the in-VPC deploy runs as the deploy role alone, with no Pulumi '
        "Cloud token or passphrase; allowed: a self-managed S3 backend: set trainstack:ci.stateBucket and "
        "trainstack:ci.secretsKeyArn (docs/ci.md), or runner github"
    ) in str(err.value)
