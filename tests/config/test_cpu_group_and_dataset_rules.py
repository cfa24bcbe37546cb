"""CPU node groups (`gpu: false`), a stack with no GPU group, the `datasets` section, and a job's own
`s3://` arguments: what the config accepts and how each refusal names its key."""

from __future__ import annotations

import dataclasses
import json

from support.config_rules import BASE, group, job, problems

from config import parse_config
from config.datasets import DatasetConfig


def parsed(**overrides):
    values = dict(BASE)
    values |= {f"trainstack:{k}": json.dumps(v) for k, v in overrides.items()}
    return parse_config("dev", values)


def cpu_group(**fields) -> dict:
    return group(name="cpu", instanceType="m6i.large", gpu=False, **fields)


def test_a_stack_without_gpu_groups_is_accepted_and_its_jobs_use_the_system_nodes():
    c = parsed(gpuNodeGroups=[], jobs=[job(nodeGroup="system")])
    assert c.gpu_node_groups == ()
    assert c.jobs[0].node_group == "system"


def test_a_cpu_group_is_accepted_and_a_job_may_name_it():
    c = parsed(gpuNodeGroups=[cpu_group(nodeCount=4)], jobs=[job(nodeGroup="cpu", nodes=4)])
    (g,) = c.gpu_node_groups
    assert (g.name, g.gpu, g.node_count) == ("cpu", False, 4)


def test_a_cpu_type_in_a_gpu_group_points_to_gpu_false():
    (msg,) = problems(gpuNodeGroups=[group(instanceType="m6i.large")])
    assert msg.startswith('trainstack:gpuNodeGroups[0].instanceType = "m6i.large": not an NVIDIA GPU')
    assert msg.endswith("or gpu: false for a CPU group")


def test_a_cpu_group_of_a_gpu_type_is_refused():
    (msg,) = problems(gpuNodeGroups=[group(gpu=False)])
    assert msg == (
        'trainstack:gpuNodeGroups[0].instanceType = "g6.xlarge": a gpu: false group\'s nodes would leave '
        "their 1 GPUs idle; allowed: a CPU instance type (m5.large, m6i.large, ...), or gpu: true"
    )


def test_a_cpu_group_takes_no_efa():
    msgs = problems(gpuNodeGroups=[cpu_group(efa=True)])
    assert (
        "trainstack:gpuNodeGroups[0].efa = true: a CPU group trains with gloo over TCP, without EFA; allowed: false or unset"
        in msgs
    )


DATASET = {
    "name": "c4-en",
    "source": "allenai/c4",
    "config": "en",
    "maxTokens": 2_000_000,
    "valTokens": 20_000,
}


def test_a_dataset_reads_with_prepare_data_defaults():
    (d,) = parsed(datasets=[{"name": "c4"}]).datasets
    assert (d.source, d.config, d.tokenizer, d.max_tokens, d.val_tokens, d.timeout_minutes) == (
        "allenai/c4",
        "en",
        "hf-internal-testing/llama-tokenizer",
        1_000_000_000,
        10_000_000,
        240,
    )


def test_dataset_names_ranges_and_duplicates_are_refused():
    msgs = problems(
        datasets=[
            {**DATASET, "name": "C4_EN", "maxTokens": 10},
            {**DATASET, "timeoutMinutes": 1},
            {**DATASET},
        ]
    )
    assert any(m.startswith('trainstack:datasets[0].name = "C4_EN": not a valid dataset name') for m in msgs)
    assert "trainstack:datasets[0].maxTokens = 10: out of range; allowed: 1000-1000000000000" in msgs
    assert "trainstack:datasets[1].timeoutMinutes = 1: out of range; allowed: 10-2880" in msgs
    assert 'trainstack:datasets = "c4-en": name used by 2 datasets; allowed: unique names' in msgs


def test_a_kubeconfig_stack_has_no_bucket_to_prepare_into():
    msgs = problems(
        existingCluster={"kubeconfig": "~/.kube/config", "checkpointHostPath": "/ckpt"},
        image={"builder": "none"},
        gpuNodeGroups=[],
        datasets=[DATASET],
    )
    assert any(
        m.startswith('trainstack:datasets = ["c4-en"]: datasets are prepared into the stack\'s S3 bucket')
        for m in msgs
    )


def test_the_digest_follows_what_decides_the_bytes_only():
    d = DatasetConfig(name="c4-en")
    assert dataclasses.replace(d, timeout_minutes=600).spec.digest == d.spec.digest
    assert dataclasses.replace(d, max_tokens=2).spec.digest != d.spec.digest
    assert dataclasses.replace(d, tokenizer="gpt2").spec.digest != d.spec.digest
    assert d.spec.directory == f"c4-en/{d.spec.digest}/"


def test_a_job_reading_another_bucket_is_refused_naming_the_job():
    (msg,) = problems(datasets=[DATASET], jobs=[job(args=["--data", "s3://someone-else/c4/train.bin"])])
    assert msg == (
        "trainstack:jobs[0].args = \"s3://someone-else/c4/train.bin\": job 'train' reads s3://someone-else, "
        "outside what its pods can reach (the stack's bucket: its datasets and the job's own checkpoints); "
        "allowed: a declared dataset named by jobs[].dataset (datasets: c4-en), /datasets/... with "
        "storage.datasetsMount, or a location of the job's s3Read"
    )


def test_a_kubeconfig_stacks_own_s3_bucket_may_be_named():
    parsed(
        existingCluster={
            "kubeconfig": "~/.kube/config",
            "s3": {"uri": "s3://ours/ckpt", "credentialsSecret": "aws-keys"},
        },
        image={"builder": "none"},
        gpuNodeGroups=[],
        jobs=[job(nodeGroup="system", image="busybox", args=["--data=s3://ours/data/train.bin"])],
    )
