"""The config refuses a default-trainer job whose model cannot train on its group's GPUs, or whose
checkpoint staging a node cannot pin, and says what would fit (domain/memory_fit.py models both;
tests/domain/test_memory_fit.py works the A10G figures by hand)."""

from __future__ import annotations

import json

import pytest
from support.config_rules import BASE, group, job, problems

from config import parse_config


def accepted(groups: list[dict], jobs: list[dict]) -> None:
    """A dev stack of BASE, the groups and the jobs parses: no problem is found."""
    values = {"trainstack:gpuNodeGroups": json.dumps(groups), "trainstack:jobs": json.dumps(jobs)}
    parse_config("dev", {**BASE, **values})


def test_1b_at_the_default_batch_is_refused_on_a_g5_xlarge():
    gpu, host = problems(gpuNodeGroups=[group(instanceType="g5.xlarge")], jobs=[job(model="1b")])
    assert gpu == (
        "trainstack:jobs[0].model = \"1b\": job 'train' cannot train on node group 'gpu': the 1b model at "
        "batch 8 x 2048 tokens over 1 GPU(s) needs ~55.2 GiB per GPU (sharded fp32 state 16.5, gathered "
        "bf16 parameters and gradients 1.2, activations 35.6, CUDA allowance 2.0), more than the 22.4 GiB "
        "of each A10G on g5.xlarge; allowed: model: small (fits at --batch-size 8), or a node group of "
        "p5.4xlarge (the cheapest type the job fits as it is)"
    )
    assert host.startswith(
        "trainstack:jobs[0].model = \"1b\": job 'train' cannot train on node group 'gpu': async "
        "checkpoints pin each rank's shard of the fp32 parameters and Adam moments in host memory: "
        "~12.3 GiB on each g5.xlarge node, more than half its 16 GiB"
    )
    assert host.endswith("; allowed: 2 or more nodes, a smaller model, or an instance type with more memory")


def test_four_a10g_take_the_1b_model_at_the_batch_that_fits():
    g5_12 = [group(instanceType="g5.12xlarge")]
    (msg,) = problems(gpuNodeGroups=g5_12, jobs=[job(model="1b")])
    assert "over 4 GPU(s) needs ~42.9 GiB per GPU" in msg
    assert msg.endswith(
        "; allowed: --batch-size 2 or less in args (the most that leaves 10% of the GPU free)"
    )
    for args in (["--batch-size", "2"], ["--batch-size=3"], ["--batch-size", "8", "--batch-size", "2"]):
        accepted(g5_12, [job(model="1b", args=args)])


def test_a_shorter_sequence_is_counted():
    g5_12 = [group(instanceType="g5.12xlarge")]
    (msg,) = problems(gpuNodeGroups=g5_12, jobs=[job(model="1b", args=["--seq-len", "1024"])])
    assert "the 1b model at batch 8 x 1024 tokens over 4 GPU(s)" in msg
    assert msg.endswith("allowed: --batch-size 5 or less in args (the most that leaves 10% of the GPU free)")


@pytest.mark.parametrize(
    "fields",
    [
        {"command": ["python", "-m", "trainer.train"]},  # not the default trainer: nothing to size
        {"kind": "RayCluster", "wait": "none"},  # runs no trainer until a job is submitted
        {"nodeGroup": "system"},  # CPU (gloo)
    ],
)
def test_only_jobs_that_run_the_trainer_on_a_gpu_are_sized(fields):
    g5 = [group(instanceType="g5.xlarge")]
    assert len(problems(gpuNodeGroups=g5, jobs=[job(model="1b")])) == 2
    accepted(g5, [job(model="1b", **fields)])
