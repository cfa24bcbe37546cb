"""The plan's job lines: per default-trainer job, its modeled memory per GPU, checkpoint size per
node and disk, what S3 keeps, its step (compute, network, launch) and goodput
(offline/training_lines.py `training_model_lines`). The prod template is sized to model at least 95%
goodput (issue #35)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support.jobs import body, job
from support.plans import EXISTING_CLUSTER, job_block, plan, stack_values

from config import parse_config
from offline.plan import summary

# examples/llama-c4.yaml's job, the newcomer example.
C4_JOB = {
    "name": "llama-1b-c4",
    "kind": "PyTorchJob",
    "nodeGroup": "l40s",
    "nodes": 4,
    "model": "1b",
    "steps": 2000,
    "args": ["--batch-size", "4"],
}


def job_lines(stack: str, run, job: str) -> list[str]:
    """The indented lines the plan prints under `job`'s line."""
    cfg = parse_config(stack, stack_values(stack))
    return job_block(summary(run, cfg, 0, Path("build/plan") / stack), job)[1]


def goodput_percent(line: str) -> float:
    return float(re.search(r"goodput (\d+\.\d)%", line).group(1))


@pytest.mark.parametrize("job", ["llama-1b-fsdp", "llama-1b-ray"])
def test_prod_models_at_least_95_percent_goodput(prod_plan, job):
    memory, saves, kept, modeled, _faults, _ = job_lines("prod", prod_plan, job)
    assert memory == "memory: the 1b model at batch 8 x 2048 tokens needs ~39.8 of 80.0 GiB per H100"
    cfg = parse_config("prod", stack_values("prod"))
    (p5,) = cfg.gpu_node_groups
    # A 13 GB state saves by time alone (domain/retention.py BY_TIME_ABOVE_GB): before, every 50
    # steps, a save every 15 s.
    assert saves.startswith(
        f"checkpoints: 6.63 GB per node every 30 min to {p5.checkpoint_disk.description}: write "
    )
    # Two p5 over EFA: FSDP's 8 GB per node per step take 20 ms of 3200 Gbps, under the compute.
    assert modeled.startswith(
        "modeled: step 0.31 s, bound by compute: compute 0.31 s at 38% MFU (assumed), "
        "network 20 ms over 3200 Gbps EFA, launch floor 21 ms ("
    )
    assert "communication fully overlapped with compute, at the link's nominal rate: assumed" in modeled
    assert goodput_percent(modeled) >= 95.0
    # 6.63 GB per node on 2 nodes; the 10-minute run saves once, at its last step.
    assert kept == (
        "S3: keeps the newest 3 (storage.checkpointsKept): 1 checkpoint(s), 13.25 GB current after 2,000 "
        "steps (~$0.30/month); 0 pruned save(s), 0 MB, stay 1 day(s) as noncurrent versions (~$0.00/month "
        "while the job saves at this pace)"
    )


def test_dev_prints_plausible_figures(dev_plan):
    """The tiny model's FLOPs make a 0.02 ms step: its launches (7 ms) bound it instead, and its
    saves cost their fixed stall and upload. Before: "step 0.02 ms", 51,857,767 tokens/s."""
    memory, saves, kept, modeled, _faults, run = job_lines("dev", dev_plan, "llama-tiny")
    assert memory == "memory: the tiny model at batch 8 x 128 tokens needs ~2.0 of 22.4 GiB per L4"
    assert saves.startswith("checkpoints: 1.6 MB per node every 50 steps or 30 min (0.35 s of training)")
    assert modeled.startswith(
        "modeled: step 7 ms, bound by kernel launches: compute 0.02 ms at 38% MFU (assumed), "
        "network n/a (one node), launch floor 7 ms; goodput "
    )
    assert 30 < goodput_percent(modeled) < 70
    assert "(at most 146,286 tokens/s, MFU n/a (launch-bound)," in run
    assert kept.startswith(
        "S3: keeps the newest 3 (storage.checkpointsKept): 2 checkpoint(s), 3.2 MB current after 100 steps"
    )


