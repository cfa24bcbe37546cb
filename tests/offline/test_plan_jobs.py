"""The plan's job lines: per default-trainer job, its modeled memory per GPU, checkpoint size per
node and disk, step time and goodput (offline/training_lines.py `training_model_lines`). The prod template
is sized to model at least 95% goodput (issue #35)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support.plans import EXISTING_CLUSTER, job_block, plan, stack_values

from config import parse_config
from offline.plan import summary


def job_lines(stack: str, run, job: str) -> list[str]:
    """The indented lines the plan prints under `job`'s line."""
    cfg = parse_config(stack, stack_values(stack))
    return job_block(summary(run, cfg, 0, Path("build/plan") / stack), job)[1]


def goodput_percent(line: str) -> float:
    return float(re.search(r"goodput (\d+\.\d)%", line).group(1))


@pytest.mark.parametrize("job", ["llama-1b-fsdp", "llama-1b-ray"])
def test_prod_models_at_least_95_percent_goodput(prod_plan, job):
    memory, saves, modeled, _ = job_lines("prod", prod_plan, job)
    assert memory == "memory: the 1b model at batch 8 x 2048 tokens needs ~39.8 of 80.0 GiB per H100"
    cfg = parse_config("prod", stack_values("prod"))
    (p5,) = cfg.gpu_node_groups
    assert saves.startswith(
        "checkpoints: 6.63 GB per node every 50 steps or 30 min (15.34 s of training) to "
        f"{p5.checkpoint_disk.description}: write "
    )
    assert modeled.startswith("modeled: step 0.31 s at 38% MFU (assumed), goodput ")
    assert goodput_percent(modeled) >= 95.0


def test_dev_prints_what_it_models(dev_plan):
    memory, saves, modeled, _ = job_lines("dev", dev_plan, "llama-tiny")
    assert memory == "memory: the tiny model at batch 8 x 128 tokens needs ~2.0 of 22.4 GiB per L4"
    assert saves.startswith("checkpoints: 1.6 MB per node every 50 steps")
    # FLOPs over a peak make a microsecond step of the tiny model: the line says what that means.
    assert modeled.endswith("a step this short is bound by kernel launches, not FLOPs, so both are floors")
    assert 0 < goodput_percent(modeled) < 100


def test_existing_cluster_job_is_modeled_too():
    run = plan("existing", facts=EXISTING_CLUSTER)
    memory, _, modeled, _ = job_lines("existing", run, "llama-1b-fsdp")
    assert memory == "memory: the 1b model at batch 8 x 2048 tokens needs ~39.8 of 80.0 GiB per H100"
    assert goodput_percent(modeled) >= 95.0
