"""`jobs[].s3Read` (issue #47): another bucket of the team's a job may read, granted read-only in
that job's own Pod Identity role (no other job's), and the args that name it are then accepted."""

from __future__ import annotations

from support.config_rules import group, job, problems
from support.plans import plan, policy_of

from components.pod_identity import job_policy

READER = job(name="reader", s3Read=["s3://team-data/c4/"], args=["--data", "s3://team-data/c4/train.bin"])
OTHER = job(name="other")


def test_the_job_reads_its_locations_in_its_own_role_only():
    run = plan("dev", gpuNodeGroups=[group(nodeCount=2)], jobs=[READER, OTHER])
    reader = policy_of(run, "training-pods-reader-policy")["Statement"]
    assert {
        "Sid": "GetRead0",
        "Effect": "Allow",
        "Action": ["s3:GetObject"],
        "Resource": "arn:aws:s3:::team-data/c4/*",
    } in reader
    listing = next(s for s in reader if s["Sid"] == "ListRead0")
    assert listing["Resource"] == "arn:aws:s3:::team-data"
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["c4/*"]}}
    other = policy_of(run, "training-pods-other-policy")["Statement"]
    assert not any("team-data" in str(s["Resource"]) for s in other)


def test_a_whole_bucket_lists_without_a_prefix_condition():
    (listing, get) = job_policy("arn:aws:s3:::stack", None, "j", ("s3://team-data",))["Statement"][-2:]
    assert "Condition" not in listing and get["Resource"] == "arn:aws:s3:::team-data/*"


def test_an_arg_outside_its_locations_is_still_refused():
    outside = {**READER, "args": ["--data", "s3://team-data/other/train.bin"]}
    (msg,) = problems(gpuNodeGroups=[group()], jobs=[outside])
    assert msg.startswith(
        "trainstack:jobs[0].args = \"s3://team-data/other/train.bin\": job 'reader' reads s3://team-data"
    )
    assert msg.endswith("or a location of the job's s3Read")


def test_s3_read_must_be_an_s3_location():
    (msg,) = problems(gpuNodeGroups=[group()], jobs=[job(s3Read=["team-data"])])
    assert (
        msg
        == 'trainstack:jobs[0].s3Read[0] = "team-data": not an S3 location; allowed: s3://bucket or s3://bucket/prefix/'
    )
