"""The rules of `trainstack:jobs`, each refusal naming its key: names, kinds, node groups, what a
job's queue can ever admit, environment and secrets, VERL's fit."""

from __future__ import annotations

import json

import pytest
from support.config_rules import config_problems, group, job, problems
from support.jobs import HF_TOKEN, PYTORCHJOB
from support.plans import plan, stack_values
from support.verl import GRPO, L4, P5

from config import parse_config
from config.schema import ConfigError
from offline.engine import run_program


def test_ray_job_names_are_shorter():
    name = "r" * 48
    (msg,) = problems(gpuNodeGroups=[group()], jobs=[job(name=name, kind="RayJob")])
    assert msg.startswith(f'trainstack:jobs[0].name = "{name}": not a valid RayJob name')
    assert "at most 47 characters" in msg


def test_job_on_unknown_node_group():
    (msg,) = problems(gpuNodeGroups=[group()], jobs=[job(nodeGroup="gpus")])
    assert msg == 'trainstack:jobs[0].nodeGroup = "gpus": no node group has that name; allowed: gpu, system'


def test_job_asking_for_more_nodes_than_its_group():
    (msg,) = problems(gpuNodeGroups=[group(nodeCount=2)], jobs=[job(nodes=3)])
    assert msg.startswith(
        "trainstack:jobs[0].nodes = 3: job 'train' can never be admitted by queue 'gpu': "
        "node group 'gpu' holds 2 node(s) at most, and the job needs cpu 9 > 6 on flavor trainstack-gpu;"
    )
    assert msg.endswith("nvidia.com/gpu 3 > 2 on flavor trainstack-gpu; allowed: 1-2, or a larger node group")


def test_duplicate_job_names():
    msgs = problems(gpuNodeGroups=[group()], jobs=[job(wait="none"), job(wait="none")])
    assert msgs == ['trainstack:jobs = "train": name used by 2 jobs; allowed: unique names']


def test_bad_kind():
    (msg,) = problems(gpuNodeGroups=[group()], jobs=[job(kind="TFJob")])
    assert (
        msg
        == 'trainstack:jobs[0].kind = "TFJob": not a known value; allowed: PyTorchJob | RayJob | RayCluster | TrainJob'
    )


def test_ray_cluster_never_succeeds():
    (msg,) = problems(gpuNodeGroups=[group()], jobs=[job(kind="RayCluster", wait="succeeded")])
    assert msg == (
        'trainstack:jobs[0].wait = "succeeded": `pulumi up` cannot watch a RayCluster reach it; '
        "allowed: none | admitted | running"
    )


def test_a_rayjob_cannot_wait_for_admission():
    """KubeRay serializes a resumed RayJob's `suspend` (a plain bool, omitempty: ray-operator
    apis/ray/v1/rayjob_types.go) as no field, so `{.spec.suspend}=false` would never match and
    `pulumi up` would wait until its timeout."""
    (msg,) = problems(gpuNodeGroups=[group()], jobs=[job(kind="RayJob", wait="admitted")])
    assert msg == (
        'trainstack:jobs[0].wait = "admitted": `pulumi up` cannot watch a RayJob reach it; '
        "allowed: none | running | succeeded"
    )


def test_env_names_are_checked():
    (msg,) = problems(gpuNodeGroups=[group()], jobs=[job(env={"1BAD": "x"})])
    assert msg.startswith('trainstack:jobs[0].env.1BAD = "x": not a valid environment variable name')


def test_a_ray_job_on_the_system_group_counts_its_head():
    """The system queue holds its CPU jobs' pods and one RayJob's head and submitter: Kueue counts
    them too (a RayCluster has no submitter)."""
    (msg,) = problems(
        jobs=[
            job(kind="RayJob", nodeGroup="system", nodes=2, wait="none"),
            job(name="two-heads", kind="RayCluster", nodeGroup="system", nodes=3, wait="none"),
        ]
    )
    assert msg.startswith(
        "trainstack:jobs[1].nodes = 3: job 'two-heads' can never be admitted by queue 'system'"
    )
    assert "cpu 3500m > 3 on flavor trainstack-system; memory 9Gi > 8Gi" in msg


