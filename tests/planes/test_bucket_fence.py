"""Prod's bucket in an account it shares with dev: S3 evaluates no resource tags on a general-purpose
bucket unless ABAC is turned on for it, so the requests below carry none (`aws:ResourceTag` absent)
and only the bucket's policy, by principal, keeps dev's deploy role out. Evaluated as AWS does for a
principal of the bucket's own account: identity policies within the boundary, or the bucket
policy's allow, and any explicit deny wins (support.iam_eval)."""

from __future__ import annotations

import json

import pytest
from support.iam_eval import Request, decide
from support.plans import BREAK_GLASS, ci_config, plan

from offline.engine.aws_answers import file_system_id

ACCOUNT = "123456789012"
JOB = "llama-1b-fsdp"
PROD_DEPLOY = f"arn:aws:iam::{ACCOUNT}:role/trainstack/prod/trainstack-prod-github-deploy"
DEV_DEPLOY = f"arn:aws:iam::{ACCOUNT}:role/trainstack/dev/trainstack-dev-github-deploy"


@pytest.fixture(scope="module")
def prod():
    return plan("prod", ci=ci_config(accountMode="shared", environment="prod"))


@pytest.fixture(scope="module")
def dev():
    return plan("dev", ci=ci_config(accountMode="shared"))


def bucket_policy(run) -> dict:
    return json.loads(run.one("aws:s3/bucketPolicy:BucketPolicy").inputs["policy"])


def bucket_arn(run) -> str:
    return f"arn:aws:s3:::{run.outputs['bucketName']}"


def role_policies(run, prefix: str) -> list[dict]:
    return [
        json.loads(p.inputs["policy"])
        for p in run.by_type("aws:iam/rolePolicy:RolePolicy")
        if p.name.startswith(prefix)
    ]


def boundary(run) -> dict:
    (policy,) = run.by_type("aws:iam/policy:Policy")
    return json.loads(policy.inputs["policy"])


def principal(arn: str, stack: str | None) -> dict:
    """A role session's context: the role's ARN (path included) and its tags as principal tags."""
    return {"aws:PrincipalArn": arn, **({"aws:PrincipalTag/trainstack:stack": stack} if stack else {})}


def test_dev_deploy_cannot_touch_prods_bucket(dev, prod):
    """Dev's deploy role allows `*` within dev's boundary, which names no bucket: only prod's bucket
    policy stands between it and prod's checkpoints."""
    bucket = bucket_arn(prod)
    who = principal(DEV_DEPLOY, "dev")
    deploy = role_policies(dev, "github-actions-deploy")
    for action, resource in [
        ("s3:PutObject", f"{bucket}/checkpoints/{JOB}/step_00000100/.metadata"),  # unpickled on resume
        ("s3:GetObject", f"{bucket}/checkpoints/{JOB}/step_00000100/__0_0.distcp"),
        ("s3:DeleteObject", f"{bucket}/checkpoints/{JOB}/step_00000100/.metadata"),
        ("s3:DeleteObjectVersion", f"{bucket}/checkpoints/{JOB}/step_00000100/.metadata"),
        ("s3:PutObject", f"{bucket}/build-contexts/context.zip"),
        ("s3:PutBucketPolicy", bucket),
        ("s3:DeleteBucketPolicy", bucket),
        ("s3:PutLifecycleConfiguration", bucket),
        ("s3:PutEncryptionConfiguration", bucket),
        ("s3:PutBucketVersioning", bucket),
        ("s3:DeleteBucket", bucket),
        ("s3:ListBucket", bucket),
    ]:
        request = Request(action, resource, who)
        assert decide(deploy, request, boundary(dev)) == "allow"  # the identity side alone lets it
        assert decide(deploy, request, boundary(dev), bucket_policy(prod)) == "deny", action