def test_a_multi_node_job_without_efa_says_it_waits_on_the_network():
    """The issue's newcomer: Llama 1b FSDP on 4 x g6e.xlarge printed a 0.42 s step."""
    overrides = {
        "gpuNodeGroups": [{"name": "l40s", "instanceType": "g6e.xlarge", "nodeCount": 4}],
        "jobs": [C4_JOB],
    }
    run, cfg = plan("dev", **overrides), parse_config("dev", stack_values("dev", **overrides))
    _, below = job_block(summary(run, cfg, 0, Path("build/plan/dev")), "llama-1b-c4")
    modeled, _faults, warning, run_line = below[3:]
    assert modeled.startswith(
        "modeled: step 20.59 s, bound by the network: compute 0.42 s at 38% MFU (assumed), "
        "network 20.59 s over 2.5 Gbps baseline, no EFA"
    )
    assert warning == (
        "WARNING: job llama-1b-c4: 4 nodes of g6e.xlarge without EFA spend 20.59 s per step on FSDP's "
        "traffic over the 2.5 Gbps baseline, against 0.42 s of compute; fix: an EFA type with a faster "
        "link (g6e.8xlarge, 25 Gbps, or larger; efa: true), or the same 4 GPUs as 1 x g6e.12xlarge (step "
        "0.42 s, ~$2.44 of node time for the run against ~$85.17 now), or fewer nodes (one node sends "
        "nothing between nodes), or for a model this small, DDP with bf16 gradients in a trainer of your "
        "own (`command:`): 10.60 s per step"
    )
    assert run_line.startswith("run: 2,000 steps in at least 11.4 h (at most 1,591 tokens/s, MFU at most 1%")


@pytest.mark.parametrize("efa", [False, True])
def test_efa_that_leaves_the_link_as_it_is_is_no_fix_and_no_silence(efa):
    """4 x g5.8xlarge: EFA there runs at the same 25 Gbps, so `efa: true` changed nothing in the step
    but silenced the warning. Now the warning stays either way and names what changes the step: the
    same four A10Gs on one g5.12xlarge, which sends nothing between nodes."""
    groups = [{"name": "a10g", "instanceType": "g5.8xlarge", "nodeCount": 4, "efa": efa}]
    job = C4_JOB | {"nodeGroup": "a10g", "steps": 100, "args": ["--batch-size", "2"]}
    below = plan_lines("dev", "llama-1b-c4", gpuNodeGroups=groups, jobs=[job])
    (warning,) = [line for line in below if line.startswith("WARNING: ")]
    link = (
        "over EFA spend 2.06 s per step on FSDP's traffic over the 25 Gbps EFA link"
        if efa
        else ("without EFA spend 2.06 s per step on FSDP's traffic over the 25 Gbps baseline")
    )
    assert warning.startswith(
        f"WARNING: job llama-1b-c4: 4 nodes of g5.8xlarge {link}, against 1.08 s of compute"
    )
    assert (
        "the same 4 GPUs as 1 x g5.12xlarge (step 1.08 s, ~$0.17 of node time for the run against ~$0.56 now)"
        in warning
    )
    assert "g5.8xlarge," not in warning  # no EFA type as fast as the group's own is offered


def prod_jobs(**changes) -> list[dict]:
    """Prod's jobs, each with `changes` over its own settings."""
    return [j | changes for j in json.loads(stack_values("prod")["trainstack:jobs"])]


def plan_lines(stack: str, job_name: str, **overrides) -> list[str]:
    run = plan(stack, **overrides)
    cfg = parse_config(stack, stack_values(stack, **overrides))
    return job_block(summary(run, cfg, 0, Path("build/plan") / stack), job_name)[1]


def test_the_retention_keys_set_the_trainers_flags_and_the_footprint():
    storage = {"checkpointsKept": 2, "checkpointKeepEvery": 1000}
    jobs = prod_jobs(args=["--checkpoint-every", "50"])
    run = plan("prod", storage=storage, jobs=jobs)
    args = body(job(run, "llama-1b-fsdp"))["spec"]["trainer"]["args"]  # prod's TrainJob
    assert (
        args[args.index("--keep-checkpoints") + 1] == "2" and args[args.index("--keep-every") + 1] == "1000"
    )
    below = plan_lines("prod", "llama-1b-fsdp", storage=storage, jobs=jobs)
    # 40 saves by steps: the newest two and step 1000 stay; 37 are pruned, each kept a day.
    assert below[2] == (
        "S3: keeps the newest 2 (storage.checkpointsKept) and every 1000th step (storage.checkpointKeepEvery): "
        "3 checkpoint(s), 39.75 GB current after 2,000 steps (~$0.91/month); 37 pruned save(s), 490.27 GB, "
        "stay 1 day(s) as noncurrent versions (~$11.28/month while the job saves at this pace)"
    )


def test_a_large_state_saves_by_time_and_the_job_may_say_otherwise():
    """The stack passes `--checkpoint-every 0` for the 1b model (13 GB), before the job's args, so
    a job's own cadence comes last and wins (argparse keeps the last value)."""
    args = body(job(plan("prod"), "llama-1b-fsdp"))["spec"]["trainer"]["args"]
    assert args[args.index("--checkpoint-every") + 1] == "0"
    mine = prod_jobs(args=["--checkpoint-every", "50"])
    args = body(job(plan("prod", jobs=mine), "llama-1b-fsdp"))["spec"]["trainer"]["args"]
    assert args[-4:] == ["--checkpoint-every", "0", "--checkpoint-every", "50"]
    dev_args = body(job(plan("dev"), "llama-tiny"))["spec"]["trainer"]["args"]
    assert "--checkpoint-every" not in dev_args  # 1.6 MB: the trainer's 50 steps


