"""The plan's lines for what a job trains and the datasets it reads: a default-trainer job's memory
per GPU, checkpoints, step time, goodput and its run's time and cost (domain/memory_fit.py,
domain/goodput.py, domain/run_estimate.py); each declared dataset's size and preparation time."""

from __future__ import annotations

import dataclasses

from domain.datasets import ASSUMED_TOKENS_PER_SECOND, preparation_minutes, prepared_size_gb
from domain.goodput import ASSUMED_MFU, CheckpointPath, modeled_goodput, step_seconds
from domain.memory_fit import GIB, gpu_memory_bytes, gpu_memory_need
from domain.model_facts import MODEL_SHAPES, peak_bf16_flops
from domain.run_estimate import RunEstimate
from offline.cost import JobCost, job_cost
from planes.storage import checkpoint_home

# Below this, a step's time is its kernel launches and Python, which FLOPs over a peak do not model.
SHORTEST_MODELED_STEP_S = 0.01


def dataset_lines(cfg) -> list[str]:
    """Each declared dataset: what the stack prepares, how large, how long, and who reads it."""
    lines = [
        f"Datasets (prepared once into the bucket by a Job; time at an assumed "
        f"{ASSUMED_TOKENS_PER_SECOND / 1e6:g}M tokens/s):"
    ]
    for d in cfg.datasets:
        spec = d.spec
        readers = ", ".join(j.name for j in cfg.jobs if j.dataset == d.name) or "no job yet"
        lines.append(
            f"  {d.name:30s} {spec.source}/{spec.config or '-'} {spec.split}: "
            f"{spec.max_tokens + spec.val_tokens:,} tokens, ~{prepared_size_gb(spec):.1f} GB, "
            f"~{preparation_minutes(spec):.0f} min; read by {readers}"
        )
    return lines


def training_model_lines(cfg, job_name: str, start_minutes: float = 0.0) -> list[str]:
    """What the plan models of a job that runs the default trainer on a GPU group: its memory per
    GPU, its checkpoints per node and disk, its step time and goodput (domain/memory_fit.py,
    domain/goodput.py), and the time and cost of its `steps` (domain/run_estimate.py), the job
    admitted `start_minutes` before its first step. Nothing for a command, VERL, a RayCluster or a
    CPU job."""
    j = next((j for j in cfg.jobs if j.name == job_name), None)
    group = next((g for g in cfg.gpu_node_groups if j is not None and g.name == j.node_group), None)
    if j is None or group is None or not j.runs_default_trainer or not group.instance.has_nvidia_gpus:
        return []
    instance, run, shape = group.instance, j.trainer_settings(), MODEL_SHAPES[j.model]
    world = max(1, j.nodes) * instance.gpus
    need = gpu_memory_need(shape, run.batch_size, run.seq_len, world)
    memory = (
        f"memory: the {j.model} model at batch {run.batch_size} x {run.seq_len} tokens needs "
        f"~{need.total / GIB:.1f} of {gpu_memory_bytes(instance) / GIB:.1f} GiB per {instance.gpu_model}"
    )
    peak = peak_bf16_flops(instance.gpu_model or "")
    if peak is None:
        return [
            memory,
            f"modeled: no bf16 peak figure for {instance.gpu_model}; step time, goodput and the run's "
            "time and cost not modeled",
        ]
    cost = job_cost(cfg, j)
    estimate = RunEstimate(
        steps=j.steps,
        step_s=step_seconds(shape, run.batch_size, run.seq_len, peak),
        tokens_per_step=run.batch_size * run.seq_len * world,
        goodput=1.0,
        start_minutes=start_minutes,
        added_nodes=cost.added_nodes,
        node_hourly_usd=group.hourly_usd,
        # The owner's nodes stay after the job: its time on them ends with it.
        release_minutes=0 if cost.owners_nodes else cfg.queueing.idle_node_minutes,
    )
    home = checkpoint_home(cfg, group.name)
    if home == "fsx":
        return [
            memory,
            "checkpoints: on FSx for Lustre, shared by the nodes; goodput not modeled",
            run_line(estimate, cost, modeled_goodput=False),
        ]
    if home == "claim":
        claim = cfg.existing_cluster.checkpoint_claim
        return [
            memory,
            f"checkpoints: on the claim {claim}, shared by the nodes; goodput not modeled",
            run_line(estimate, cost, modeled_goodput=False),
        ]
    disk = group.checkpoint_disk
    uploads = home == "s3"
    g = modeled_goodput(
        shape,
        batch_size=run.batch_size,
        seq_len=run.seq_len,
        world_size=world,
        ranks_per_node=instance.gpus,
        peak_flops=peak,
        checkpoint_every=run.checkpoint_every,
        checkpoint_minutes=run.checkpoint_minutes,
        path=CheckpointPath(disk.write_gb_per_s, instance.network_gbps, uploads),
    )
    cadence = [f"{run.checkpoint_every} steps"] if run.checkpoint_every > 0 else []
    if run.checkpoint_minutes > 0:
        cadence.append(f"{run.checkpoint_minutes:g} min")
    saves = "checkpoints: none by steps or time"
    if cadence:
        saves = (
            f"checkpoints: {_size(g.checkpoint_gb_per_node)} per node every {' or '.join(cadence)} "
            f"({_duration(g.interval_s)} of training) to {disk.description}: write {_duration(g.write_s)}"
            + (f", S3 upload {_duration(g.upload_s)}" if uploads else "")
            + f", staging stall {_duration(g.stage_s)}"
        )
    bound = f" (bound by the checkpoint {g.bottleneck})" if cadence and g.bottleneck != "training" else ""
    if g.step_s < SHORTEST_MODELED_STEP_S:
        bound += "; a step this short is bound by kernel launches, not FLOPs, so both are floors"
    return [
        memory,
        saves,
        f"modeled: step {_duration(g.step_s)} at {ASSUMED_MFU:.0%} MFU (assumed), goodput {g.goodput:.1%}{bound}",
        run_line(dataclasses.replace(estimate, goodput=g.goodput), cost, modeled_goodput=True),
    ]


