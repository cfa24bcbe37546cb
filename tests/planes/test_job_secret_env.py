"""`jobs[].secretEnv` reaches the job through its Secret, and only from a secret `jobs` key."""

from __future__ import annotations

import json

import pytest
from support.jobs import PYTORCHJOB, body
from support.plans import stack_values

from config.schema import ConfigError
from offline.engine import run_program

JOB = {"name": "fsdp", "kind": "PyTorchJob", "nodeGroup": "gpu", "env": {"NCCL_DEBUG": "INFO"}}


def test_secret_env_goes_to_the_jobs_secret_and_never_in_clear():
    values = stack_values("dev", jobs=[{**JOB, "secretEnv": {"WANDB_API_KEY": "wandb-offline-secret"}}])
    run = run_program("dev", values, ["trainstack:jobs"])
    (job,) = [r for r in run.by_type(PYTORCHJOB) if r.name == "job-fsdp"]
    (container,) = body(job)["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    for name in ("WANDB_API_KEY", "NCCL_DEBUG"):
        assert env[name]["valueFrom"] == {"secretKeyRef": {"name": "fsdp-env", "key": name}}
    assert run.one("kubernetes:core/v1:Secret", "fsdp-env").revealed["stringData"] == {
        "NCCL_DEBUG": "INFO",
        "WANDB_API_KEY": "wandb-offline-secret",
    }
    assert "wandb-offline-secret" not in json.dumps([r.inputs for r in run.resources], default=str)


def test_plain_jobs_refuse_secret_env_and_secret_looking_env_before_any_resource():
    for job in ({**JOB, "secretEnv": {"WANDB_API_KEY": "k"}}, {**JOB, "env": {"WANDB_API_KEY": "k"}}):
        with pytest.raises(ConfigError) as err:
            run_program("dev", stack_values("dev", jobs=[job]))
        assert "trainstack:jobs[0]" in str(err.value) and "WANDB_API_KEY" in str(err.value)
