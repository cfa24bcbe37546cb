"""The job rules for a TrainJob, each refusal naming its key: its name's limit (JobSet's pod names),
what its queue can ever admit (Kueue's PodSet: its JobSet's replicated Job of `nodes` whole-node
pods, nothing on the system nodes), its operator (Trainer) and HyperPod's settings it cannot use."""

from __future__ import annotations

import json

from support.config_rules import BASE, group, job, problems

from config import parse_config
from domain.job_kinds import KINDS
from domain.placement import gpu_placement
from domain.quota import SYSTEM_FLAVOR, job_demand


def trainjob(**fields) -> dict:
    return job(kind="TrainJob", **fields)


def test_a_trainjob_name_leaves_room_for_jobsets_pod_names():
    """JobSet names a pod `<job>-node-0-<index>-<5 characters>`, at most 63 (its webhook refuses
    the JobSet otherwise): 47 leaves room for two-digit indexes."""
    values = {**BASE, "trainstack:gpuNodeGroups": json.dumps([group()])}
    values["trainstack:jobs"] = json.dumps([trainjob(name="t" * 47)])
    assert parse_config("dev", values).jobs[0].name == "t" * 47
    (msg,) = problems(gpuNodeGroups=[group()], jobs=[trainjob(name="t" * 48)])
    assert msg.startswith(f'trainstack:jobs[0].name = "{"t" * 48}": not a valid TrainJob name')
    assert len(f"{'t' * 47}-node-0-99-abcde") == 63


def test_what_its_queue_can_never_admit_is_refused():
    (msg,) = problems(gpuNodeGroups=[group(nodeCount=2)], jobs=[trainjob(nodes=3)])
    assert msg.startswith(
        "trainstack:jobs[0].nodes = 3: job 'train' can never be admitted by queue 'gpu': "
        "node group 'gpu' holds 2 node(s) at most, and the job needs cpu 9 > 6 on flavor trainstack-gpu;"
    )
    # Kueue charges a TrainJob's workers only: no pod of it runs on the system flavor.
    p = gpu_placement("gpu", "g6.xlarge", 1, 0, 4, 16, None)
    assert SYSTEM_FLAVOR not in job_demand(p, 2, "TrainJob") and not KINDS["TrainJob"].system_pods


def test_it_needs_trainer():
    (msg,) = problems(
        gpuNodeGroups=[group()], operators={"trainer": {"enabled": False}}, jobs=[trainjob(wait="none")]
    )
    assert msg.startswith('trainstack:jobs[0].kind = "TrainJob": operators.trainer is turned off')


def test_hyperpods_retries_are_refused_on_it():
    msgs = problems(gpuNodeGroups=[group()], jobs=[trainjob(hyperpod={"maxRetries": 5})])
    assert (
        "trainstack:jobs[0].hyperpod.maxRetries = 5: HyperPod auto-resumes PyTorchJobs only, not a TrainJob"
        in [m.partition(";")[0] for m in msgs]
    )
