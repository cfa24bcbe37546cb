"""Account checks: a first `pulumi up` stops before it creates anything, with a sentence, when the
account's quotas, AZs, reservations or CodeBuild credential (or the machine's aws CLI) will not do.
The offline account answers as AWS does; facts change its answers."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import yaml
from support.plans import ci_config, plan, stack_values

from account_checks import AccountCheckError, aws_cli
from account_checks.account_mode import other_stacks
from domain.names import fit
from offline import plan as offline_plan
from offline.engine import run_program
from offline.engine.cluster_answers import OfflineCluster
from offline.engine.world import offline_world
from offline.simulated_account import FactError, OfflineAccount, parse_facts

P5_GROUP = {"name": "p5", "instanceType": "p5.48xlarge", "nodeCount": 2, "efa": True}


def run_plan(tmp_path, capsys, stack="dev", facts=(), **overrides):
    """The offline plan as a user runs it: exit code, stdout, stderr."""
    values = stack_values(stack if stack in ("dev", "prod") else "dev", **overrides)
    config = {k: yaml.safe_load(v) if k.startswith("trainstack:") else v for k, v in values.items()}
    stack_file = tmp_path / f"Pulumi.{stack}.yaml"
    stack_file.write_text(yaml.safe_dump({"config": config}))
    argv = ["--stack", stack, "--stack-file", str(stack_file), "--out", str(tmp_path / "plan")]
    for fact in facts:
        argv += ["--account-fact", fact]
    code = offline_plan.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_the_plan_prints_what_each_check_needs_and_what_the_account_answered(tmp_path, capsys):
    code, out, _ = run_plan(tmp_path, capsys, "prod")
    assert code == 0
    section = out[out.index("Account checks") :].split("\n\n")[0].splitlines()
    assert section[0] == "Account checks (us-east-1, account 123456789012):"
    rows = {line.split(":")[0].split(None, 1)[1]: line for line in section[1:]}
    assert rows["quota L-417A185B (Running On-Demand P instances)"].endswith(
        "needs 384 vCPUs (p5: 2 x p5.48xlarge at 192 vCPUs); found 1024 vCPUs"
    )
    assert (
        "needs 8 vCPUs (system: 4 x m6i.large at 2 vCPUs)"
        in rows["quota L-1216C47A (Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances)"]
    )
    assert "us-east-1e" not in rows["availability zones"]  # use1-az3
    assert all(line.lstrip().startswith("ok") for line in section[1:])


def test_short_gpu_quota_stops_the_plan_with_the_quota_and_the_request(tmp_path, capsys):
    code, out, err = run_plan(tmp_path, capsys, "dev", facts=["quota:L-DB2E81BA=0"])
    assert code == 2
    assert out == ""
    assert err.startswith(
        "error: stack 'dev': the AWS account or this machine is not ready; nothing was created:"
    )
    assert (
        "EC2 quota L-DB2E81BA (Running On-Demand G and VT instances) in us-east-1 is 0 vCPUs; the stack "
        "needs 4 (gpu: 1 x g6.xlarge at 4 vCPUs). Ask for more (P and G requests can take days): "
        "aws service-quotas request-service-quota-increase --service-code ec2 --quota-code L-DB2E81BA "
        "--desired-value 4 --region us-east-1"
    ) in err


def test_every_short_quota_is_named_at_once_and_spot_groups_use_spot_quotas():
    groups = [
        P5_GROUP,
        {"name": "spot", "instanceType": "g6e.xlarge", "nodeCount": 3, "capacityType": "SPOT"},
    ]
    facts = {"quota:L-417A185B": 96, "quota:L-3819A6DF": 8, "quota:L-DB2E81BA": 0}
    with pytest.raises(AccountCheckError) as err:
        plan("dev", facts=facts, jobs=[], gpuNodeGroups=groups)
    msg = str(err.value)
    assert "L-417A185B (Running On-Demand P instances) in us-east-1 is 96 vCPUs; the stack needs 384" in msg
    assert (
        "L-3819A6DF (All G and VT Spot Instance Requests) in us-east-1 is 8 vCPUs; the stack needs 12" in msg
    )
    assert "L-DB2E81BA" not in msg  # no on-demand G group: that quota is not needed


def test_a_capacity_block_counts_against_no_quota_but_must_fit_the_group():
    group = {**P5_GROUP, "capacityType": "CAPACITY_BLOCK", "capacityReservationId": "cr-0123456789abcdef0"}
    group["availabilityZone"] = "us-east-1d"
    good = {
        "type": "capacity-block",
        "instanceType": "p5.48xlarge",
        "availabilityZone": "us-east-1d",
        "total": 2,
        "available": 0,  # the group's own nodes hold it on every later run
        "endDate": "2099-01-01T00:00:00Z",
    }
    key = "reservation:cr-0123456789abcdef0"
    run = plan("dev", facts={key: good, "quota:L-417A185B": 0}, jobs=[], gpuNodeGroups=[group])
    assert run.one("eks:index:ManagedNodeGroup", "gpu-p5").inputs["capacityType"] == "CAPACITY_BLOCK"

    def refused(**changed) -> str:
        with pytest.raises(AccountCheckError) as err:
            plan("dev", facts={key: {**good, **changed}}, jobs=[], gpuNodeGroups=[group])
        return str(err.value)

    msg = refused(availabilityZone="us-east-1c", instanceType="p5e.48xlarge", total=1)
    assert (
        "trainstack:gpuNodeGroups[0].capacityReservationId = cr-0123456789abcdef0: it holds p5e.48xlarge, "
        "the group runs p5.48xlarge; it is in us-east-1c, the group's availabilityZone is us-east-1d; it "
        "holds 1 instances, the group needs 2"
    ) in msg
    assert "its state is expired (needs active or scheduled)" in refused(state="expired")
    assert "it ended 2020-01-01 00:00 UTC" in refused(endDate="2020-01-01T00:00:00Z")
    assert "it is an On-Demand Capacity Reservation; capacityType CAPACITY_BLOCK needs a Capacity Block" in (
        refused(type="default")
    )


def test_an_unknown_reservation_is_named_with_the_command_to_look_it_up(tmp_path, capsys):
    group = {**P5_GROUP, "capacityReservationId": "cr-0123456789abcdef0", "availabilityZone": "us-east-1d"}
    code, _, err = run_plan(tmp_path, capsys, "dev", jobs=[], gpuNodeGroups=[group])
    assert code == 2
    assert (
        "EC2 could not read it (InvalidCapacityReservationId.NotFound: The capacity reservation ID "
        "'cr-0123456789abcdef0' does not exist); check the id and the region (aws ec2 "
        "describe-capacity-reservations --capacity-reservation-ids cr-0123456789abcdef0 --region us-east-1)"
    ) in err


def test_six_azs_in_us_east_1_are_refused_because_eks_refuses_use1_az3(tmp_path, capsys):
    code, _, err = run_plan(tmp_path, capsys, "dev", network={"availabilityZones": 6})
    assert code == 2
    assert (
        "trainstack:network.availabilityZones = 6: us-east-1 has 5 AZs where EKS can place cluster "
        "subnets and EC2 offers m6i.large (us-east-1a, us-east-1b, us-east-1c, us-east-1d, us-east-1f); "
        "allowed: at most 5"
    ) in err


def test_a_gpu_group_never_brings_an_az_eks_refuses_into_the_vpc():
    group = {"name": "a10", "instanceType": "g5.xlarge", "availabilityZone": "us-east-1e"}
    with pytest.raises(AccountCheckError) as err:
        plan("dev", jobs=[], gpuNodeGroups=[group])
    assert (
        "trainstack:gpuNodeGroups[0].availabilityZone = us-east-1e: it is use1-az3 in this account, where "
        "EKS cannot place cluster subnets"
    ) in str(err.value)


def test_azs_that_lack_the_system_node_type_are_skipped():
    facts = {"offering:m6i.large": "us-east-1a,us-east-1c,us-east-1d"}
    run = plan("dev", facts=facts)
    zones = sorted(
        s.inputs["availabilityZone"] for s in run.by_type("aws:ec2/subnet:Subnet") if "private" in s.name
    )
    assert zones == ["us-east-1a", "us-east-1c"]


def test_existing_subnets_in_an_az_eks_refuses_are_named():
    account_zones = OfflineAccount("us-west-1")
    assert account_zones.zone_id("us-west-1b") == "usw1-az2"
    # Odd last digits are in AZ b of the offline account (usw1-az2 in us-west-1).
    network = {
        "existingVpcId": "vpc-0123456789abcdef0",
        "existingPrivateSubnetIds": ["subnet-00000000000000000", "subnet-00000000000000001"],
    }
    with pytest.raises(AccountCheckError) as err:
        plan("dev", **{"aws:region": "us-west-1"}, network=network)
    assert (
        "trainstack:network.existingPrivateSubnetIds: subnet-00000000000000001 (usw1-az2) are in AZs where "
        "EKS cannot place cluster subnets"
    ) in str(err.value)


def test_webhooks_need_the_accounts_github_credential(tmp_path, capsys):
    image = {"sourceRepository": "https://github.com/acme/trainstack"}
    code, _, err = run_plan(tmp_path, capsys, "dev", facts=["source-credential:github=absent"], image=image)
    assert code == 2
    assert (
        "trainstack:image.sourceRepository = https://github.com/acme/trainstack: CodeBuild has no GitHub "
        "credential in us-east-1, so creating the webhook fails (ResourceNotFoundException: Could not find "
        "access token); import a GitHub token once per account and region: aws codebuild "
        "import-source-credentials --server-type GITHUB --auth-type PERSONAL_ACCESS_TOKEN --token <token> "
        "--region us-east-1"
    ) in err
    code, out, _ = run_plan(tmp_path, capsys, "dev", image=image)
    assert code == 0
    assert "CodeBuild GitHub credential: needs a GitHub source credential" in out


def test_a_failed_check_leaves_nothing_registered_but_the_provider():
    registered = []
    with pytest.raises(AccountCheckError):
        run_program("dev", stack_values("dev"), facts={"quota:L-DB2E81BA": 0}, registered=registered)
    assert [r.type for r in registered] == ["pulumi:providers:aws"]


@pytest.mark.parametrize(
    ("where", "said", "problem"),
    [
        (
            None,
            "",
            "the aws CLI is not on this machine's PATH; the cluster's kubeconfig runs `aws eks get-token`",
        ),
        (
            "/usr/bin/aws",
            "aws-cli/2.3.0 Python/3.8.8 Linux/5.10",
            "is 2.3.0; `aws eks get-token` needs 2.7.0",
        ),
        ("/usr/bin/aws", "aws-cli/1.22.5 Python/3.8.8", "is 1.22.5; `aws eks get-token` needs 1.24.0"),
        ("/usr/bin/aws", "command not found", "does not answer `aws --version` as the AWS CLI"),
        ("/usr/bin/aws", "aws-cli/2.31.4 Python/3.13.7 Linux/6.8 exe/x86_64.ubuntu.24", None),
    ],
)
def test_aws_cli_check(where, said, problem):
    check = aws_cli.installed_cli_check(lambda _: where, lambda _: said)
    assert (check.problem is None) if problem is None else (problem in check.problem)


def test_a_live_run_without_the_aws_cli_stops_at_start():
    """In the real world the aws CLI is run (account_checks.world); the offline plan only reports it."""
    no_cli = replace(
        offline_world(OfflineCluster([])), aws_cli=lambda: aws_cli.installed_cli_check(lambda _: None, str)
    )
    registered = []
    with pytest.raises(AccountCheckError, match="the aws CLI is not on this machine's PATH"):
        run_program("dev", stack_values("dev"), registered=registered, world=no_cli)
    assert [r.type for r in registered] == ["pulumi:providers:aws"]


def test_aws_profile_reaches_the_kubeconfig_the_kubernetes_provider_runs():
    run = plan("dev", **{"aws:profile": "training"})
    provider = run.one("pulumi:providers:kubernetes")
    assert provider.inputs["kubeconfig"] == "[secret]"
    exec_ = json.loads(provider.revealed["kubeconfig"])["users"][0]["user"]["exec"]
    assert exec_["command"] == "aws"
    assert exec_["args"] == [
        "--region", "us-east-1", "eks", "get-token", "--cluster-name", "trainstack-dev",
        "--output", "json", "--profile", "training",
    ]  # fmt: skip
    cluster = run.one("eks:index:Cluster")
    assert cluster.inputs["providerCredentialOpts"] == {"profileName": "training"}


# AWS limits on names, by resource type and input (autonamed names: logical name + 8 characters).
NAME_LIMITS = {
    ("aws:ecr/pullThroughCacheRule:PullThroughCacheRule", "ecrRepositoryPrefix"): 30,
    ("aws:ecr/repository:Repository", "name"): 256,
    ("aws:iam/role:Role", "name"): 64,
    ("eks:index:Cluster", "name"): 100,
    ("eks:index:ManagedNodeGroup", "nodeGroupName"): 63,
    ("aws:ec2/launchTemplate:LaunchTemplate", "namePrefix"): 102,
    ("aws:codebuild/project:Project", "name"): 150,
    ("aws:s3/bucket:Bucket", "bucketPrefix"): 37,
    ("aws:scheduler/schedule:Schedule", "name"): 64,
    ("aws:scheduler/scheduleGroup:ScheduleGroup", "name"): 64,
    ("aws:cloudwatch/logGroup:LogGroup", "name"): 512,
    ("aws:secretsmanager/secret:Secret", "namePrefix"): 512 - 26,
}


def test_every_name_a_20_character_stack_derives_fits_its_service():
    stack = "research-team-east-1"
    assert len(stack) == 20
    values = stack_values(
        "dev",
        image={"dockerHubUsername": "me", "nightlyRebuild": True},
        ci=ci_config(),
        gpuNodeGroups=[{"name": "a" * 32, "instanceType": "g6.xlarge"}],
        jobs=[],
    )
    values["trainstack:dockerHubAccessToken"] = "dckr_pat_offline"
    run = run_program(stack, values, ["trainstack:dockerHubAccessToken"])
    checked = set()
    for r in run.resources:
        for (type_, key), limit in NAME_LIMITS.items():
            if r.type != type_:
                continue
            name = r.inputs.get(key) or (f"{r.name}-1234567" if key == "name" else None)
            assert name is None or len(name) <= limit, (type_, key, name)
            checked.add(type_)
    assert checked == {t for t, _ in NAME_LIMITS}
    prefix = run.one("aws:ecr/pullThroughCacheRule:PullThroughCacheRule").inputs["ecrRepositoryPrefix"]
    assert prefix == fit(f"trainstack-{stack}-image-dockerhub", 30)
    assert prefix.startswith("trainstack-research") and len(prefix) == 30


def test_names_that_fit_never_change_and_long_ones_shorten_the_same_way():
    assert fit("trainstack-dev-image-dockerhub", 30) == "trainstack-dev-image-dockerhub"
    long = fit("trainstack-prod-image-dockerhub", 30)
    assert len(long) <= 30 and long == fit("trainstack-prod-image-dockerhub", 30)
    assert long != fit("trainstack-prod-image-dockerhuc", 30)


@pytest.mark.parametrize(
    ("fact", "message"),
    [
        ("quota:L-DB2E81BA", "expected KEY=VALUE"),
        ("quota:L-DB2E81BA=-1", "a quota is a number of vCPUs"),
        ("quota:nonsense=1", "unknown account fact 'quota:nonsense'"),
        ("reservation:cr-0123456789abcdef0={instanceType: p5.48xlarge}", "a map with instanceType"),
        ("source-credential:github=maybe", "present or absent"),
    ],
)
def test_bad_account_facts_are_one_line(fact, message):
    with pytest.raises(FactError, match=message):
        parse_facts([fact])


def test_an_account_holding_another_stacks_roles_is_not_this_environments_own(tmp_path, capsys):
    """ci.accountMode perEnvironment (the default) is read against the account: prod's roles under
    /trainstack/prod/ there make it shared, and the plan stops until that is said. Before: the
    setting changed a log line only."""
    code, _, err = run_plan(tmp_path, capsys, "dev", facts=["account-stacks=[prod]"], ci=ci_config())
    assert code == 2
    assert (
        "trainstack:ci.accountMode = perEnvironment: account 123456789012 also holds the roles of stack(s) "
        "prod (/trainstack/<stack>/), so it is not dev's own; deploy dev to an account of its own, or set "
        "ci.accountMode: shared, where the fence keeps the stacks apart but for RDS snapshots"
    ) in err
    code, out, _ = run_plan(tmp_path, capsys, "dev", ci=ci_config())
    assert code == 0
    assert (
        "ok    CI account mode: needs an account of dev's own (ci.accountMode perEnvironment); found no "
        "other stack's roles"
    ) in out


def test_a_shared_account_says_what_the_fence_cannot_keep_apart(tmp_path, capsys):
    shared = ci_config(accountMode="shared")
    code, out, _ = run_plan(tmp_path, capsys, "dev", facts=["account-stacks=[prod, staging]"], ci=shared)
    assert code == 0
    line = next(line for line in out.splitlines() if "CI account mode" in line)
    assert line.strip().startswith(
        "ok    CI account mode: needs stacks kept apart by the CI fence (ci.accountMode shared); found "
        "stacks prod, staging; not fenced: RDS snapshots and the node groups' EBS volumes"
    )
    assert "KMS keys used through a service (kms:ViaService: EBS, S3)" in line


def test_a_role_in_the_stacks_path_that_trusts_an_outsider_stops_the_run(tmp_path, capsys):
    """IAM has no condition on a new role's trust policy, so the deploy role may create, in its own
    path, a role another account can assume. The next run finds it and stops."""
    planted = {
        "name": "helper",
        "path": "/trainstack/dev/",
        "principal": {"AWS": "arn:aws:iam::999999999999:root"},
    }
    own = {"name": "job-role", "path": "/trainstack/dev/", "principal": {"Service": "pods.eks.amazonaws.com"}}
    facts = [f"account-roles={json.dumps([planted, own])}"]
    code, _, err = run_plan(tmp_path, capsys, "dev", facts=facts, ci=ci_config())
    assert code == 2
    assert (
        "helper trusts AWS arn:aws:iam::999999999999:root: no role of dev trusts that, so someone with its "
        "deploy role's access made it (CreateRole takes any trust policy)"
    ) in err
    code, out, _ = run_plan(
        tmp_path, capsys, "dev", facts=[f"account-roles={json.dumps([own])}"], ci=ci_config()
    )
    assert code == 0
    assert (
        "Roles in the stack's path: needs roles under /trainstack/dev/ trusting AWS services and GitHub only; found 1 role(s)"
        in out
    )


@pytest.mark.parametrize(
    ("stack", "overrides"),
    [
        (
            "dev",
            {
                "ci": ci_config(
                    runner="codebuild",
                    stateBucket="acme-pulumi-state",
                    secretsKeyArn="arn:aws:kms:us-east-1:123456789012:key/1",
                )
            },
        ),
        ("prod", {"ci": ci_config(accountMode="shared", environment="prod")}),
    ],
)
def test_every_role_the_stack_creates_trusts_only_what_the_check_allows(stack, overrides):
    """The check cannot stop the stack on its own roles: each trust policy the plan registers passes."""
    from account_checks.account_mode import foreign_principals

    run = plan(stack, **overrides)
    roles = run.by_type("aws:iam/role:Role")
    assert roles
    for role in roles:
        policy = role.inputs["assumeRolePolicy"]
        document = json.loads(policy) if isinstance(policy, str) else policy
        assert foreign_principals({"AssumeRolePolicyDocument": document}) == [], role.name


def test_only_roles_under_a_stacks_path_name_another_stack():
    roles = [
        {"Path": p} for p in ("/trainstack/", "/trainstack/prod/", "/trainstack/dev/", "/trainstack/prod/x/")
    ]
    assert other_stacks(roles, "dev") == ["prod"]
