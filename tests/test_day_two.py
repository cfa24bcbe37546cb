"""Later runs of a stack, by anyone: nothing changes that the config did not change."""

from __future__ import annotations

from conftest import stack_values

from offline.engine import run_program
from stacks.account import creator_parameter

ACCOUNT = "123456789012"
ALICE = f"arn:aws:iam::{ACCOUNT}:user/alice"  # bootstraps the stack from a laptop
BOB = f"arn:aws:iam::{ACCOUNT}:role/bob"  # a teammate listed in adminPrincipals
PLATFORM = f"arn:aws:iam::{ACCOUNT}:role/PlatformAdmin"
DEPLOY_SESSION = f"arn:aws:sts::{ACCOUNT}:assumed-role/trainstack-dev-github-deploy/GitHubActions"
CAROL_SESSION = f"arn:aws:sts::{ACCOUNT}:assumed-role/PlatformAdmin/carol"
ENTRY = "aws:eks/accessEntry:AccessEntry"


def run(caller: str, admins=(BOB, PLATFORM), facts=None):
    values = stack_values(
        "dev", ci={"githubRepository": "acme/train"}, cluster={"adminPrincipals": list(admins)}
    )
    return run_program("dev", values, caller_arn=caller, facts=facts)


def entries(plan) -> dict[str, str]:
    return {r.name: r.inputs["principalArn"] for r in plan.by_type(ENTRY)}


def test_access_entries_stay_the_same_whoever_runs_up_after_the_bootstrap():
    first = run(ALICE)
    recorded = first.one("aws:ssm/parameter:Parameter").inputs
    assert recorded["name"] == creator_parameter("dev") and recorded["insecureValue"] == ALICE
    # What the account holds after the first run: the parameter, and EKS's entry for alice.
    after = {f"parameter:{recorded['name']}": ALICE, "cluster-creator": ALICE}
    before = entries(first)
    assert set(before.values()) == {BOB, PLATFORM, first.outputs["ciDeployRoleArn"]} | {
        first.outputs["ciPreviewRoleArn"]
    }
    cluster_entries = first.one("eks:index:Cluster").inputs["accessEntries"]
    for caller in (DEPLOY_SESSION, BOB, CAROL_SESSION):
        later = run(caller, facts=after)
        assert entries(later) == before, caller
        assert later.one("eks:index:Cluster").inputs["accessEntries"] == cluster_entries, caller
        assert later.one("aws:ssm/parameter:Parameter").inputs["insecureValue"] == ALICE


def test_removing_one_admin_touches_only_its_entry():
    before = entries(run(ALICE))
    after = entries(run(ALICE, admins=(PLATFORM,)))
    assert {k: v for k, v in before.items() if v != BOB} == after


def test_the_ci_deploy_role_that_created_the_cluster_gets_no_second_entry():
    deploy_role = f"arn:aws:iam::{ACCOUNT}:role/trainstack-dev-github-deploy"
    first = run(DEPLOY_SESSION, admins=())
    assert first.one("aws:ssm/parameter:Parameter").inputs["insecureValue"] == deploy_role
    facts = {f"parameter:{creator_parameter('dev')}": deploy_role, "cluster-creator": deploy_role}
    assert entries(run(ALICE, admins=(), facts=facts)) == entries(first)
    assert "ci-deploy" not in first.one("eks:index:Cluster").inputs["accessEntries"]
