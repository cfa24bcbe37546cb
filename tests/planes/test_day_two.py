"""Later runs of a stack, by anyone: nothing changes that the config did not change."""

from __future__ import annotations

import datetime

import pytest
from support.plans import ci_config, stack_values

from account_checks import AccountCheckError
from config import parse_config
from config.cluster import EKS_ADDON_VERSIONS
from domain.names import creator_parameter
from offline.cost import hourly_cost
from offline.engine import run_program

ACCOUNT = "123456789012"
ALICE = f"arn:aws:iam::{ACCOUNT}:user/alice"  # bootstraps the stack from a laptop
BOB = f"arn:aws:iam::{ACCOUNT}:role/bob"  # a teammate listed in adminPrincipals
PLATFORM = f"arn:aws:iam::{ACCOUNT}:role/PlatformAdmin"
DEPLOY_SESSION = f"arn:aws:sts::{ACCOUNT}:assumed-role/trainstack-dev-github-deploy/GitHubActions"
CAROL_SESSION = f"arn:aws:sts::{ACCOUNT}:assumed-role/PlatformAdmin/carol"
ENTRY = "aws:eks/accessEntry:AccessEntry"


def run(caller: str, admins=(BOB, PLATFORM), facts=None):
    values = stack_values("dev", ci=ci_config(), cluster={"adminPrincipals": list(admins)})
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


def versions_plan(version: str, running: str | None):
    cluster = {
        "version": running,
        "zones": ["us-east-1a", "us-east-1b"],
        "nodeGroups": {"trainstack-dev-gpu": "us-east-1a"},
    }
    facts = {"eks-cluster:trainstack-dev": cluster} if running else None
    return run_program("dev", stack_values("dev", cluster={"kubernetesVersion": version}), facts=facts)


def test_an_upgrade_moves_one_minor_version_and_changes_versions_in_place():
    with pytest.raises(AccountCheckError) as err:
        versions_plan("1.36", "1.33")
    assert (
        "trainstack:cluster.kubernetesVersion = 1.36: cluster trainstack-dev runs 1.33; EKS upgrades one "
        "minor version at a time; allowed: 1.33 or 1.34 (set 1.34, pulumi up, then the next)"
    ) in str(err.value)
    with pytest.raises(AccountCheckError, match=r"EKS cannot downgrade; allowed: 1\.36"):
        versions_plan("1.35", "1.36")
    before, after = versions_plan("1.35", "1.35"), versions_plan("1.36", "1.35")
    # The same resources, the versions changed on them: an update, not a replacement.
    assert sorted(r.urn for r in before.resources) == sorted(r.urn for r in after.resources)
    cluster = after.one("eks:index:Cluster")
    assert cluster.inputs["version"] == "1.36"
    assert cluster.inputs["kubeProxyAddonOptions"]["version"] == EKS_ADDON_VERSIONS["1.36"]["kube-proxy"]
    for addon in after.by_type("aws:eks/addon:Addon"):
        if addon.parent == cluster.urn:
            continue
        # Pinned add-ons move with the version; unpinned ones (EKS's default) have no version to move.
        assert addon.inputs.get("addonVersion") == EKS_ADDON_VERSIONS["1.36"].get(addon.inputs["addonName"])
        assert cluster.urn in addon.dependencies  # after the control plane
    for group in after.by_type("eks:index:ManagedNodeGroup"):
        assert cluster.urn in group.dependencies


def test_the_plan_prices_the_control_plane_by_its_support():
    today = datetime.date(2026, 11, 23)
    old = parse_config("dev", stack_values("dev", cluster={"kubernetesVersion": "1.33"}))
    new = parse_config("dev", stack_values("dev"))
    (old_line,) = [c for c in hourly_cost(old, today) if c.item.startswith("EKS control plane")]
    (new_line,) = [c for c in hourly_cost(new, today) if c.item.startswith("EKS control plane")]
    assert (old_line.item, old_line.unit_usd) == (
        "EKS control plane 1.33, extended support until 2027-07-29 (standard ended 2026-07-29)",
        0.60,
    )
    assert (new_line.item, new_line.unit_usd) == (
        "EKS control plane 1.36, standard support until 2027-08-02",
        0.10,
    )


def test_the_stack_owns_the_control_plane_log_group_with_retention():
    run = run_program("dev", stack_values("dev", cluster={"controlPlaneLogRetentionDays": 90}))
    logs = run.one("aws:cloudwatch/logGroup:LogGroup", "eks-control-plane-logs")
    assert logs.inputs["name"] == "/aws/eks/trainstack-dev/cluster"
    assert logs.inputs["retentionInDays"] == 90
    assert logs.urn in run.one("eks:index:Cluster").dependencies  # before EKS would create it
    # A later run finds its own group; a cluster from before finds the one EKS made, and is told
    # how to adopt it instead of failing with ResourceAlreadyExistsException.
    ours = {"log-group:/aws/eks/trainstack-dev/cluster": {"trainstack:stack": "dev"}}
    assert run_program("dev", stack_values("dev"), facts=ours).one(
        "aws:cloudwatch/logGroup:LogGroup", logs.name
    )
    eks_made = {"log-group:/aws/eks/trainstack-dev/cluster": {}}
    with pytest.raises(AccountCheckError) as err:
        run_program("dev", stack_values("dev"), facts=eks_made)
    assert (
        "/aws/eks/trainstack-dev/cluster exists, created by EKS before the stack owned it; adopt it once: "
        "pulumi import aws:cloudwatch/logGroup:LogGroup eks-control-plane-logs /aws/eks/trainstack-dev/cluster "
        "--parent eks=urn:pulumi:dev::trainstack::trainstack:compute:Cluster::eks"
    ) in str(err.value)
    no_logs = run_program("dev", stack_values("dev", cluster={"controlPlaneLogs": []}))
    assert not [r for r in no_logs.by_type("aws:cloudwatch/logGroup:LogGroup") if r.name == logs.name]


