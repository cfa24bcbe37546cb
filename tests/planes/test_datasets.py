"""A declared dataset prepared once into the stack's bucket: the Job that runs the image's
`trainer.prepare_data` (its flags as workload/trainer/prepare_data.py parses them), named by its
spec's digest so a change prepares again beside the old files, as an identity that writes only
its own datasets/<name>/, awaited by pulumi-kubernetes for its timeout. What a job naming it gets:
tests/planes/test_job_datasets.py."""

from __future__ import annotations

import json

import pytest
from support.plans import plan

from workload.trainer.prepare_data import parse_args

JOB = "kubernetes:batch/v1:Job"


def preparations(run) -> list:
    """The dataset preparation Jobs (not the driver probes)."""
    return [j for j in run.by_type(JOB) if j.name.startswith("dataset-")]


def preparation(run):
    (job,) = preparations(run)
    return job


C4 = {"name": "c4-en", "source": "allenai/c4", "config": "en", "maxTokens": 2_000_000, "valTokens": 20_000}


def prepared(*datasets: dict, **overrides):
    """The dev stack with `datasets`, and a job on the first (the whole program, as `pulumi up` runs it)."""
    job = {"name": "fsdp", "kind": "PyTorchJob", "nodeGroup": "gpu", "dataset": datasets[0]["name"]}
    return plan("dev", datasets=list(datasets), jobs=[job], **overrides)


@pytest.fixture(scope="module")
def run():
    return prepared(C4)


def container(run) -> dict:
    (c,) = preparation(run).inputs["spec"]["template"]["spec"]["containers"]
    return c


def test_the_job_runs_prepare_data_into_the_datasets_directory_of_its_spec(run):
    job = preparation(run).inputs
    name = job["metadata"]["name"]
    assert name.startswith("prepare-c4-en-") and len(name) == len("prepare-c4-en-") + 10
    digest = name.rpartition("-")[2]
    c = container(run)
    assert c["command"] == ["python", "-m", "trainer.prepare_data"]
    flags = parse_args(c["args"])  # the image's own parser takes every flag
    assert flags.out.endswith(f"/datasets/c4-en/{digest}/") and flags.out.startswith("s3://")
    assert (flags.dataset, flags.config, flags.max_tokens, flags.val_tokens) == ("allenai/c4", "en", 2e6, 2e4)
    assert str(flags.work_dir) == c["volumeMounts"][0]["mountPath"]
    spec = job["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"trainstack.dev/role": "system"}
    assert spec["restartPolicy"] == "Never"
    assert spec["serviceAccountName"] == "dataset-c4-en"


def test_pulumi_waits_for_it_and_the_association_comes_first(run):
    job = preparation(run)
    assert job.options["customTimeouts"] == {"create": "240m"}
    association = run.one(
        "aws:eks/podIdentityAssociation:PodIdentityAssociation", "dataset-c4-en-association"
    )
    assert association.urn in job.dependencies
    assert association.inputs["serviceAccount"] == "dataset-c4-en"


def test_its_identity_writes_its_own_dataset_only(run):
    policy = json.loads(run.one("aws:iam/rolePolicy:RolePolicy", "dataset-c4-en-policy").inputs["policy"])
    by_sid = {s["Sid"]: s for s in policy["Statement"]}
    bucket = parse_args(container(run)["args"]).out.removeprefix("s3://").partition("/")[0]
    assert by_sid["WriteOwnDataset"]["Resource"] == f"arn:aws:s3:::{bucket}/datasets/c4-en/*"
    assert "s3:DeleteObject" not in by_sid["WriteOwnDataset"]["Action"]
    assert by_sid["ListOwnDataset"]["Condition"] == {"StringLike": {"s3:prefix": ["datasets/c4-en/*"]}}
    assert not any("checkpoints" in json.dumps(s) for s in policy["Statement"])


def test_a_changed_spec_makes_a_new_job_and_directory_a_longer_wait_does_not(run):
    before = preparation(run).inputs["metadata"]["name"]
    longer = preparation(prepared({**C4, "timeoutMinutes": 600}))
    assert longer.inputs["metadata"]["name"] == before
    assert longer.options["customTimeouts"] == {"create": "600m"}
    more = preparation(prepared({**C4, "maxTokens": 4_000_000})).inputs
    assert more["metadata"]["name"] != before
    assert (
        parse_args(more["spec"]["template"]["spec"]["containers"][0]["args"]).out
        != parse_args(container(run)["args"]).out
    )


def test_each_dataset_is_prepared_by_its_own_job_and_identity():
    run = prepared(C4, {**C4, "name": "wiki", "source": "wikimedia/wikipedia", "config": "20231101.en"})
    assert sorted(j.inputs["metadata"]["name"].rpartition("-")[0] for j in preparations(run)) == [
        "prepare-c4-en",
        "prepare-wiki",
    ]
    accounts = {r.inputs["metadata"]["name"] for r in run.by_type("kubernetes:core/v1:ServiceAccount")}
    assert {"dataset-c4-en", "dataset-wiki"} <= accounts
