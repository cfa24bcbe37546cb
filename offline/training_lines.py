"""The plan's lines for what a job trains and the datasets it reads. A default-trainer job: its
memory per GPU, its checkpoints per node and disk, its step (compute, the network between its
nodes, the launch floor: domain/step_time.py), its goodput (domain/goodput.py), what its
checkpoints leave in S3 (domain/retention.py), and the time and cost of its steps
(domain/run_estimate.py); each declared dataset's size and preparation time."""

from __future__ import annotations

import dataclasses

from components.bucket import CHECKPOINT_NONCURRENT_DAYS
from domain.catalog import INSTANCE_TYPES, S3_STANDARD_GB_MONTH_USD
from domain.datasets import ASSUMED_TOKENS_PER_SECOND, preparation_minutes, prepared_size_gb
from domain.faults import Faults, gang_faults
from domain.goodput import GB, CheckpointPath, checkpoint_interval_s, modeled_goodput
from domain.memory_fit import GIB, gpu_memory_bytes, gpu_memory_need
from domain.model_facts import MODEL_SHAPES, peak_bf16_flops
from domain.retention import checkpoint_gb, checkpoints_left, saves_by_steps, saves_by_time
from domain.run_estimate import RunEstimate
from domain.step_time import ASSUMED_OVERLAP, Link, StepTime, ddp_node_bytes, mfu_for, step_time
from offline.cost import JobCost, job_cost
from planes.storage import checkpoint_home


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
    """The job's modeled lines, the job admitted `start_minutes` before its first step. Nothing for
    a command, VERL, a RayCluster or a CPU job."""
    j = next((j for j in cfg.jobs if j.name == job_name), None)
    group = next((g for g in cfg.gpu_node_groups if j is not None and g.name == j.node_group), None)
    if j is None or group is None or not j.runs_default_trainer or not group.instance.has_nvidia_gpus:
        return []
    instance, run, shape = group.instance, j.trainer_run(), MODEL_SHAPES[j.model]
    nodes = max(1, j.nodes)
    world = nodes * instance.gpus
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
    link = Link(instance.baseline_gbps, group.efa)
    mfu = mfu_for(instance.gpu_model or "", j.model, run.compiled, run.float8)
    step = step_time(shape, run.batch_size, run.seq_len, peak, nodes, instance.gpus, link, mfu)
    cost = job_cost(cfg, j)
    estimate = RunEstimate(
        steps=j.steps,
        step_s=step.step_s,
        tokens_per_step=run.batch_size * run.seq_len * world,
        goodput=1.0,
        start_minutes=start_minutes,
        added_nodes=cost.added_nodes,
        node_hourly_usd=group.hourly_usd,
        # The owner's nodes stay after the job: its time on them ends with it.
        release_minutes=0 if cost.owners_nodes else cfg.queueing.idle_node_minutes,
    )
    home = checkpoint_home(cfg, group.name)
    kept = s3_line(cfg, j, run, step.step_s, j.steps * step.step_s, home)
    warning = network_warning(j, group, step, run, world, peak)
    if home in ("fsx", "claim"):
        where = "FSx for Lustre" if home == "fsx" else f"the claim {cfg.existing_cluster.checkpoint_claim}"
        return [
            memory,
            f"checkpoints: on {where}, shared by the nodes; goodput not modeled",
            *kept,
            step_line(step, link, nodes, ""),
            *warning,
            run_line(estimate, step, cost, modeled_goodput=False),
        ]
    disk = group.checkpoint_disk
    uploads = home == "s3"
    g = modeled_goodput(
        shape,
        step=step.step_s,
        world_size=world,
        ranks_per_node=instance.gpus,
        checkpoint_every=run.checkpoint_every,
        checkpoint_minutes=run.checkpoint_minutes,
        path=CheckpointPath(disk.write_gb_per_s, instance.baseline_gbps, uploads),
    )
    cadence = [f"{run.checkpoint_every} steps"] if run.checkpoint_every > 0 else []
    if run.checkpoint_minutes > 0:
        cadence.append(f"{run.checkpoint_minutes:g} min")
    saves = "checkpoints: none by steps or time"
    if cadence:
        saves = (
            f"checkpoints: {_size(g.checkpoint_gb_per_node)} per node every {' or '.join(cadence)} "
            + (f"({_span(g.interval_s)} of training) " if run.checkpoint_every > 0 else "")
            + f"to {disk.description}: write {_duration(g.write_s)}"
            + (f", S3 upload {_duration(g.upload_s)}" if uploads else "")
            + f", staging stall {_duration(g.stage_s)}"
        )
    bound = f" (bound by the checkpoint {g.bottleneck})" if cadence and g.bottleneck != "training" else ""
    interval_s = g.interval_s or j.steps * step.step_s  # no saves: a fault loses the run so far
    faults = gang_faults(
        world,
        group.faults_per_million_gpu_hours,
        run.collective_timeout_s,
        interval_s,
        g.cycle_s - g.interval_s,
    )
    estimate = dataclasses.replace(estimate, goodput=g.goodput * faults.goodput)
    return [
        memory,
        saves,
        *kept,
        step_line(step, link, nodes, f"; goodput {g.goodput:.1%}{bound}"),
        faults_line(faults, g.goodput, estimate.goodput, group, cfg.fenced_after_seconds),
        *warning,
        run_line(estimate, step, cost, modeled_goodput=True) + per_billion_tokens(estimate, nodes),
    ]


