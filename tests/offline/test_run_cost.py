"""What a run costs (issue #38): per default-trainer job the plan prints the time to finish its
`steps` and what the run adds to the idle stack's bill, counting only nodes the idle total does not
already hold: a job within a group's minNodes, or on the system nodes, adds nothing."""

from __future__ import annotations

import datetime
import json
import re
from pathlib import Path

import pytest
from support.plans import EXISTING_CLUSTER, job_block, plan, stack_values

from config import parse_config
from domain.catalog import INSTANCE_TYPES
from domain.model_facts import MODEL_SHAPES, peak_bf16_flops
from domain.run_estimate import RunEstimate
from domain.step_time import compute_seconds as step_seconds
from offline.cost import JobCost, hourly_cost, job_cost
from offline.plan import summary
from offline.timeline import job_start_minutes

DEV_GROUP = {"name": "gpu", "instanceType": "g6.xlarge", "nodeCount": 1}
DEV_JOB = {"name": "llama-tiny", "kind": "PyTorchJob", "nodeGroup": "gpu", "nodes": 1}


def plan_text(stack: str, **overrides) -> tuple[str, object]:
    run = (
        plan(stack, **overrides) if stack != "existing" else plan(stack, facts=EXISTING_CLUSTER, **overrides)
    )
    cfg = parse_config(stack, stack_values(stack, **overrides))
    return summary(run, cfg, 0, Path("build/plan") / stack), cfg


def test_a_job_within_the_groups_min_nodes_adds_nothing_to_the_idle_total():
    """With minNodes: 1 the idle total already holds the job's node: the job must not add it again."""
    overrides = {"gpuNodeGroups": [{**DEV_GROUP, "minNodes": 1}]}
    text, cfg = plan_text("dev", **overrides)
    assert "    1 x g6.xlarge (node group gpu, ON_DEMAND)" in text  # in the idle total
    line, below = job_block(text, "llama-tiny")
    assert "adds no node (its nodes are in the idle total)" in line and "$0.80" not in line
    assert "its nodes are in the idle total, so it adds nothing to it; $" in below[-1]
    (job,) = cfg.jobs
    assert job_cost(cfg, job).hourly_usd == 0.0


def test_a_job_beyond_the_floor_adds_only_the_nodes_beyond_it():
    overrides = {
        "gpuNodeGroups": [{**DEV_GROUP, "nodeCount": 3, "minNodes": 1}],
        "jobs": [{**DEV_JOB, "nodes": 3}],
    }
    text, cfg = plan_text("dev", **overrides)
    price = INSTANCE_TYPES["g6.xlarge"].hourly_usd
    line, _ = job_block(text, "llama-tiny")
    assert f"adds 2 node(s), +${2 * price:.2f}/h while it runs" in line
    idle = {c.item: c.quantity for c in hourly_cost(cfg, datetime.date(2026, 11, 24))}
    assert idle["g6.xlarge (node group gpu, ON_DEMAND)"] == 1


def test_a_job_on_the_system_nodes_adds_nothing():
    """The system nodes are a fixed group in the idle total: `+$0.19/h` for them counted them twice."""
    smoke = {"name": "smoke", "kind": "PyTorchJob", "nodeGroup": "system", "nodes": 1, "steps": 10}
    text, cfg = plan_text("dev", jobs=[DEV_JOB, smoke])
    line, below = job_block(text, "smoke")
    assert "adds no node (its nodes are in the idle total)" in line and "$0.19" not in line
    assert below == []  # not the default trainer on a GPU: no model, no run estimate
    assert job_cost(cfg, cfg.jobs[1]).added_nodes == 0


def test_prod_prints_the_time_and_cost_of_its_steps(prod_plan):
    cfg = parse_config("prod", stack_values("prod"))
    job = next(j for j in cfg.jobs if j.name == "llama-1b-fsdp")
    (p5,) = cfg.gpu_node_groups
    text = summary(prod_plan, cfg, 0, Path("build/plan/prod"))
    _, below = job_block(text, "llama-1b-fsdp")
    run_line = below[-1]
    # The figures, from the model's FLOPs and the GPU's peak at the assumed MFU (stated in the line).
    run = job.trainer_run()
    step = step_seconds(MODEL_SHAPES["1b"], run.batch_size, run.seq_len, peak_bf16_flops("H100"))
    goodput = float(re.search(r"goodput (\d+\.\d)%", run_line).group(1)) / 100
    start = job_start_minutes(prod_plan.resources, 0.0)
    assert run_line.startswith(f"run: {job.steps:,} steps in ~{job.steps * step / goodput / 60:.1f} min (")
    assert ", at 38% MFU (assumed), goodput" in run_line
    tokens_per_s = run.batch_size * run.seq_len * 16 / step
    assert f"~{tokens_per_s:,.0f} tokens/s" in run_line
    cost = float(re.search(r"; ~\$([\d,.]+) for 2 added node\(s\)", run_line).group(1).replace(",", ""))
    minutes = float(re.search(r"~([\d.]+) min from admission", run_line).group(1))
    assert minutes > job.steps * step / 60 + start["llama-1b-fsdp"].provision  # nodes come first
    paid_hours = (minutes + cfg.queueing.idle_node_minutes) / 60
    assert cost == pytest.approx(2 * p5.hourly_usd * paid_hours, rel=0.01)
    assert f"(with the {cfg.queueing.idle_node_minutes} min queueing.idleNodeMinutes" in run_line


