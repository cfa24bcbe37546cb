"""Shared helpers: run the real program under the mock engine with a stack file plus overrides."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from offline.engine import PlanRun, run_program  # noqa: E402
from offline.plan import read_stack_file  # noqa: E402


def shared_dir(kind: str, env_var: str) -> Path:
    """An upstream folder of ../shared (charts, crds), or the path in `env_var`; skip without it.
    Upstream files are read from there, never copied into the project."""
    import os

    path = Path(os.environ.get(env_var) or ROOT.parent / "shared" / kind)
    if not path.is_dir():
        pytest.skip(f"upstream {kind} not found at {path} (set {env_var} to a copy of shared/{kind})")
    return path


def stack_values(stack: str, **overrides) -> dict[str, str]:
    """The stack file's config, with `trainstack:<key>` overrides given as Python values."""
    values, _ = read_stack_file(ROOT / f"Pulumi.{stack}.yaml")
    for key, value in overrides.items():
        full = key if ":" in key else f"trainstack:{key}"
        values[full] = value if isinstance(value, str) else json.dumps(value)
    return values


def plan(stack: str = "dev", **overrides) -> PlanRun:
    return run_program(stack, stack_values(stack, **overrides))


def policy_of(run: PlanRun, name: str) -> dict:
    return json.loads(run.one("aws:iam/rolePolicy:RolePolicy", name).inputs["policy"])


@pytest.fixture(scope="session")
def dev_plan() -> PlanRun:
    return plan("dev")


@pytest.fixture(scope="session")
def prod_plan() -> PlanRun:
    return plan("prod")
