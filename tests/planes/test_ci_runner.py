"""`ci.runner: codebuild`: a CodeBuild-hosted GitHub Actions runner inside the stack's VPC, so the
deploy workflow reaches an API endpoint no GitHub-hosted runner can (listed CIDRs or private)."""

from __future__ import annotations

import json

import pytest
import yaml
from support.paths import ROOT
from support.plans import ci_config, plan

from config.schema import ConfigError
from planes.ci import DEPLOY_WORKFLOW_NAME

PROJECT = "aws:codebuild/project:Project"


@pytest.fixture(scope="module")
def runner_plan():
    return plan("dev", ci=ci_config(runner="codebuild"))


def test_the_runner_builds_in_the_private_subnets_and_reaches_the_api(runner_plan):
    project = runner_plan.one(PROJECT, "ci-runner-project").inputs
    assert project["name"] == runner_plan.outputs["ciRunnerProject"] == "trainstack-dev-github-runner"
    assert project["source"] == {"type": "GITHUB", "location": "https://github.com/acme/train.git"}
    assert project["vpcConfig"]["subnets"] == ["vpc-private-a-id", "vpc-private-b-id"]
    assert project["vpcConfig"]["securityGroupIds"] == ["ci-runner-sg-id"]
    rule = runner_plan.one(
        "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule", "ci-runner-api"
    ).inputs
    assert (rule["fromPort"], rule["toPort"], rule["ipProtocol"]) == (443, 443, "tcp")
    assert rule["referencedSecurityGroupId"] == "ci-runner-sg-id"
    assert rule["securityGroupId"] == "sg-0e4c5a1b2c3d4e5f6"  # EKS's cluster group: the API answers there
    webhook = runner_plan.one("aws:codebuild/webhook:Webhook", "ci-runner-webhook").inputs
    assert webhook["filterGroups"] == [
        {
            "filters": [
                {"type": "EVENT", "pattern": "WORKFLOW_JOB_QUEUED"},
                {"type": "WORKFLOW_NAME", "pattern": f"^{DEPLOY_WORKFLOW_NAME}$"},
            ]
        }
    ]


def test_the_runners_own_role_writes_logs_and_attaches_to_the_vpc_only(runner_plan):
    """Any job that lands on the runner holds its role: nothing beyond the build's own needs."""
    role = runner_plan.one("aws:iam/role:Role", "ci-runner-role").inputs
    assert role["path"] == "/trainstack/dev/" and role["permissionsBoundary"].endswith(
        "trainstack-dev-boundary"
    )
    policy = json.loads(runner_plan.one("aws:iam/rolePolicy:RolePolicy", "ci-runner-policy").inputs["policy"])
    actions = {
        a
        for s in policy["Statement"]
        for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    }
    assert {a.split(":")[0] for a in actions} == {"logs", "ec2"}
    assert not [a for a in actions if "*" in a]


def test_the_workflow_names_the_runner_by_its_project():
    deploy = yaml.safe_load((ROOT / ".github" / "workflows" / "deploy.yml").read_text())
    assert deploy["name"] == DEPLOY_WORKFLOW_NAME  # what the webhook's WORKFLOW_NAME filter matches
    assert (
        "vars.CI_RUNNER_PROJECT_DEV, github.run_id, github.run_attempt" in deploy["jobs"]["up-dev"]["runs-on"]
    )


def test_no_runner_unless_asked_and_never_without_ci():
    run = plan("dev", ci=ci_config())
    assert [p.name for p in run.by_type(PROJECT)] == ["image-project"]
    assert "ciRunnerProject" not in run.outputs
    with pytest.raises(ConfigError, match=r"trainstack:ci\.runner = \"codebuild\": CI access is off"):
        plan("dev", ci={"runner": "codebuild"})
