"""What training pods may do in AWS, under the mock engine: each job runs as its own service
account, whose Pod Identity role reaches the job's own checkpoints/<job>/ (read and write) and
datasets/ (read), nothing else: not another job's checkpoints, not the build context."""

from __future__ import annotations

import json

import pytest
from moto.iam.access_control import IAMPolicy, PermissionResult
from support.jobs import body, job
from support.plans import plan, policy_of

ASSOCIATION = "aws:eks/podIdentityAssociation:PodIdentityAssociation"
JOBS = [
    {"name": "alpha", "kind": "PyTorchJob", "nodeGroup": "gpu", "wait": "none"},
    {"name": "alpha-2", "kind": "RayJob", "nodeGroup": "gpu", "wait": "none"},
]
WRITES = ("s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload")


@pytest.fixture(scope="module")
def two_jobs():
    return plan("prod", gpuNodeGroups=[{"name": "gpu", "instanceType": "g6.xlarge"}], jobs=JOBS)


def trusts_service(trust: dict, tags: dict) -> bool:
    """Whether Pod Identity's AssumeRole, carrying these session tags, is allowed by the trust."""
    from support.iam_eval import Request, applies

    request = Request("sts:AssumeRole", "*", tags)
    return any(
        s["Effect"] == "Allow" and applies({**s, "Resource": "*", "Principal": "*"}, request)
        for s in trust["Statement"]
    )


def bucket_arn(run) -> str:
    return f"arn:aws:s3:::{run.outputs['bucketName']}"


