"""Train the Llama-style model with FSDP2 under torchrun (what a PyTorchJob runs).

    torchrun --nproc-per-node=gpu -m trainer.train --model 1b --steps 2000 \\
        --data s3://bucket/datasets/c4/train.bin --val-data s3://bucket/datasets/c4/val.bin \\
        --checkpoint-dir /checkpoints --s3-checkpoints s3://bucket/checkpoints/job

This module is the loop: data, schedule, the step, when to log and when to save. Around it:
the flags (trainer.config), the rank's device and process groups (trainer.distributed), the sharded
model (trainer.parallelize), what ends or pauses training and every exit code (trainer.resilience),
the `metrics {json}` records rank 0 prints once per log interval (trainer.metrics), checkpoints
(trainer.checkpoint), and with a tracking URI the run in MLflow (trainer.tracking).
"""

from __future__ import annotations

import contextlib
import gc
import math
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
import torch.distributed as dist

from trainer import checkpoint, compile_cache, debug_dumps, mlflow_run, preflight, process
from trainer.config import TrainConfig, parse_args
from trainer.data import Prefetcher, TokenWindows, resolve_dataset, write_synthetic_dataset
from trainer.distributed import DistContext, init_distributed, tighten_collective_timeout
from trainer.metrics import Window, log, peak_flops, validation_loss
from trainer.model import FLOPS_CONVENTION, MODEL_SIZES, flops_per_token
from trainer.parallelize import build_model, compiles, precompute_float8_scales
from trainer.resilience import (
    PREFLIGHT_EXIT_CODE,
    Agreement,
    Decision,
    Drained,
    PreflightFailed,
    StepWatchdog,
    StopRequested,
)

SYNTHETIC_TOKENS = 2_000_000


def train_step(
    model: torch.nn.Module, optimizer, inputs: torch.Tensor, targets: torch.Tensor
) -> torch.Tensor:
    """One optimizer step; returns the (local) loss."""
    loss = model(inputs, targets)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    # float8: the next all-gathers' scales from the updated weights, in one all-reduce.
    precompute_float8_scales(model)
    optimizer.zero_grad(set_to_none=True)
    return loss


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warmup, then cosine decay to 10% of the peak."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def dataset_path(uri: str, cache: Path, seed: int, vocab_size: int, ctx: DistContext) -> Path:
    """The token file, downloaded once per node before training starts (long timeout)."""
    if uri:
        if ctx.local_rank == 0:  # one download per node; the others find it cached
            resolve_dataset(uri, cache)
        dist.barrier(group=ctx.control)
        return resolve_dataset(uri, cache)
    # "runs2": the generator's draws changed once (trainer.data); a cache written before holds other
    # tokens, and a job's nodes must read the same ones.
    path = cache / f"synthetic-runs2-v{vocab_size}-s{seed}.bin"
    if ctx.local_rank == 0 and not path.exists():
        write_synthetic_dataset(path, SYNTHETIC_TOKENS, vocab_size, seed=seed)
    dist.barrier(group=ctx.control)
    return path


def open_data(cfg: TrainConfig, ctx: DistContext) -> tuple[TokenWindows, TokenWindows | None]:
    """This rank's training windows, and its validation windows when validation is on."""
    vocab_size, seq_len = MODEL_SIZES[cfg.model].vocab_size, cfg.sequence_length
    path = dataset_path(cfg.data, cfg.data_cache, cfg.seed, vocab_size, ctx)
    data = TokenWindows(path, vocab_size, seq_len, ctx.rank, ctx.world_size, cfg.seed)
    if not cfg.val_every:
        return data, None
    val_path = (
        dataset_path(cfg.val_data, cfg.data_cache, cfg.seed, vocab_size, ctx) if cfg.val_data else data.path
    )
    return data, TokenWindows(val_path, vocab_size, seq_len, ctx.rank, ctx.world_size, cfg.seed + 1)


def check_own_nodes(cfg: TrainConfig, ctx: DistContext) -> None:
    """The job's own nodes, before step 0 (trainer.preflight); a failure ends the job for good."""
    report = preflight.check_nodes(
        ctx, cfg.preflight_gpus_per_node, cfg.preflight_efa_per_node, cfg.preflight_min_bus_bandwidth
    )
    if not report["ok"]:
        raise PreflightFailed(PREFLIGHT_EXIT_CODE)


def train(
    cfg: TrainConfig,
    ctx: DistContext,
    report: Callable[[dict], None] | None = None,
    on_checkpoint: Callable[[int, Path], None] | None = None,
) -> dict:
    """Run the loop; `report` gets each metrics record, `on_checkpoint` each finished checkpoint.
    Returns the last metrics record; raises Drained when a SIGTERM stopped it before the last step."""
    debug_dumps.upload_dumps(cfg.s3_checkpoints, ctx.local_rank)
    if cfg.checks_own_nodes:
        check_own_nodes(cfg, ctx)
    return Loop(cfg, ctx, report, on_checkpoint).run()


