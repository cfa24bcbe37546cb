"""Compute plane under the mock engine, what training pods may do in AWS: the Pod Identity
association of the training service account and its role's policy, scoped to the job prefixes."""

from __future__ import annotations

import json

from support.plans import policy_of


def test_pod_identity_is_scoped_to_the_bucket(prod_plan):
    assoc = prod_plan.one(
        "aws:eks/podIdentityAssociation:PodIdentityAssociation", "training-pods-association"
    ).inputs
    assert (assoc["clusterName"], assoc["namespace"], assoc["serviceAccount"]) == (
        "trainstack-prod",
        "training",
        "trainer",
    )
    trust = json.loads(prod_plan.one("aws:iam/role:Role", "training-pods-role").inputs["assumeRolePolicy"])
    assert trust["Statement"][0]["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert trust["Statement"][0]["Action"] == ["sts:AssumeRole", "sts:TagSession"]
    policy = policy_of(prod_plan, "training-pods-policy")
    bucket_arn = f"arn:aws:s3:::{prod_plan.outputs['bucketName']}"
    by_sid = {s["Sid"]: s for s in policy["Statement"]}
    assert by_sid["ListJobPrefixes"]["Resource"] == bucket_arn
    assert by_sid["ReadWriteJobObjects"]["Resource"] == [
        f"{bucket_arn}/checkpoints/*",
        f"{bucket_arn}/datasets/*",
    ]
    assert "PullTrainingImage" not in by_sid  # the kubelet pulls with the node role
    assert by_sid["UseBucketKey"]["Resource"].startswith("arn:aws:kms:")
    for stmt in policy["Statement"]:
        assert "*" not in str(stmt["Resource"]).replace("/*", "")
        assert all(a.split(":")[0] in {"s3", "ecr", "kms"} for a in stmt["Action"])


def test_training_pods_cannot_touch_the_build_context(prod_plan):
    """The nightly CodeBuild build reads build-contexts/ and pushes what it builds: a job with a
    custom command must not be able to plant code there. Evaluated with moto's IAM policy engine."""
    from moto.iam.access_control import IAMPolicy, PermissionResult

    policy = IAMPolicy(json.dumps(policy_of(prod_plan, "training-pods-policy")))
    bucket = f"arn:aws:s3:::{prod_plan.outputs['bucketName']}"

    def allowed(action: str, resource: str) -> bool:
        return policy.is_action_permitted(action, resource) == PermissionResult.PERMITTED

    for action in ("s3:GetObject", "s3:PutObject", "s3:DeleteObject"):
        assert allowed(action, f"{bucket}/checkpoints/llama-1b-fsdp/step_00000100/COMPLETE")
        assert allowed(action, f"{bucket}/datasets/c4-en/train.bin")
        assert not allowed(action, f"{bucket}/build-contexts/{'0' * 64}.zip")
        assert not allowed(action, f"{bucket}/anything-else")
    # Listing, too, only under the job prefixes (moto evaluates no StringLike: read the condition).
    (listing,) = [
        s for s in policy_of(prod_plan, "training-pods-policy")["Statement"] if "s3:ListBucket" in s["Action"]
    ]
    assert listing["Condition"] == {"StringLikeIfExists": {"s3:prefix": ["checkpoints/*", "datasets/*"]}}
