"""The stack outputs are a contract: the program writes them, `trainstack` and the offline plan read
them through `stack_outputs.py`. Every template's outputs hold to its typed shape."""

from __future__ import annotations

import pytest
from support.plans import plan

from stack_outputs import GpuNodeGroup, JobSummary, Operators, StackOutputs


def keys_hold(value: dict, shape: type) -> list[str]:
    """What `value` lacks of the shape's required keys, and what it has beyond its keys."""
    known = set(shape.__annotations__)
    return [f"missing {k}" for k in sorted(shape.__required_keys__ - set(value))] + [
        f"unknown {k}" for k in sorted(set(value) - known)
    ]


@pytest.fixture(scope="module", params=["dev", "prod", "existing", "local"])
def outputs(request, dev_plan, prod_plan) -> tuple[str, dict]:
    cluster = {"eks-cluster:ml-platform": {"version": "1.35", "zones": ["us-east-1a", "us-east-1b"]}}
    runs = {
        "dev": lambda: dev_plan,
        "prod": lambda: prod_plan,
        "existing": lambda: plan("existing", facts=cluster),
    }
    run = runs.get(request.param, lambda: plan(request.param))()
    return request.param, run.outputs


def test_every_output_is_in_the_contract(outputs):
    stack, found = outputs
    assert keys_hold(found, StackOutputs) == [], stack
    assert {"clusterName", "trainingNamespace", "gpuNodeGroups", "operators", "jobs"} <= set(found)


def test_each_group_job_and_operator_entry_has_its_shape(outputs):
    stack, found = outputs
    assert found["jobs"], stack  # every template launches a job (kind's runs on CPU nodes only)
    for name, group in found["gpuNodeGroups"].items():
        assert keys_hold(group, GpuNodeGroup) == [], (stack, name)
        assert ("nodeGroupName" in group) != ("nodeSelector" in group), (stack, name)  # one way to find it
    for name, job in found["jobs"].items():
        assert keys_hold(job, JobSummary) == [], (stack, name)
    assert keys_hold(found["operators"], Operators) == [], stack


def test_the_shape_check_sees_a_renamed_key():
    """The rule itself: a writer that renames a key breaks the contract."""
    entry = {"instanceType": "p5.48xlarge", "nodes": 2, "minNodes": 0, "autoscaled": True, "gpusPerNode": 8}
    assert keys_hold({**entry, "efaPerNode": 32}, GpuNodeGroup) == [
        "missing efaInterfacesPerNode",
        "unknown efaPerNode",
    ]
