"""The real program under the mock engine, on a template stack file with config overrides."""

from __future__ import annotations

import json

from offline.engine import PlanRun, run_program
from offline.stack_file import read_stack_file
from support.paths import ROOT

# What the account answers about the EKS cluster the `existing` template names (ml-platform).
EXISTING_CLUSTER = {"eks-cluster:ml-platform": {"version": "1.35", "zones": ["us-east-1a", "us-east-1b"]}}


def stack_values(stack: str, **overrides) -> dict[str, str]:
    """The stack file's config, with `trainstack:<key>` overrides given as Python values."""
    values, _ = read_stack_file(ROOT / f"Pulumi.{stack}.yaml")
    for key, value in overrides.items():
        full = key if ":" in key else f"trainstack:{key}"
        values[full] = value if isinstance(value, str) else json.dumps(value)
    return values


def plan(stack: str = "dev", facts: dict | None = None, **overrides) -> PlanRun:
    """The offline plan of `stack` with config overrides; `facts` change what the account answers."""
    return run_program(stack, stack_values(stack, **overrides), facts=facts)


def policy_of(run: PlanRun, name: str) -> dict:
    return json.loads(run.one("aws:iam/rolePolicy:RolePolicy", name).inputs["policy"])


def job_block(text: str, job: str) -> tuple[str, list[str]]:
    """The job's line and the indented lines under it."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"  {job} "))
    below = []
    for line in lines[start + 1 :]:
        if not line.startswith("      "):
            break
        below.append(line.strip())
    return lines[start], below


BREAK_GLASS = "arn:aws:iam::123456789012:role/BreakGlass"


def ci_config(**extra) -> dict:
    """`trainstack:ci` with the repository and the break-glass role it requires."""
    return {"githubRepository": "acme/train", "breakGlassRoleArn": BREAK_GLASS, **extra}


# The `existing` template's PyTorchJob and a TrainJob beside it: Trainer and JobSet come to an attached
# cluster only for a TrainJob (account_checks/operator_decisions.py needed). Neither waits: the group's
# quota admits one at a time.
WITH_TRAINJOB = [
    {"name": "llama-1b-fsdp", "kind": "PyTorchJob", "nodeGroup": "p5", "nodes": 2, "model": "1b", "steps": 2000,
     "wait": "none"},
    {"name": "llama-1b-trainjob", "kind": "TrainJob", "nodeGroup": "p5", "nodes": 2, "model": "1b", "wait": "none"},
]  # fmt: skip