def test_azs_stay_when_ec2_offerings_change_between_runs():
    first = run_program("dev", stack_values("dev"))

    def layout(plan):
        subnets = {
            r.name: (r.inputs["availabilityZone"], r.inputs["cidrBlock"])
            for r in plan.by_type("aws:ec2/subnet:Subnet")
        }
        group = plan.one("eks:index:ManagedNodeGroup", "gpu-gpu").inputs["subnetIds"]
        return subnets, group

    assert {z for z, _ in layout(first)[0].values()} == {"us-east-1a", "us-east-1b"}
    running = {
        "eks-cluster:trainstack-dev": {
            "version": "1.36",
            "zones": ["us-east-1a", "us-east-1b"],
            "nodeGroups": {"trainstack-dev-gpu": "us-east-1a"},
        },
        # Since the first run EC2 stopped offering both types in us-east-1a.
        "offering:g6.xlarge": "us-east-1b,us-east-1c",
        "offering:m6i.large": "us-east-1b,us-east-1c,us-east-1d",
    }
    assert layout(run_program("dev", stack_values("dev"), facts=running)) == layout(first)
    # A new group whose type only other AZs offer would add an AZ to the cluster: refused.
    groups = [{"name": "gpu", "instanceType": "g6.xlarge"}, {"name": "p5", "instanceType": "p5.48xlarge"}]
    with pytest.raises(AccountCheckError) as err:
        run_program("dev", stack_values("dev", gpuNodeGroups=groups, jobs=[]), facts=running)
    assert (
        "trainstack:gpuNodeGroups[1] (p5) would add us-east-1c to the VPC of the running cluster trainstack-dev, "
        "and EKS keeps a cluster's subnets; allowed: availabilityZone one of us-east-1a, us-east-1b that "
        "offers p5.48xlarge"
    ) in str(err.value)
    # Moving a group is deliberate: set its availabilityZone (its nodes are replaced).
    moved = stack_values(
        "dev", gpuNodeGroups=[{"name": "gpu", "instanceType": "g6.xlarge", "availabilityZone": "us-east-1b"}]
    )
    subnets, group = layout(run_program("dev", moved, facts=running))
    assert subnets == layout(first)[0] and group != layout(first)[1]


def test_raising_min_nodes_above_the_groups_size_now_stops_before_anything_changes():
    """The autoscaler owns the desired size (the stack ignores it), and EKS refuses a minimum above
    it: the run stops at the account checks with the command that raises both."""
    running = {
        "eks-cluster:trainstack-dev": {
            "version": "1.36",
            "zones": ["us-east-1a", "us-east-1b"],
            "nodeGroups": {"trainstack-dev-gpu": "us-east-1a:0"},
        }
    }
    groups = [{"name": "gpu", "instanceType": "g6.xlarge", "nodeCount": 2, "minNodes": 1}]
    with pytest.raises(AccountCheckError) as err:
        run_program("dev", stack_values("dev", gpuNodeGroups=groups), facts=running)
    assert (
        "trainstack:gpuNodeGroups[0].minNodes = 1: node group trainstack-dev-gpu has 0 node(s) now and EKS "
        "refuses a minimum above its desired size, which the autoscaler owns; allowed: at most 0, or raise both "
        "first: aws eks update-nodegroup-config --cluster-name trainstack-dev --nodegroup-name trainstack-dev-gpu "
        "--scaling-config minSize=1,desiredSize=1,maxSize=2"
    ) in str(err.value)
    # With a node running (a job on it), the same floor applies in place.
    running["eks-cluster:trainstack-dev"]["nodeGroups"]["trainstack-dev-gpu"] = "us-east-1a:1"
    run_program("dev", stack_values("dev", gpuNodeGroups=groups), facts=running)


def test_a_second_run_with_unchanged_config_registers_the_same_inputs():
    """Everything derived (ASG names and their tags, queue quotas, flavors, jobs) is a function of
    the config and the account's answers: unchanged config, unchanged inputs, no diff."""
    running = {
        "eks-cluster:trainstack-prod": {
            "version": "1.36",
            "zones": ["us-east-1a", "us-east-1b", "us-east-1c"],
            "nodeGroups": {"trainstack-prod-p5": "us-east-1c:2"},
        }
    }
    first = run_program("prod", stack_values("prod"))
    second = run_program("prod", stack_values("prod"), facts=running)
    inputs = lambda run: {r.urn: r.inputs for r in run.resources}  # noqa: E731
    assert inputs(second) == inputs(first)