@contextlib.contextmanager
def collections_in_lockstep(every: int) -> Iterator[None]:
    """Python's collector off while the loop runs, the loop collecting every `every` steps, as
    torchtitan does (torchtitan/tools/utils.py GarbageCollection, its gc_freq 50): a rank's own
    collection, a full one walking every object torch keeps, stalls it for up to a second at a
    step of its own choosing, and every other rank waits for it at the next collective. At the
    same step on every rank, the stalls overlap. Only the young generations are collected (as
    torchtitan does): what survives them lives for the run anyway. `every` 0 leaves Python's
    collector as it is. The collector is back on when the loop ends: a Ray worker or a test
    process goes on."""
    if not every:
        yield
        return
    was_on = gc.isenabled()
    gc.disable()
    gc.collect(1)
    try:
        yield
    finally:
        if was_on:
            gc.enable()


class Loop:
    """One run: the model resumed from the newest complete checkpoint, and what a step hands the
    next (the logging window, the checkpoint still being written or uploaded)."""

    def __init__(
        self,
        cfg: TrainConfig,
        ctx: DistContext,
        report: Callable[[dict], None] | None,
        on_checkpoint: Callable[[int, Path], None] | None,
    ):
        self.cfg, self.ctx, self.report, self.on_checkpoint = cfg, ctx, report, on_checkpoint
        self.data, self.val = open_data(cfg, ctx)
        # What an earlier run of the job compiled, loaded before this one compiles (at its first step).
        self.compile_cache: str | None = None
        self.compile_loaded = 0
        self.compile_upload: threading.Thread | None = None
        if compiles(cfg.compile, ctx.device):
            self.compile_cache = compile_cache.cache_name(
                cfg.model, ctx.world_size, ctx.device, cfg.float8, ctx.local_rank
            )
            self.compile_loaded = compile_cache.load(
                cfg.checkpoint_dir, cfg.s3_checkpoints or None, self.compile_cache
            )
        self.model = build_model(cfg.model, ctx, cfg.compile, cfg.seed, cfg.float8)
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(),
            lr=cfg.lr,
            betas=(0.9, 0.95),
            weight_decay=0.1,
            fused=ctx.device.type == "cuda",
        )
        self.store = checkpoint.CheckpointStore(
            cfg.checkpoint_dir, ctx.control, cfg.s3_checkpoints or None, cfg.keep_checkpoints, cfg.keep_every
        )
        self.start = self.store.load_latest(self.model, self.optimizer)
        log(
            ctx,
            {
                "event": "start",
                "resumed_from": self.start,
                "steps": cfg.steps,
                "world_size": ctx.world_size,
                "model": cfg.model,
                "flops_convention": FLOPS_CONVENTION,
            },
        )

        self.stop = StopRequested()
        self.agree = Agreement(ctx, cfg.checkpoint_minutes * 60, every=cfg.log_every)
        self.tokens_per_step = cfg.batch_size * cfg.sequence_length * ctx.world_size
        self.fpt = flops_per_token(MODEL_SIZES[cfg.model], cfg.sequence_length)
        self.peak = peak_flops(ctx.device)
        self.last_record: dict = {"step": self.start}
        self.loader = Prefetcher(
            self.data, self.start, cfg.steps, cfg.batch_size, cfg.prefetch, pin=ctx.device.type == "cuda"
        )
        self.window = Window(time.perf_counter(), ctx.device)
        self.pending: checkpoint.PendingSave | None = None
        self.step = self.start
        self.watchdog = StepWatchdog(cfg.step_timeout, ctx.rank)
        self.tracker = mlflow_run.tracker_for(cfg, ctx.rank, ctx.world_size, self.start)

    def keep_compiled(self) -> None:
        """After the first step: what the compile found in the cache, and, where it missed, the
        first node's ranks save what they compiled for the job's next run."""
        found = compile_cache.lookups()
        saved = 0
        first_node = self.ctx.rank == self.ctx.local_rank
        if first_node and compile_cache.missed(found):
            saved, self.compile_upload = compile_cache.save(
                self.cfg.checkpoint_dir, self.cfg.s3_checkpoints or None, self.compile_cache
            )
        log(
            self.ctx,
            {"event": "compile_cache", "loaded_bytes": self.compile_loaded, "saved_bytes": saved} | found,
        )

    def run(self) -> dict:
        try:
            with collections_in_lockstep(self.cfg.gc_every):
                while self.step < self.cfg.steps:
                    if not self.one_step():
                        break
        finally:
            self.watchdog.stop()
            self.loader.close()
            self.store.close()  # the run's staging buffer; the last save is synchronous, without it
            if self.tracker:  # bounded: a server that is down costs at most its close timeout
                self.tracker.close(finished=self.step >= self.cfg.steps)
        # Not on an error path: these are collectives, and a rank that failed would leave them hanging.
        if self.pending is not None:
            self.finish(self.pending, last=True)
        self.store.settle_uploads()
        if self.compile_upload is not None:
            self.compile_upload.join()
        if self.step < self.cfg.steps:  # stopped by an agreed SIGTERM, its checkpoint saved
            raise Drained()
        return self.last_record

    def one_step(self) -> bool:
        """Train a step, then, at an agreement step (every log interval), do what every rank agreed
        on; False when the run stops here. Between agreements nothing waits for the device."""
        cfg = self.cfg
        self.hang_if_drilled()
        self.train_one_batch()
        self.watchdog.beat()
        if self.step == self.start + 1:  # compiled and warmed up: a long wait is now a dead peer
            tighten_collective_timeout(cfg.train_collective_timeout)
            log(self.ctx, {"event": "collective_timeout", "seconds": cfg.train_collective_timeout})
            if self.compile_cache:
                self.keep_compiled()
        if cfg.gc_every and self.step % cfg.gc_every == 0:
            gc.collect(1)
        every = cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0
        if not self.agree.due(self.step, cfg.steps):
            if every:  # every rank knows the step: nothing to agree on
                self.save(last=False)
            return True
        decision = self.agree.decide(
            self.stop.requested,
            self.pending is not None and not self.pending.written(),
            self.store.uploading(),
        )
        self.settle_checkpoints(decision)
        last = decision.stop or self.step == cfg.steps
        if every or decision.checkpoint_due or last:
            self.save(last=last)  # before the window's record, which counts its stall
        self.log_window()
        if decision.stop:
            log(self.ctx, {"event": "stopped", "step": self.step, "reason": "SIGTERM"})
            return False
        return True

    def hang_if_drilled(self) -> None:
        """`--inject-hang-step`: the last rank never returns from that step, as on a dead GPU."""
        ctx, hang_step = self.ctx, self.cfg.inject_hang_step
        if hang_step and self.step == hang_step and ctx.rank == ctx.world_size - 1:
            threading.Event().wait()

    def train_one_batch(self) -> None:
        fetch_start = time.perf_counter()
        inputs, targets = (t.to(self.ctx.device, non_blocking=True) for t in self.loader.next())
        self.window.data_wait += time.perf_counter() - fetch_start
        for group in self.optimizer.param_groups:
            group["lr"] = lr_at(self.step, self.cfg)
        self.window.add(train_step(self.model, self.optimizer, inputs, targets))
        self.step += 1

    def settle_checkpoints(self, decision: Decision) -> None:
        """Every rank's files are written: mark the checkpoint complete now (a fault before the
        next save resumes from it); its upload goes on in the background, and its S3 marker
        follows as soon as every rank's upload is done. The time counts as checkpoint stall."""
        started = time.perf_counter()
        if self.pending is not None and not decision.any_writing and not decision.any_uploading:
            with self.watchdog.pause():
                self.finish(self.pending)
            log(self.ctx, {"event": "checkpoint_complete", "step": self.pending.step, "at_step": self.step})
            self.pending = None
        elif self.pending is None and self.store.has_upload() and not decision.any_uploading:
            with self.watchdog.pause():
                self.store.settle_uploads()
        else:
            return
        self.window.checkpoint_stall += time.perf_counter() - started

    def log_window(self) -> None:
        """The window's record (with validation loss when due) to the log, MLflow and `report`."""
        cfg, step = self.cfg, self.step
        record = self.window.metrics(
            step, self.ctx, self.tokens_per_step, cfg.batch_size, self.fpt, self.peak
        )
        record["lr"] = lr_at(step - 1, cfg)
        if self.val is not None and (step % cfg.val_every == 0 or step == cfg.steps):
            loss = validation_loss(self.model, self.val, self.ctx, cfg.val_batches, cfg.batch_size)
            record["val_loss"] = round(loss, 4)
        self.last_record = record
        log(self.ctx, record)
        if self.tracker:
            self.tracker.record(record)
        if self.report:
            self.report(record)
        self.window = Window(time.perf_counter(), self.ctx.device)

    def save(self, last: bool) -> None:
        """Checkpoint this step. The last save (end, SIGTERM) is finished before exit; the others
        overlap training. The stall counts against the window's goodput."""
        stall_start = time.perf_counter()
        with self.watchdog.pause():
            if self.pending is not None:
                self.finish(self.pending)
            self.pending = self.store.save(self.step, self.model, self.optimizer, background=not last)
            if last:
                self.finish(self.pending, last=True)
                self.pending = None
        self.agree.last_checkpoint = time.monotonic()
        self.window.checkpoint_stall += time.perf_counter() - stall_start
        log(self.ctx, {"event": "checkpoint", "step": self.step})

    def finish(self, save: checkpoint.PendingSave, last: bool = False) -> None:
        # S3 uploads run in the background, except the last one (the run ends, or SIGTERM).
        path = save.finish(background_upload=not last)
        if self.on_checkpoint:
            self.on_checkpoint(save.step, path)


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    if cfg.checks_own_nodes:  # before the process group: NCCL reads its log settings once
        preflight.log_nccl_network()
    ctx = init_distributed(cfg.collective_timeout, cfg.transfer_timeout)
    try:
        train(cfg, ctx)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    process.set_aside_startup_objects()
    try:
        done = main()
    except SystemExit as stop:  # a refusal, a drain: its line is out; no teardown to abort the code
        done = process.exit_code(stop)
    process.exit_now(done)