def test_jobs_that_cannot_run_are_config_errors():
    (msg,) = config_problems(jobs=[{"name": "big", "kind": "PyTorchJob", "nodeGroup": "gpu", "nodes": 2}])
    assert msg.startswith(
        "trainstack:jobs[0].nodes = 2: job 'big' can never be admitted by queue 'gpu': "
        "node group 'gpu' holds 1 node(s) at most, and the job needs cpu 6 > 3 on flavor trainstack-gpu;"
    )
    assert msg.endswith("nvidia.com/gpu 2 > 1 on flavor trainstack-gpu; allowed: 1-1, or a larger node group")
    (msg,) = config_problems(jobs=[{"name": "r" * 48, "kind": "RayJob", "nodeGroup": "gpu"}])
    assert "at most 47 characters" in msg
    (msg,) = config_problems(
        operators={"kuberay": {"enabled": False}},
        jobs=[{"name": "r", "kind": "RayCluster", "nodeGroup": "gpu"}],
    )
    assert msg.startswith('trainstack:jobs[0].kind = "RayCluster": operators.kuberay is turned off')
    (msg,) = config_problems(jobs=[{"name": "x", "kind": "PyTorchJob", "nodeGroup": "system", "nodes": 3}])
    assert "the system node group holds 2 node(s) at most" in msg
    # Two jobs that cannot run at once are fine: Kueue admits one whole, then the other (neither
    # may be waited for: test_no_job_waits_in_a_queue_that_cannot_hold_its_jobs_together).
    both = [{"name": n, "kind": "PyTorchJob", "nodeGroup": "gpu", "wait": "none"} for n in ("a", "b")]
    assert len(plan("dev", jobs=both).by_type(PYTORCHJOB)) == 2


def test_hf_token_must_be_a_secret():
    values = {**stack_values("dev"), "trainstack:hfToken": HF_TOKEN}
    with pytest.raises(ConfigError) as err:
        run_program("dev", values)
    assert "trainstack:hfToken" in str(err.value) and HF_TOKEN not in str(err.value)


@pytest.mark.parametrize(
    ("job", "key", "reason"),
    [
        ({**GRPO, "kind": "PyTorchJob"}, "trainstack:jobs[0].kind", "VERL runs on Ray"),
        (
            {**GRPO, "verl": {"model": "Qwen/Qwen2.5-7B-Instruct"}},
            "trainstack:jobs[0].nodeGroup",
            "cannot hold VERL job grpo",
        ),
        ({**GRPO, "nodeGroup": "system"}, "trainstack:jobs[0].nodeGroup", "VERL needs GPU nodes"),
        (
            {**GRPO, "verl": {"model": "my-org/policy"}},
            "trainstack:jobs[0].verl.modelBillions",
            "not in its name",
        ),
        (
            {**GRPO, "nodeGroup": "p5", "verl": {"tensorParallel": 3}},
            "trainstack:jobs[0].nodeGroup",
            "does not divide",
        ),
        ({**GRPO, "verl": {"rollouts": 0}}, "trainstack:jobs[0].verl.rollouts", ""),
        ({**GRPO, "command": ["python", "x.py"]}, "trainstack:jobs[0].command", "VERL's trainer"),
    ],
)
def test_a_group_that_cannot_hold_a_verl_job_is_refused_with_its_key(job, key, reason):
    with pytest.raises(ConfigError) as err:
        plan("dev", gpuNodeGroups=[L4, P5], jobs=[job])
    assert key in str(err.value) and reason in str(err.value), str(err.value)


def accepted(**overrides) -> None:
    values = {"aws:region": "us-east-1", **{f"trainstack:{k}": json.dumps(v) for k, v in overrides.items()}}
    parse_config("dev", values)


def test_no_job_waits_in_a_queue_that_cannot_hold_its_jobs_together():
    """Kueue admits such jobs one after another in an order it picks (priority, creation time, uid):
    a wait for admission or running could wait for another job to finish first, past its timeout.
    Seen on the real Kueue (tests/cluster/test_hyperpod_stack.py: the RayJob admitted first)."""
    both = [job(name="a", nodes=2, wait="running"), job(name="b", kind="RayJob", nodes=1, wait="none")]
    (msg,) = problems(gpuNodeGroups=[group(nodeCount=2)], jobs=both)
    assert msg == (
        "trainstack:jobs[0].wait = \"running\": jobs 'a' (2 node(s)), 'b' (1 node(s)) cannot all be admitted "
        "by queue 'gpu' at once (nvidia.com/gpu 3 > 2 on flavor trainstack-gpu; cpu 9 > 6 on flavor "
        "trainstack-gpu), so Kueue admits them one after another in an order it picks, and `pulumi up` "
        "could wait for another of them to finish first; allowed: none (then `trainstack status` shows the "
        "queue), or nodes and node groups that let queue 'gpu' hold its jobs together"
    )
    # Together they fit: each may wait.
    accepted(gpuNodeGroups=[group(nodeCount=3)], jobs=both)
    # A wait for success counts the other's run in its timeout, unless the other never ends.
    finite = [job(name="a", nodes=2, wait="succeeded"), job(name="b", nodes=1, wait="succeeded")]
    accepted(gpuNodeGroups=[group(nodeCount=2)], jobs=finite)
    endless = [
        job(name="a", nodes=2, wait="succeeded"),
        job(name="b", kind="RayCluster", nodes=1, wait="none"),
    ]
    (msg,) = problems(gpuNodeGroups=[group(nodeCount=2)], jobs=endless)
    assert msg.startswith("trainstack:jobs[0].wait = \"succeeded\": jobs 'a' (2 node(s)), 'b' (1 node(s))")