def per_billion_tokens(e: RunEstimate, nodes: int) -> str:
    usd = e.usd_per_billion_tokens(nodes)
    if usd is None:
        return ""
    return (
        f"; ${usd:,.2f} per billion tokens (its {nodes} node(s) while they train, saves and faults counted)"
    )


def faults_line(faults: Faults, saves_only: float, goodput: float, group, fenced_after_s: int) -> str:
    """How often the gang meets a fault, what each costs, the goodput with them, Young's interval
    for this save cost (domain/faults.py), and how long a hung node holds the gang's restart."""
    best = faults.best_interval_s
    hung = (
        f"; a hung node is fenced after {_span(fenced_after_s)} (cluster.fenceHungNodesAfterSeconds)"
        if fenced_after_s
        else "; a hung node holds the restart until its owner's repair replaces it (30 min with EKS node repair)"
    )
    return (
        f"faults: ~1 per {_span(faults.mtbf_s)} of this gang ({group.faults_per_million_gpu_hours:g} per "
        f"million GPU-hours: faultsPerMillionGpuHours), each ~{_span(faults.lost_s)} lost (the collective "
        f"timeout {_span(faults.detect_s)}, a restart {_span(faults.restart_s)} assumed, half an interval "
        f"done again); goodput {goodput:.1%} with faults, {saves_only:.1%} without; the interval that "
        f"loses least for saves of {_duration(faults.save_s)} is {_span(best)} of training (Young; "
        f"--checkpoint-minutes {max(1, round(best / 60))} in args){hung}"
    )


def step_line(step: StepTime, link: Link, nodes: int, goodput: str) -> str:
    """The step, what bounds it, and each of its three figures."""
    network = "n/a (one node)"
    if step.communication_s is not None:
        network = f"{_duration(step.communication_s)} over {link.description}"
    bound = {"compute": "compute", "network": "the network", "launch": "kernel launches"}[step.bound]
    return (
        f"modeled: step {_duration(step.step_s)}, bound by {bound}: compute {_duration(step.compute_s)} "
        f"at {step.mfu}, network {network}, launch floor {_duration(step.launch_s)}"
        + (f" ({ASSUMED_OVERLAP}: assumed)" if nodes > 1 else "")
        + goodput
    )


def network_warning(j, group, step: StepTime, run, world: int, peak: float) -> list[str]:
    """A multi-node job whose step waits on its nodes' link: say so, and what would not. A fix is
    named only where the model's step changes with it: an EFA type with a faster link than the
    group's (EFA on a type whose link is no faster leaves the step as it is), the same GPUs on fewer,
    larger nodes, fewer nodes, or DDP where the model fits one GPU."""
    if step.bound != "network":
        return []
    instance, shape = group.instance, MODEL_SHAPES[j.model]
    fixes = []
    faster = sorted(
        (
            t
            for t in INSTANCE_TYPES.values()
            if t.gpu_model == instance.gpu_model
            and t.efa_supported
            and t.baseline_gbps > instance.baseline_gbps
        ),
        key=lambda t: (t.gpus, t.vcpus),
    )
    if faster:
        fixes.append(
            f"an EFA type with a faster link ({faster[0].name}, {faster[0].baseline_gbps:g} Gbps, or larger; efa: true)"
        )
    larger = larger_nodes(j, group, step, run, world, peak)
    if larger:
        fixes.append(larger)
    fixes.append("fewer nodes (one node sends nothing between nodes)")
    # DDP keeps a whole replica per GPU: a fix only for a model whose unsharded state fits one.
    if gpu_memory_need(shape, run.batch_size, run.seq_len, 1).total <= gpu_memory_bytes(instance):
        ddp_s = ddp_node_bytes(shape, world) / (instance.baseline_gbps / 8 * GB)
        fixes.append(
            f"for a model this small, DDP with bf16 gradients in a trainer of your own (`command:`): "
            f"{_duration(ddp_s)} per step"
        )
    link = "over EFA" if group.efa else "without EFA"
    return [
        f"WARNING: job {j.name}: {j.nodes} nodes of {instance.name} {link} spend "
        f"{_duration(step.communication_s or 0.0)} per step on FSDP's traffic over the "
        f"{instance.baseline_gbps:g} Gbps {'EFA link' if group.efa else 'baseline'}, against "
        f"{_duration(step.compute_s)} of compute; fix: {', or '.join(fixes)}"
    ]


