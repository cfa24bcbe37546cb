"""A price for every run (issue #47): SageMaker's price for a HyperPod (`ml.`) type, a group's own
`hourlyUsd` for a negotiated price or a type the catalog has no price for, and where neither is
known the plan, the job lines and `trainstack estimate` name the key that gives one."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
from support.config_rules import group, problems
from support.plans import job_block, stack_values

from config import parse_config
from offline.cost import hourly_cost, job_cost
from offline.engine import run_program
from offline.plan import summary

HYPERPOD_CLUSTER = {
    "eks-cluster:sagemaker-test-cluster": {"version": "1.33", "zones": ["us-east-1a", "us-east-1b"]}
}
P5EN = {
    "name": "g5",  # the template's jobs name this group
    "instanceType": "ml.p5en.48xlarge",
    "nodeCount": 4,
    "nodeSelector": {"node.kubernetes.io/instance-type": "ml.p5en.48xlarge"},
}


def hyperpod_text(**overrides) -> tuple[str, object]:
    values, secret_keys = stack_values("hyperpod", **overrides), ["trainstack:hfToken"]
    run = run_program("hyperpod", values, secret_keys, facts=HYPERPOD_CLUSTER)
    cfg = parse_config("hyperpod", values, frozenset(secret_keys))
    return summary(run, cfg, 0, Path("build/plan/hyperpod")), (run, cfg)


def test_a_hyperpod_job_costs_its_nodes_at_sagemakers_price():
    text, (run, cfg) = hyperpod_text()
    line, below = job_block(text, "llama-1b-c4")
    # 4 x ml.g5.8xlarge at SageMaker's $3.06 an hour.
    assert "on the cluster owner's nodes (4 node(s), $12.24/h while it runs)" in line
    assert "of the cluster owner's node time (4 node(s) x " in below[-1]
    assert run.outputs["jobs"]["llama-1b-c4"]["hourlyUsd"] == pytest.approx(12.24)
    cost = job_cost(cfg, next(j for j in cfg.jobs if j.name == "verl-grpo"))
    assert (cost.added_nodes, cost.hourly_usd) == (2, pytest.approx(6.12))


def test_a_hyperpod_type_without_a_price_names_the_key_that_gives_one():
    text, (run, _) = hyperpod_text(gpuNodeGroups=[P5EN])
    line, below = job_block(text, "llama-1b-c4")
    assert "price unknown: set trainstack:gpuNodeGroups[0].hourlyUsd while it runs" in line
    assert below[-1].endswith("price unknown: set trainstack:gpuNodeGroups[0].hourlyUsd")
    assert run.outputs["jobs"]["llama-1b-c4"]["hourlyUsd"] is None


def test_hourly_usd_prices_a_group_everywhere():
    text, (run, _) = hyperpod_text(gpuNodeGroups=[{**P5EN, "hourlyUsd": 70}])
    line, _ = job_block(text, "llama-1b-c4")
    assert "(4 node(s), $280.00/h while it runs)" in line
    assert run.outputs["jobs"]["llama-1b-c4"]["hourlyUsd"] == 280.0


def test_hourly_usd_replaces_the_catalogs_price_on_a_group_the_stack_creates():
    overrides = {
        "gpuNodeGroups": [{"name": "gpu", "instanceType": "g6.xlarge", "minNodes": 1, "hourlyUsd": 0.5}]
    }
    cfg = parse_config("dev", stack_values("dev", **overrides))
    lines = {c.item: c for c in hourly_cost(cfg, datetime.date(2026, 8, 1))}
    assert lines["g6.xlarge (node group gpu, ON_DEMAND)"].unit == "$0.5000/h"


@pytest.mark.parametrize("price", [0, -1, 1001])
def test_hourly_usd_out_of_range_is_refused(price):
    (msg,) = problems(gpuNodeGroups=[group(hourlyUsd=price)])
    assert msg == (
        f"trainstack:gpuNodeGroups[0].hourlyUsd = {float(price)}: out of range; allowed: 0.01-1000 (USD per node-hour)"
    )