def test_a_long_run_by_steps_shows_its_noncurrent_bytes_and_their_cost():
    """The issue's case: 1b every 50 steps (a save every ~15 s) for a million steps. Each pruned save
    stays a day as noncurrent versions: a day's saves, ~75 TB, which the old line never counted."""
    below = plan_lines(
        "prod", "llama-1b-fsdp", jobs=prod_jobs(steps=1_000_000, args=["--checkpoint-every", "50"])
    )
    s3 = below[2]
    assert s3.startswith(
        "S3: keeps the newest 3 (storage.checkpointsKept): 3 checkpoint(s), 39.75 GB current"
    )
    saves = re.search(r"; ([\d,]+) pruned save\(s\), ([\d,.]+) GB, stay 1 day", s3)
    per_day = int(86400 // (50 * 0.3068))  # the modeled step, 0.31 s
    assert abs(int(saves.group(1).replace(",", "")) - per_day) <= per_day // 100
    cost = float(re.search(r"\(~\$([\d,.]+)/month while", s3).group(1).replace(",", ""))
    assert 1500 < cost < 2000


@pytest.mark.parametrize(
    ("args", "mfu"),
    [
        ([], "51% MFU (measured: one H200, 1b, compiled)"),
        (["--float8"], "55% MFU (measured: one H200, 1b, compiled, float8)"),
        (["--no-compile"], "37% MFU (measured: one H200, 1b, eager)"),
    ],
)
def test_the_step_uses_the_mfu_measured_on_the_gpu_and_says_so(args, mfu):
    groups = json.loads(stack_values("prod")["trainstack:gpuNodeGroups"])
    p5en = [g | {"instanceType": "p5en.48xlarge"} for g in groups]
    below = plan_lines("prod", "llama-1b-fsdp", gpuNodeGroups=p5en, jobs=prod_jobs(args=args))
    assert f" at {mfu}, network " in below[3]
    assert "38% MFU (assumed)" not in below[3]


def test_existing_cluster_job_is_modeled_too():
    run = plan("existing", facts=EXISTING_CLUSTER)
    memory, _, _, modeled, _, _ = job_lines("existing", run, "llama-1b-fsdp")
    assert memory == "memory: the 1b model at batch 8 x 2048 tokens needs ~39.8 of 80.0 GiB per H100"
    assert goodput_percent(modeled) >= 95.0


def test_the_plan_counts_faults_and_names_the_interval_that_loses_least():
    """A group whose GPUs fail 10,000 times per million GPU-hours: two p5 (16 GPUs) meet a fault every
    6.2 h, each costing the training collectives' timeout (100 s), a restart and half of the 30-minute
    interval; the run
    line's goodput and time count it, and Young's interval for a 0.28 s save is about 2 minutes."""
    groups = [
        g | {"faultsPerMillionGpuHours": 10_000}
        for g in json.loads(stack_values("prod")["trainstack:gpuNodeGroups"])
    ]
    below = plan_lines("prod", "llama-1b-fsdp", gpuNodeGroups=groups, jobs=prod_jobs(steps=200_000))
    (faults,) = [line for line in below if line.startswith("faults: ")]
    assert faults.startswith(
        "faults: ~1 per 6.2 h of this gang (10000 per million GPU-hours: faultsPerMillionGpuHours), each "
        "~19.7 min lost (the collective timeout 1.7 min, a restart 3.0 min assumed, half an interval done "
        "again); goodput 94.7% with faults, 100.0% without"
    )
    assert faults.endswith(
        "is 1.9 min of training (Young; --checkpoint-minutes 2 in args); a hung node is fenced after "
        "3.0 min (cluster.fenceHungNodesAfterSeconds)"
    )
    # With the fence off, the plan says what holds the gang instead.
    cluster = json.loads(stack_values("prod")["trainstack:cluster"]) | {"fenceHungNodesAfterSeconds": 0}
    unfenced = plan_lines(
        "prod", "llama-1b-fsdp", gpuNodeGroups=groups, jobs=prod_jobs(steps=200_000), cluster=cluster
    )
    (faults,) = [line for line in unfenced if line.startswith("faults: ")]
    assert faults.endswith(
        "; a hung node holds the restart until its owner's repair replaces it (30 min with EKS node repair)"
    )
    run = below[-1]
    assert ", goodput 94.7%)" in run and " per billion tokens (its 2 node(s) while they train" in run
    # The same run without faults' share: the default rate leaves it at the saves' goodput.
    quiet = plan_lines("prod", "llama-1b-fsdp", jobs=prod_jobs(steps=200_000))
    assert ", goodput 99.9%)" in quiet[-1] or ", goodput 100.0%)" in quiet[-1]
