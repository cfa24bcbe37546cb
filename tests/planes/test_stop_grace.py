"""A default-trainer group's pods get the grace their stop takes (domain/stop_grace.py), not a fixed
ten minutes: a gang's restart waits for its old pods to go, so the grace a survivor does not need is
time the whole gang idles. torchrun's own wait for its workers stays inside it."""

from __future__ import annotations

import json

from support.manifests import worker_pod
from support.plans import plan, stack_values

from components.jobs.pods import TERMINATION_GRACE_SECONDS, launcher_shutdown_seconds
from domain.goodput import CheckpointPath
from domain.model_facts import MODEL_SHAPES
from domain.stop_grace import AGREEMENT_WAIT_S, CEILING_S, LAUNCHER_EXIT_S, TRACKER_CLOSE_S, stop_grace_s
from offline.plan import manifest_of
from offline.scheduling import JOB_TYPES, referenced_objects

RUNTIME = "kubernetes:trainer.kubeflow.org/v1alpha1:ClusterTrainingRuntime"


def pods_of(run) -> dict[str, dict]:
    objects = referenced_objects(run)
    return {
        manifest_of(r)[1]["metadata"]["name"]: worker_pod(manifest_of(r)[1], objects)
        for t in JOB_TYPES
        for r in run.by_type(t)
    }


def test_the_prod_1b_gang_stops_within_the_wait_its_timeout_and_its_save():
    """p5, 1b, 16 ranks: the agreement (10 steps of the modeled step, under the 60 s floor), a dead
    peer's collective timeout (100 s), the save behind the one in flight (a few seconds: 7.5 GB a
    node to NVMe and S3), the tracker's close (60 s) and torchrun's exit (30 s), to the next 10 s:
    260 s, where every job had 600."""
    run = plan("prod")
    fsdp = pods_of(run)["llama-1b-fsdp"]
    assert fsdp["terminationGracePeriodSeconds"] == 260
    (container,) = fsdp["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] == str(launcher_shutdown_seconds(260)) == "230"
    assert AGREEMENT_WAIT_S + 100 + TRACKER_CLOSE_S + LAUNCHER_EXIT_S < 260 < CEILING_S


def test_a_longer_collective_timeout_a_slower_agreement_or_save_lengthens_it_within_its_bound():
    shape, path = MODEL_SHAPES["1b"], CheckpointPath(write_gb_per_s=4.0, network_gbps=3200)
    assert stop_grace_s(shape, 16, 8, path, 100) == 260
    assert stop_grace_s(shape, 16, 8, path, 300) == 460
    # 10 steps of 20 s (a large model on a slow GPU) before the ranks hear the SIGTERM together.
    assert stop_grace_s(shape, 16, 8, path, 100, agreement_s=200) == 400
    slow = CheckpointPath(write_gb_per_s=0.01, network_gbps=1)  # a save of minutes
    assert stop_grace_s(shape, 1, 1, slow, 100) == CEILING_S
    tiny = MODEL_SHAPES["tiny"]
    assert stop_grace_s(tiny, 1, 1, path, 0) == 160  # the fixed terms: 60 + 60 + 30 s, rounded up


def test_a_group_with_a_job_the_model_does_not_know_keeps_the_ceiling():
    jobs = [j | {"wait": "none"} for j in json.loads(stack_values("dev")["trainstack:jobs"])]
    command = {
        "name": "own",
        "kind": "PyTorchJob",
        "nodeGroup": "gpu",
        "command": ["python", "smoke_test.py"],
    }
    pods = pods_of(plan("dev", jobs=[*jobs, command | {"wait": "none"}]))
    assert {name: p["terminationGracePeriodSeconds"] for name, p in pods.items()} == {
        "llama-tiny": TERMINATION_GRACE_SECONDS,
        "own": TERMINATION_GRACE_SECONDS,
    }
