"""A dev stack with every job kind on every kind of node group (the `kinds` plan), and reading its
jobs: shared by the job tests (tests/planes/test_job_*.py) and the job rules (tests/config)."""

from __future__ import annotations

from typing import Any

from offline.engine import PlanRun, run_program
from offline.plan import manifest_of
from support.plans import stack_values

PYTORCHJOB = "kubernetes:kubeflow.org/v1:PyTorchJob"
TRAINJOB = "kubernetes:trainer.kubeflow.org/v1alpha1:TrainJob"
RAYJOB = "kubernetes:ray.io/v1:RayJob"
RAYCLUSTER = "kubernetes:ray.io/v1:RayCluster"
HF_TOKEN = "hf_offlineSECRETtoken"
SECRET_ENV = "wandb-offline-secret"


def groups() -> list[dict]:
    return [
        {"name": "gpu", "instanceType": "g6.xlarge", "nodeCount": 2},  # its RayJob and RayCluster together
        {"name": "p5", "instanceType": "p5.48xlarge", "nodeCount": 2, "efa": True},
        {"name": "p4d", "instanceType": "p4d.24xlarge", "nodeCount": 2, "efa": True, "preflight": False},
    ]


def all_kinds_jobs() -> list[dict]:
    return [
        {"name": "fsdp", "kind": "PyTorchJob", "nodeGroup": "p5", "nodes": 2, "model": "1b", "steps": 500},
        {"name": "a100", "kind": "PyTorchJob", "nodeGroup": "p4d", "nodes": 2, "wait": "succeeded"},
        {"name": "ray-l4", "kind": "RayJob", "nodeGroup": "gpu", "env": {"WANDB_API_KEY": SECRET_ENV}},
        {"name": "ray-box", "kind": "RayCluster", "nodeGroup": "gpu", "wait": "none"},
        {"name": "cpu-smoke", "kind": "PyTorchJob", "nodeGroup": "system", "nodes": 2, "steps": 20},
        {"name": "trainer-v2", "kind": "TrainJob", "nodeGroup": "p4d", "nodes": 2, "wait": "none"},
    ]


def kinds_plan() -> PlanRun:
    """The plan of `all_kinds_jobs` on `groups`, with a Hugging Face token (tests/planes/conftest.py
    makes it a fixture)."""
    values = stack_values("dev", gpuNodeGroups=groups(), jobs=all_kinds_jobs())
    values["trainstack:hfToken"] = HF_TOKEN
    # `jobs` set with a nested secure value is a secret key as a whole, as in the Pulumi CLI.
    return run_program("dev", values, ["trainstack:hfToken", "trainstack:jobs"])


def job(run, name: str):
    (found,) = [r for r in run.resources if r.name == f"job-{name}" and r.custom]
    return found


def body(reg) -> dict[str, Any]:
    return manifest_of(reg)[1]