def test_more_steps_take_longer_and_cost_more():
    def figures(steps: int) -> str:
        jobs = [{**j, "steps": steps} for j in json.loads(stack_values("prod")["trainstack:jobs"])]
        text, _ = plan_text("prod", jobs=jobs)
        _, below = job_block(text, "llama-1b-fsdp")
        return below[-1]

    short, long = figures(100), figures(100_000)
    assert short.startswith("run: 100 steps in ~") and long.startswith("run: 100,000 steps in ~")
    assert re.search(r"steps in ~([\d.]+) h", long)  # over two hours: said in hours

    def cost(line: str) -> float:
        return float(re.search(r"; ~\$([\d,.]+) for", line).group(1).replace(",", ""))

    # The fixed part (nodes, pull, the wait before removal) is in both: the difference is the steps'.
    cfg = parse_config("prod", stack_values("prod"))
    run = next(j for j in cfg.jobs if j.name == "llama-1b-fsdp").trainer_run()
    step = step_seconds(MODEL_SHAPES["1b"], run.batch_size, run.seq_len, peak_bf16_flops("H100"))
    goodput = float(re.search(r"goodput (\d+\.\d)%", long).group(1)) / 100
    extra_hours = 99_900 * step / goodput / 3600
    assert cost(long) - cost(short) == pytest.approx(
        2 * cfg.gpu_node_groups[0].hourly_usd * extra_hours, rel=0.01
    )


def test_an_existing_clusters_job_costs_the_owners_nodes_it_holds_without_a_release_wait():
    text, _ = plan_text("existing")
    line, below = job_block(text, "llama-1b-fsdp")
    price = 2 * INSTANCE_TYPES["p5.48xlarge"].hourly_usd
    assert f"on the cluster owner's nodes (2 node(s), ${price:.2f}/h while it runs)" in line
    held = float(re.search(r"\(2 node\(s\) x ([\d.]+) h\);", below[-1]).group(1))
    from_admission = float(re.search(r", ~([\d.]+) min from admission;", below[-1]).group(1))
    assert held == pytest.approx(from_admission / 60, abs=0.01)  # no queueing.idleNodeMinutes
    assert "of the cluster owner's node time" in below[-1]


def test_run_estimate_counts_the_release_wait_and_an_unknown_price():
    e = RunEstimate(
        steps=1000,
        step_s=0.5,
        tokens_per_step=4096,
        goodput=0.5,
        start_minutes=6.0,
        added_nodes=2,
        node_hourly_usd=10.0,
        release_minutes=10,
    )
    assert e.training_s == 1000.0 and e.tokens_per_s == 8192.0
    assert e.wall_hours == pytest.approx((360 + 1000) / 3600)
    assert e.cost_usd == pytest.approx(2 * 10.0 * ((360 + 1000) / 3600 + 10 / 60))
    unknown = RunEstimate(1, 1.0, 1, 1.0, 0.0, 1, None, 10)
    assert unknown.cost_usd is None
    free = RunEstimate(1, 1.0, 1, 1.0, 0.0, 0, None, 10)
    assert free.cost_usd == 0.0 and free.paid_node_hours == 0.0


def test_a_job_whose_node_price_is_unknown_says_so_never_zero():
    assert JobCost(2, None).describe() == "adds 2 node(s), price unknown while it runs"
    assert JobCost(2, None, price_key="trainstack:gpuNodeGroups[1].hourlyUsd").describe() == (
        "adds 2 node(s), price unknown: set trainstack:gpuNodeGroups[1].hourlyUsd while it runs"
    )
    assert JobCost(2, None).hourly_usd is None and JobCost(0, None).hourly_usd == 0.0


def test_a_launch_bound_step_gives_a_floor_not_an_estimate(dev_plan):
    """The tiny model's modeled step is microseconds: the run's time is a floor, its pace a ceiling."""
    cfg = parse_config("dev", stack_values("dev"))
    _, below = job_block(summary(dev_plan, cfg, 0, Path("build/plan/dev")), "llama-tiny")
    assert below[-1].startswith("run: 100 steps in at least ")
    assert "(at most " in below[-1] and "; at least $" in below[-1]
