"""Jobs on a cluster trainstack did not create: checkpoints on the user's claim for every job kind, and
HyperPod's placement and auto-resume on an `ml.` group only (the template's own plan:
tests/offline/test_hyperpod_template.py)."""

from __future__ import annotations

import json

import pytest
from support.crds import crd_errors
from support.manifests import worker_container, worker_pod
from support.plans import EXISTING_CLUSTER as CLUSTER
from support.plans import plan, stack_values

from components.jobs.hyperpod import affinity as hyperpod_affinity
from config.jobs import HyperPodJobConfig
from conventions import HYPERPOD_AUTO_RESUME_ANNOTATION, HYPERPOD_DEEP_HEALTH_LABEL, HYPERPOD_HEALTH_LABEL
from offline.plan import manifest_of
from offline.scheduling import JOB_TYPES, referenced_objects

P5 = {
    "name": "p5",
    "instanceType": "p5.48xlarge",
    "nodeCount": 2,
    "efa": True,
    "nodeSelector": {"node.kubernetes.io/instance-type": "p5.48xlarge"},
}
EVERY_KIND = [
    {"name": "fsdp", "kind": "PyTorchJob", "nodeGroup": "p5", "nodes": 2, "model": "1b", "wait": "none"},
    {"name": "tj", "kind": "TrainJob", "nodeGroup": "p5", "nodes": 2, "model": "1b", "wait": "none"},
    {"name": "ray-train", "kind": "RayJob", "nodeGroup": "p5", "wait": "none"},
    {"name": "ray-box", "kind": "RayCluster", "nodeGroup": "p5", "wait": "none"},
    {"name": "grpo", "kind": "RayJob", "nodeGroup": "p5", "verl": {"algorithm": "grpo"}, "wait": "none"},
]


def jobs_of(run) -> dict[str, dict]:
    found = [manifest_of(r)[1] for t in JOB_TYPES for r in run.by_type(t)]
    return {m["metadata"]["name"]: m for m in found}


def checkpoint_volume(m: dict, run=None) -> tuple[dict, dict]:
    """The pod's checkpoint volume and mount (a TrainJob's from its runtime in `run` and its patch)."""
    pod = worker_pod(m, referenced_objects(run) if run else {})
    (volume,) = [v for v in pod["volumes"] if v["name"] == "checkpoints"]
    (mount,) = [v for v in pod["containers"][0]["volumeMounts"] if v["name"] == "checkpoints"]
    return volume, mount


@pytest.fixture(scope="module")
def claim_plan():
    existing = {
        "eksClusterName": "ml-platform",
        "checkpointClaim": "fsx-claim",
        "systemNodes": {"nodeSelector": {"eks.amazonaws.com/nodegroup": "system"}},
    }
    return plan("existing", facts=CLUSTER, existingCluster=existing, gpuNodeGroups=[P5], jobs=EVERY_KIND)


def test_every_job_kind_keeps_checkpoints_in_its_own_directory_of_the_claim(claim_plan):
    jobs = jobs_of(claim_plan)
    assert set(jobs) == {"fsdp", "tj", "ray-train", "ray-box", "grpo"}
    for name, m in jobs.items():
        assert crd_errors(m) == [], name
        volume, mount = checkpoint_volume(m, claim_plan)
        assert volume["persistentVolumeClaim"] == {"claimName": "fsx-claim"}, name
        assert mount == {"name": "checkpoints", "mountPath": "/checkpoints", "subPath": f"checkpoints/{name}"}
    # On the claim, the default trainer uploads nothing to S3: the file system is the copy.
    assert "--s3-checkpoints" not in worker_container(jobs["fsdp"])["args"]
    assert "--s3-checkpoints" not in jobs["ray-train"]["spec"]["entrypoint"]


def test_without_a_claim_an_existing_eks_stack_keeps_the_bucket_and_emptydir(existing_plan_jobs):
    volume, mount = checkpoint_volume(existing_plan_jobs["llama-1b-fsdp"])
    assert volume == {"name": "checkpoints", "emptyDir": {}} and "subPath" not in mount
    assert "--s3-checkpoints" in worker_container(existing_plan_jobs["llama-1b-fsdp"])["args"]


@pytest.fixture(scope="module")
def existing_plan_jobs():
    return jobs_of(plan("existing", facts=CLUSTER))


def test_a_kubeconfig_stack_mounts_a_claim_instead_of_a_node_path():
    existing = json.loads(stack_values("local")["trainstack:existingCluster"])
    existing = {k: v for k, v in existing.items() if k != "checkpointHostPath"} | {
        "checkpointClaim": "shared"
    }
    run = plan("local", existingCluster=existing)
    jobs = jobs_of(run)
    assert {m["kind"] for m in jobs.values()} == {"TrainJob", "RayJob"}
    for name, m in jobs.items():
        volume, mount = checkpoint_volume(m, run)
        assert volume["persistentVolumeClaim"] == {"claimName": "shared"}, name
        assert mount["subPath"] == f"checkpoints/{name}"


def test_jobs_on_ec2_groups_carry_nothing_of_hyperpod(claim_plan):
    for name, m in jobs_of(claim_plan).items():
        assert "affinity" not in worker_pod(m, referenced_objects(claim_plan)), name
        assert HYPERPOD_AUTO_RESUME_ANNOTATION not in m["metadata"]["annotations"], name
    fsdp = jobs_of(claim_plan)["fsdp"]
    assert fsdp["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] == "ExitCode"
    assert "runPolicy" not in fsdp["spec"]


def test_deep_health_required_moves_passed_into_the_required_term():
    schedulable = {"key": HYPERPOD_HEALTH_LABEL, "operator": "In", "values": ["Schedulable"]}
    passed = {"key": HYPERPOD_DEEP_HEALTH_LABEL, "operator": "In", "values": ["Passed"]}
    required = hyperpod_affinity(HyperPodJobConfig(deep_health_check="required"))["nodeAffinity"]
    assert required == {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [schedulable, passed]}]
        }
    }
    preferred = hyperpod_affinity(HyperPodJobConfig())["nodeAffinity"]
    assert preferred["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
        {"matchExpressions": [schedulable]}
    ]
    assert preferred["preferredDuringSchedulingIgnoredDuringExecution"][0]["preference"] == {
        "matchExpressions": [passed]
    }
