"""The existing checkpoint claim, checked where the cluster is read (issue #47): it exists in the
stack's namespace, is Bound, and is ReadWriteMany (or every job that mounts it runs on one node).
Each failure is one sentence, and nothing is registered on the cluster."""

from __future__ import annotations

import pytest
from support.plans import stack_values

from account_checks.checkpoint_claim import CheckpointClaimError
from offline.engine import run_program

HYPERPOD_CLUSTER = {
    "eks-cluster:sagemaker-test-cluster": {"version": "1.33", "zones": ["us-east-1a", "us-east-1b"]}
}
KEY = "trainstack:existingCluster.checkpointClaim = fsx-claim"
ONE_NODE_JOB = {"name": "small", "kind": "PyTorchJob", "nodeGroup": "g5", "nodes": 1, "model": "tiny"}


def claim(namespace="hyperpod-training", phase="Bound", modes=("ReadWriteMany",)) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "fsx-claim", "namespace": namespace},
        "spec": {"accessModes": list(modes)},
        "status": {"phase": phase},
    }


def plan_with(objects: list[dict], registered: list | None = None, **overrides):
    registered = [] if registered is None else registered
    facts = {**HYPERPOD_CLUSTER, "cluster-objects:claims": objects}
    values = stack_values("hyperpod", **overrides)
    run = run_program("hyperpod", values, ["trainstack:hfToken"], facts=facts, registered=registered)
    return run, registered


def problems(objects: list[dict], **overrides) -> list[str]:
    registered: list = []
    with pytest.raises(CheckpointClaimError) as err:
        plan_with(objects, registered, **overrides)
    # Read before any plane: nothing but the AWS provider was registered.
    assert [r.type for r in registered] == ["pulumi:providers:aws"]
    return [line.removeprefix("  - ") for line in str(err.value).splitlines()[1:]]


def test_a_claim_in_another_namespace_is_not_the_stacks():
    assert problems([claim(namespace="training")]) == [
        f"{KEY}: no PersistentVolumeClaim fsx-claim in namespace hyperpod-training, the stack's "
        "(existingCluster.namespace), and a pod mounts only a claim of its own namespace; create it there "
        "(kubectl -n hyperpod-training get pvc)"
    ]


def test_an_unbound_claim_would_leave_the_pods_pending():
    assert problems([claim(phase="Pending")]) == [
        f"{KEY}: the claim is Pending, not Bound, so every pod that mounts it would stay Pending; bind it "
        "to a volume first (kubectl -n hyperpod-training describe pvc fsx-claim)"
    ]


def test_a_read_write_once_claim_serves_no_job_across_nodes():
    assert problems([claim(modes=("ReadWriteOnce",))]) == [
        f"{KEY}: the claim is ReadWriteOnce, mounted on one node at a time, and llama-1b-c4, verl-grpo run "
        "on more than one; use a ReadWriteMany claim (FSx for Lustre), or one node per job"
    ]


def test_a_read_write_once_claim_serves_one_node_jobs():
    run, _ = plan_with([claim(modes=("ReadWriteOnce",))], jobs=[ONE_NODE_JOB])
    assert "small" in run.outputs["jobs"]


def test_the_offline_cluster_holds_the_claim_a_stack_names_unless_a_fact_lists_claims():
    run, _ = plan_with([])
    assert set(run.outputs["jobs"]) == {"llama-1b-c4", "verl-grpo"}
