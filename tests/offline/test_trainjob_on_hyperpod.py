"""A TrainJob on a HyperPod group: placed by HyperPod's health labels like a PyTorchJob, but without
HyperPod's auto-resume (its controller watches PyTorchJobs only), which the plan warns of and the
job's retry sentence says; the template itself keeps PyTorchJob and warns of nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.cluster_objects import as_facts, hyperpod_dependencies
from support.jobs import body, job
from support.paths import ROOT

from config import parse_config
from config.job_inputs import auto_resume_warnings
from conventions import HYPERPOD_AUTO_RESUME_ANNOTATION, HYPERPOD_HEALTH_LABEL
from offline.engine import run_program
from offline.plan import summary
from offline.stack_file import read_stack_file

CLUSTER = {"eks-cluster:sagemaker-test-cluster": {"version": "1.33", "zones": ["us-east-1a", "us-east-1b"]}}
WARNING = (
    "WARNING: trainstack:jobs[0].kind: job 'llama-1b-c4' is a TrainJob on HyperPod group 'g5' (ml.g5.8xlarge): "
    "it gives up HyperPod's auto-resume, which watches PyTorchJobs only; after a node fault JobSet restarts "
    "its gang instead, within jobs[].maxRecreations. `kind: PyTorchJob` keeps auto-resume"
)


@pytest.fixture(scope="module")
def stack():
    values, secret_keys = read_stack_file(ROOT / "Pulumi.hyperpod.yaml")
    template = parse_config("hyperpod", values, frozenset(secret_keys))
    jobs = json.loads(values["trainstack:jobs"])
    jobs[0] = {k: v for k, v in jobs[0].items() if k != "hyperpod"} | {"kind": "TrainJob"}
    values |= {
        "trainstack:jobs": json.dumps(jobs),
        "trainstack:operators": json.dumps({"trainer": {"enabled": True}}),
    }
    facts = {
        **CLUSTER,
        **as_facts("sagemaker-test-cluster", hyperpod_dependencies()),
    }
    run = run_program("hyperpod", values, secret_keys, facts=facts)
    return run, parse_config("hyperpod", values, frozenset(secret_keys)), template


def test_the_plan_and_the_jobs_sentence_say_it_gives_up_auto_resume(stack, tmp_path: Path):
    run, cfg, template = stack
    assert WARNING in summary(run, cfg, 0, tmp_path).splitlines()
    assert auto_resume_warnings(template.jobs, template.gpu_node_groups) == []  # PyTorchJob, RayJob
    assert run.outputs["jobs"]["llama-1b-c4"]["retries"].endswith(
        "HyperPod's auto-resume does not watch TrainJobs"
    )


def test_it_is_placed_by_hyperpods_health_labels_without_auto_resume(stack):
    run, _, _ = stack
    m = body(job(run, "llama-1b-c4"))
    assert HYPERPOD_AUTO_RESUME_ANNOTATION not in m["metadata"].get("annotations", {})
    (patch,) = m["spec"]["runtimePatches"]
    pod = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"][
        "template"
    ]
    required = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert required["nodeSelectorTerms"][0]["matchExpressions"][0]["key"] == HYPERPOD_HEALTH_LABEL
    # Its directory on the FSx claim, through the runtime patch.
    assert pod["spec"]["containers"] == [
        {
            "name": "node",
            "volumeMounts": [
                {"name": "checkpoints", "mountPath": "/checkpoints", "subPath": "checkpoints/llama-1b-c4"}
            ],
        }
    ]