def larger_nodes(j, group, step: StepTime, run, world: int, peak: float) -> str | None:
    """The same number of the same GPUs on fewer, larger nodes of the catalog: the one whose node time
    for the run costs least, where its step is faster. Each GPU holds the same shard (same world),
    so the memory fit is the group's."""
    instance, shape = group.instance, MODEL_SHAPES[j.model]
    hourly = group.hourly_usd
    options = []
    for t in INSTANCE_TYPES.values():
        if (
            t.gpu_model != instance.gpu_model
            or t.gpus <= instance.gpus
            or world % t.gpus
            or t.hourly_usd is None
        ):
            continue
        nodes = world // t.gpus
        link = Link(t.baseline_gbps, t.efa_supported)
        other = step_time(shape, run.batch_size, run.seq_len, peak, nodes, t.gpus, link, step.mfu)
        if other.step_s < step.step_s:
            options.append(
                (nodes * t.hourly_usd * j.steps * other.step_s / 3600, nodes, t.name, other.step_s)
            )
    if not options:
        return None
    cost, nodes, name, step_s = min(options)
    now = (
        f" against ~${j.nodes * hourly * j.steps * step.step_s / 3600:,.2f} now" if hourly is not None else ""
    )
    return f"the same {world} GPUs as {nodes} x {name} (step {_duration(step_s)}, ~${cost:,.2f} of node time for the run{now})"


def s3_line(cfg, j, run, step_s: float, training_s: float, home: str) -> list[str]:
    """What the job's checkpoints hold in the bucket: the newest ones the trainer keeps (it prunes
    its S3 copy, or on FSx the volume, whose deletions are exported), and the pruned ones the
    versioned bucket keeps for CHECKPOINT_NONCURRENT_DAYS as noncurrent versions, with what each
    costs a month at S3 Standard's price."""
    if home not in ("s3", "fsx"):
        return []
    st = cfg.storage
    gb = checkpoint_gb(j.model)
    interval_s = checkpoint_interval_s(step_s, run.checkpoint_every, run.checkpoint_minutes)
    if run.checkpoint_every > 0 and interval_s == run.checkpoint_every * step_s:
        saves = saves_by_steps(j.steps, run.checkpoint_every)
        kept = checkpoints_left(j.steps, run.checkpoint_every, st.checkpoints_kept, st.checkpoint_keep_every)
    else:  # saves by time land on no fixed step
        saves = saves_by_time(training_s, interval_s)
        kept = min(saves, st.checkpoints_kept)
    window = int(CHECKPOINT_NONCURRENT_DAYS * 86400 // interval_s) if interval_s else 0
    noncurrent = min(max(0, saves - kept), window)
    rule = f"the newest {st.checkpoints_kept} (storage.checkpointsKept)"
    if st.checkpoint_keep_every:
        rule += f" and every {st.checkpoint_keep_every}th step (storage.checkpointKeepEvery)"
    return [
        f"S3: keeps {rule}: {kept} checkpoint(s), {_size(kept * gb)} current after {j.steps:,} steps "
        f"(~${kept * gb * S3_STANDARD_GB_MONTH_USD:,.2f}/month); {noncurrent} pruned save(s), "
        f"{_size(noncurrent * gb)}, stay {CHECKPOINT_NONCURRENT_DAYS} day(s) as noncurrent versions "
        f"(~${noncurrent * gb * S3_STANDARD_GB_MONTH_USD:,.2f}/month while the job saves at this pace)"
    ]


def run_line(e: RunEstimate, step: StepTime, cost: JobCost, modeled_goodput: bool) -> str:
    """The time to finish the job's steps and what the run adds to the idle stack's bill. A step
    bound by launches or the network is a floor (the overlap is assumed whole): the time is then
    at least, the pace at most, and the assumed MFU is not what the GPUs reach."""
    floor_only = step.bound != "compute"
    floor, ceiling = ("at least ", "at most ") if floor_only else ("~", "~")
    mfu = {
        "compute": f"at {step.mfu}",
        "network": f"MFU at most {step.mfu.value * step.compute_s / step.step_s:.0%} (the GPUs wait on the network)",
        "launch": "MFU n/a (launch-bound)",
    }[step.bound]
    pace = f"{ceiling}{e.tokens_per_s:,.0f} tokens/s, {mfu}"
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