def pod_spec(manifest: dict) -> dict:
    if manifest["kind"] == "PyTorchJob":
        return manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    return manifest["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]


def test_each_job_runs_as_its_own_service_account_with_its_own_role(two_jobs):
    by_account = {r.inputs["serviceAccount"]: r.inputs for r in two_jobs.by_type(ASSOCIATION)}
    assert set(by_account) == {
        "job-alpha",
        "job-alpha-2",
        "cluster-autoscaler",
        "trainstack-node-fence",
        "trainstack-health-gate",
    }
    for name in ("alpha", "alpha-2"):
        assoc = by_account[f"job-{name}"]
        assert (assoc["clusterName"], assoc["namespace"]) == ("trainstack-prod", "training")
        role = two_jobs.one("aws:iam/role:Role", f"training-pods-{name}-role").inputs
        assert role["name"] == f"trainstack-prod-job-{name}"
        assert (
            assoc["roleArn"] == f"arn:aws:iam::123456789012:role/trainstack/prod/trainstack-prod-job-{name}"
        )
        trust = json.loads(role["assumeRolePolicy"])
        (statement,) = trust["Statement"]
        assert statement["Principal"] == {"Service": "pods.eks.amazonaws.com"}
        assert statement["Action"] == ["sts:AssumeRole", "sts:TagSession"]
        # Only this cluster's job-<name> in `training`: Pod Identity's session tags, as requested.
        tags = {"eks-cluster-name": "trainstack-prod", "kubernetes-namespace": "training"}
        own = {
            f"aws:RequestTag/{k}": v for k, v in {**tags, "kubernetes-service-account": f"job-{name}"}.items()
        }
        assert statement["Condition"] == {"StringEquals": own}
        for key, other in [
            ("kubernetes-service-account", "job-other"),
            ("kubernetes-namespace", "default"),
            ("eks-cluster-name", "trainstack-dev"),
        ]:
            assert trusts_service(trust, own) and not trusts_service(
                trust, {**own, f"aws:RequestTag/{key}": other}
            )
        manifest = body(job(two_jobs, name))
        assert pod_spec(manifest)["serviceAccountName"] == f"job-{name}"
        if manifest["kind"] == "RayJob":  # the head and the submitter too: every pod of the job
            head = manifest["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
            assert head["serviceAccountName"] == f"job-{name}"
        waits = {r.rsplit("::", 1)[1] for r in job(two_jobs, name).dependencies}
        assert f"training-pods-{name}-association" in waits
    # The shared account no job runs as any more has no AWS identity left.
    assert not [r for r in two_jobs.by_type(ASSOCIATION) if r.inputs["serviceAccount"] == "trainer"]
    assert "trainingRoleArn" not in two_jobs.outputs


def test_each_jobs_policy_names_its_own_prefix_and_reads_datasets(two_jobs):
    bucket = bucket_arn(two_jobs)
    policy = policy_of(two_jobs, "training-pods-alpha-policy")
    by_sid = {s["Sid"]: s for s in policy["Statement"]}
    assert by_sid["ListOwnCheckpointsAndDatasets"] == {
        "Sid": "ListOwnCheckpointsAndDatasets",
        "Effect": "Allow",
        "Action": ["s3:ListBucket"],
        "Resource": bucket,
        # StringLike, not StringLikeIfExists: a listing with no prefix is denied.
        "Condition": {"StringLike": {"s3:prefix": ["checkpoints/alpha/*", "datasets/*"]}},
    }
    assert by_sid["ReadWriteOwnCheckpoints"]["Resource"] == f"{bucket}/checkpoints/alpha/*"
    assert by_sid["ReadDatasets"] == {
        "Sid": "ReadDatasets",
        "Effect": "Allow",
        "Action": ["s3:GetObject"],
        "Resource": f"{bucket}/datasets/*",
    }
    assert by_sid["UseBucketKey"]["Resource"].startswith("arn:aws:kms:")
    other = policy_of(two_jobs, "training-pods-alpha-2-policy")
    assert {s["Sid"]: s for s in other["Statement"]}["ReadWriteOwnCheckpoints"]["Resource"] == (
        f"{bucket}/checkpoints/alpha-2/*"
    )


def test_job_a_cannot_write_or_read_job_bs_checkpoints(two_jobs):
    """Evaluated with moto's IAM policy engine. `alpha` is a prefix of `alpha-2`'s name: the
    trailing slash keeps their checkpoints apart."""
    bucket = bucket_arn(two_jobs)
    alpha = IAMPolicy(json.dumps(policy_of(two_jobs, "training-pods-alpha-policy")))

    def allowed(action: str, key: str) -> bool:
        return alpha.is_action_permitted(action, f"{bucket}/{key}") == PermissionResult.PERMITTED

    own, other = "checkpoints/alpha/step_00000100/.metadata", "checkpoints/alpha-2/step_00000100/.metadata"
    for action in ("s3:GetObject", *WRITES):
        assert allowed(action, own), action
        assert not allowed(action, other), action
        assert not allowed(action, f"build-contexts/{'0' * 64}.zip"), action
        assert not allowed(action, "mlflow/1/artifacts/model.pt"), action
    assert allowed("s3:GetObject", "datasets/c4-en/train.bin")
    for action in WRITES:  # datasets are read, never replaced under a job that reads them
        assert not allowed(action, "datasets/c4-en/train.bin"), action


def test_a_brought_role_is_associated_with_each_jobs_account():
    run = plan(
        "existing",
        facts={"eks-cluster:ml-platform": {"version": "1.35", "zones": ["us-east-1a", "us-east-1b"]}},
        existingCluster={
            "eksClusterName": "ml-platform",
            "podRoleArn": "arn:aws:iam::123456789012:role/ml-training",
            "systemNodes": {"nodeSelector": {"pool": "system"}},
        },
    )
    jobs = {r.name.removeprefix("job-") for r in run.resources if r.name.startswith("job-") and r.custom}
    assert jobs
    assocs = {r.inputs["serviceAccount"]: r.inputs["roleArn"] for r in run.by_type(ASSOCIATION)}
    assert assocs == {f"job-{j}": "arn:aws:iam::123456789012:role/ml-training" for j in jobs}
    assert not [r for r in run.by_type("aws:iam/role:Role") if r.name.startswith("training-pods")]


def test_a_kubeconfig_stack_gives_each_job_an_account_and_no_aws_identity():
    run = plan("local")
    accounts = {
        r.inputs["metadata"]["name"]
        for r in run.by_type("kubernetes:core/v1:ServiceAccount")
        if r.inputs["metadata"].get("labels", {}).get("trainstack.dev/job")
    }
    assert accounts == {"job-tiny-fsdp", "job-tiny-ray"}
    assert not run.by_type(ASSOCIATION)


def test_a_long_job_name_gets_a_role_name_within_iams_limit():
    name = "j" * 63
    run = plan(
        "dev",
        gpuNodeGroups=[{"name": "gpu", "instanceType": "g6.xlarge"}],
        jobs=[{"name": name, "kind": "PyTorchJob", "nodeGroup": "gpu", "wait": "none"}],
    )
    role = run.one("aws:iam/role:Role", f"training-pods-{name}-role").inputs["name"]
    assert len(role) == 64 and role.startswith("trainstack-dev-job-jjj")


def test_the_namespace_and_secrets_stay_where_they_were(kinds_plan):
    """Renamed identities must not move the objects jobs already read: a replaced Secret relaunches
    every job that reads it."""
    parent = "trainstack:compute:TrainingPodIdentity"
    secret = kinds_plan.one("kubernetes:core/v1:Secret", "hf-token")
    assert secret.urn.endswith(f"{parent}$kubernetes:core/v1:Secret::hf-token")
    namespace = kinds_plan.one("kubernetes:core/v1:Namespace", "training-pods-namespace")
    assert namespace.urn.endswith(f"{parent}$kubernetes:core/v1:Namespace::training-pods-namespace")
    env = {e["name"]: e for e in pod_spec(body(job(kinds_plan, "ray-l4")))["containers"][0]["env"]}
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "hf-token"