def run_line(e: RunEstimate, cost: JobCost, modeled_goodput: bool) -> str:
    """The time to finish the job's steps and what the run adds to the idle stack's bill."""
    short = e.step_s < SHORTEST_MODELED_STEP_S  # launch-bound: the time is a floor, the pace a ceiling
    floor, ceiling = ("at least ", "at most ") if short else ("~", "~")
    pace = f"{ceiling}{e.tokens_per_s:,.0f} tokens/s at {ASSUMED_MFU:.0%} MFU (assumed)"
    pace += f", goodput {e.goodput:.1%}" if modeled_goodput else ", checkpoint stalls not counted"
    time = (
        f"run: {e.steps:,} steps in {floor}{_span(e.training_s)} ({pace}), "
        f"{floor}{_span(e.wall_hours * 3600)} from admission"
    )
    if cost.owners_nodes:
        held = f"{e.added_nodes} node(s) x {e.paid_node_hours / e.added_nodes:.2f} h"
        if e.cost_usd is None:
            return f"{time}; on the cluster owner's nodes ({held}): {cost.unknown_price}"
        return f"{time}; {floor}${e.cost_usd:,.2f} of the cluster owner's node time ({held})"
    if not e.added_nodes:
        return f"{time}; its nodes are in the idle total, so it adds nothing to it"
    nodes = (
        f"{e.added_nodes} added node(s) x {e.paid_node_hours / e.added_nodes:.2f} h "
        f"(with the {e.release_minutes} min queueing.idleNodeMinutes before they are removed)"
    )
    if e.cost_usd is None:
        return f"{time}; {nodes}: {cost.unknown_price}"
    return f"{time}; {floor}${e.cost_usd:,.2f} for {nodes}"


def _span(seconds: float) -> str:
    """A run's length in the unit a person plans with."""
    if seconds < 90:
        return f"{seconds:.2g} s" if seconds < 10 else f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 72 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def _duration(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds >= 0.1 else f"{seconds * 1000:.2g} ms"


def _size(gb: float) -> str:
    return f"{gb:.2f} GB" if gb >= 0.1 else f"{gb * 1000:.2g} MB"