def test_only_prods_deploy_role_and_break_glass_lose_or_reconfigure(prod):
    bucket = bucket_arn(prod)
    admin = [{"Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}]
    job_role = f"arn:aws:iam::{ACCOUNT}:role/trainstack/prod/training-pods-{JOB}-role"
    version = f"{bucket}/checkpoints/{JOB}/step_00000100/.metadata"
    for action, resource in [
        ("s3:DeleteObjectVersion", version),
        ("s3:PutBucketPolicy", bucket),
        ("s3:PutLifecycleConfiguration", bucket),
        ("s3:PutEncryptionConfiguration", bucket),
    ]:
        for arn, stack, expected in [
            (PROD_DEPLOY, "prod", "allow"),
            (BREAK_GLASS, None, "allow"),
            (job_role, "prod", "deny"),  # prod's own roles too: only the deploy role
            (f"arn:aws:iam::{ACCOUNT}:role/trainstack/prod/eks-node", "prod", "deny"),
            (f"arn:aws:iam::{ACCOUNT}:role/SomeAdmin", None, "deny"),
        ]:
            request = Request(action, resource, principal(arn, stack))
            assert decide(admin, request, boundary(prod), bucket_policy(prod)) == expected, (action, arn)


def test_prods_job_reads_and_writes_its_checkpoints_and_no_untagged_principal_does(prod):
    bucket = bucket_arn(prod)
    job_role = f"arn:aws:iam::{ACCOUNT}:role/trainstack/prod/training-pods-{JOB}-role"
    (job,) = role_policies(prod, f"training-pods-{JOB}")
    own = f"{bucket}/checkpoints/{JOB}/step_00000100/.metadata"
    for action in ("s3:GetObject", "s3:PutObject", "s3:DeleteObject"):
        request = Request(action, own, principal(job_role, "prod"))
        assert decide([job], request, boundary(prod), bucket_policy(prod)) == "allow", action
    admin = [{"Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}]
    untagged = principal(f"arn:aws:iam::{ACCOUNT}:role/PlatformAdmin", None)
    assert decide(admin, Request("s3:GetObject", own, untagged), None, bucket_policy(prod)) == "deny"
    # No FSx in this stack: no file system's linked role gets in (another stack's either).
    fsx = principal(fsx_role("fs-0123"), None)
    assert decide(admin, Request("s3:PutObject", own, fsx), None, bucket_policy(prod)) == "deny"


def fsx_role(file_system_id: str) -> str:
    return (
        f"arn:aws:iam::{ACCOUNT}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/"
        f"AWSServiceRoleForFSxS3Access_{file_system_id}"
    )


def test_only_the_stacks_own_file_system_reaches_its_bucket():
    """Before: every FSx linked role of the account got in (`AWSServiceRoleForFSxS3Access_*`), so
    another stack's file system, linked to this bucket, read prod's checkpoints. Now the fence names
    the stack's own file system's role, by its id, once the file system exists; the key likewise."""
    p5 = {"name": "p5", "instanceType": "p5.48xlarge", "nodeCount": 2, "efa": True, "placementGroup": True}
    fsx = {"enabled": True, "storageCapacityGiB": 2400, "throughputPerTiB": 250, "nodeGroups": ["p5"]}
    run = plan(
        "prod",
        ci=ci_config(accountMode="shared", environment="prod"),
        gpuNodeGroups=[p5],
        storage={"encryption": "KMS", "protect": True, "fsx": fsx},
    )
    (file_system,) = run.by_type("aws:fsx/lustreFileSystem:LustreFileSystem")
    own_id = file_system_id(file_system.name)  # as FSx names it: the offline engine answers so
    checkpoint = f"{bucket_arn(run)}/checkpoints/{JOB}/step_00000100/.metadata"
    admin = [{"Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}]
    for fs_id, expected in ((own_id, "allow"), ("fs-0another0stack", "deny")):
        who = principal(fsx_role(fs_id), None)
        assert decide(admin, Request("s3:PutObject", checkpoint, who), None, bucket_policy(run)) == expected
    key = {
        s["Sid"]: s for s in json.loads(run.one("aws:kms/keyPolicy:KeyPolicy").inputs["policy"])["Statement"]
    }
    assert key["FSxLustreLinkedBucket"]["Condition"]["ArnEquals"] == {"aws:PrincipalArn": fsx_role(own_id)}
    # The association is made once the bucket's policy lets the file system's role in.
    association = run.one("aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation")
    assert run.one("aws:s3/bucketPolicy:BucketPolicy").urn in association.dependencies


def test_the_bucket_tells_principals_apart_by_their_path_not_their_tags(prod):
    """A role under dev's path that calls itself prod, by a tag key in another case (IAM finds a
    principal tag whatever its key's case) or the same one, is still dev's. Before: the bucket let in
    every principal whose `aws:PrincipalTag/trainstack:stack` read prod."""
    bucket = bucket_arn(prod)
    anything = [{"Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}]
    impostor = f"arn:aws:iam::{ACCOUNT}:role/trainstack/dev/impostor"
    for tags in (
        {"aws:PrincipalTag/TrainStack:Stack": "prod"},
        {"aws:PrincipalTag/trainstack:stack": "prod"},
    ):
        who = {"aws:PrincipalArn": impostor, **tags}
        for action, resource in [
            ("s3:PutObject", f"{bucket}/checkpoints/{JOB}/step_00000100/.metadata"),
            ("s3:PutObject", f"{bucket}/build-contexts/context.zip"),
            ("s3:GetObject", f"{bucket}/checkpoints/{JOB}/step_00000100/__0_0.distcp"),
        ]:
            assert decide(anything, Request(action, resource, who), None, bucket_policy(prod)) == "deny"
    (fence,) = [s for s in bucket_policy(prod)["Statement"] if s["Sid"] == "OnlyThisStacksPrincipals"]
    assert fence["Condition"] == {
        "ArnNotLike": {
            "aws:PrincipalArn": [
                f"arn:aws:iam::{ACCOUNT}:role/trainstack/prod/*",
                BREAK_GLASS,
            ]
        }
    }


def test_without_ci_the_bucket_only_enforces_tls():
    (statement,) = bucket_policy(plan("dev"))["Statement"]
    assert statement["Sid"] == "DenyInsecureTransport"


def test_the_nightly_schedule_lives_in_the_stacks_group(prod):
    (group,) = prod.by_type("aws:scheduler/scheduleGroup:ScheduleGroup")
    assert group.inputs["name"] == "trainstack-prod"
    (schedule,) = prod.by_type("aws:scheduler/schedule:Schedule")
    assert schedule.inputs["groupName"] == "trainstack-prod"
    (fenced,) = [s for s in boundary(prod)["Statement"] if s["Sid"] == "OnlyOurSchedules"]
    assert fenced["NotResource"] == "arn:aws:scheduler:*:*:schedule/trainstack-prod/*"


def test_a_run_that_stops_before_the_file_system_is_made_still_ends_with_its_error(monkeypatch):
    """The bucket's policy waits on a deferred Output (the file system's id), and the SDK waits for
    every Output before a run ends: one left unresolved by an error in between hung the run. The
    error is raised, within a bound that only a hang would reach."""
    import threading

    import stacks.created

    def fails(*_args, **_kwargs):
        raise RuntimeError("the compute plane stopped")

    monkeypatch.setattr(stacks.created, "compute_plane", fails)
    ended: list[BaseException | None] = []

    def run() -> None:
        try:
            plan("prod", ci=ci_config(accountMode="shared", environment="prod"))
            ended.append(None)
        except BaseException as err:
            ended.append(err)

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    runner.join(120)
    assert len(ended) == 1, "the run did not end"
    assert "the compute plane stopped" in str(ended[0])
