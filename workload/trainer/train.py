"""Train the Llama-style model with FSDP2 under torchrun (what a PyTorchJob runs).

    torchrun --nproc-per-node=gpu -m trainer.train --model 1b --steps 2000 \\
        --data s3://bucket/datasets/c4/train.bin --val-data s3://bucket/datasets/c4/val.bin \\
        --checkpoint-dir /checkpoints --s3-checkpoints s3://bucket/checkpoints/job

Rank, world size and local rank come from the torchrun/PyTorchJob environment. GPUs: NCCL, bf16
parameters with fp32 reductions, each block compiled. CPU: gloo, fp32, the same code. Rank 0 prints
one `metrics {json}` line per log interval: window-averaged loss, validation loss, tokens/s and
samples/s, step time, MFU (PaLM/torchtitan FLOPs convention), goodput (checkpoint stalls included)
and data-loader stall time. With a tracking URI, rank 0 also logs the run to MLflow (trainer.tracking).

Across nodes the ranks agree on everything that ends or pauses training: a SIGTERM on any node
(eviction, Spot reclaim) makes every rank save the same step and stop; checkpoint times come from
one clock. Start-up and checkpoint transfers wait on their own long timeout (`--transfer-timeout`),
the training collectives on a tight one (`--collective-timeout`).
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import json
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from trainer import checkpoint, tracking
from trainer.data import Prefetcher, TokenWindows, resolve_dataset, write_synthetic_dataset
from trainer.model import FLOPS_CONVENTION, MODEL_SIZES, TRAINING_DEFAULTS, Transformer, flops_per_token

# Dense bf16 peak FLOP/s per GPU, for MFU (vendor datasheets). Matched in order against the CUDA
# device name: the PCIe and NVL parts of H100 are slower than the SXM one.
PEAK_BF16_FLOPS = (
    ("H100 PCIe", 756e12),
    ("H100 NVL", 835e12),
    ("H100", 989e12),  # SXM
    ("H200", 989e12),
    ("A100", 312e12),
    ("L40S", 362e12),
    ("L4", 121e12),
)
SYNTHETIC_TOKENS = 2_000_000
PREFLIGHT_EXIT_CODE = 3
# A rank that stopped making progress (a hung collective, a dead peer, a stuck loader) exits with
# this, after dumping every thread's stack: torchrun restarts the workers, which resume from the
# newest complete checkpoint.
WATCHDOG_EXIT_CODE = 86


@dataclass(frozen=True)
class DistContext:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    # gloo group with a long timeout: barriers around downloads and uploads, and object exchange.
    control: dist.ProcessGroup | None = None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=sorted(MODEL_SIZES), default="tiny")
    p.add_argument("--steps", type=int, default=100, help="total optimizer steps of the run")
    p.add_argument("--batch-size", type=int, default=8, help="sequences per rank per step")
    p.add_argument("--seq-len", type=int, default=0, help="0: the model's maximum")
    p.add_argument("--lr", type=float, default=None, help="peak learning rate (default: per model size)")
    p.add_argument("--warmup-steps", type=int, default=None, help="default: per model size")
    p.add_argument("--data", default="", help="token file: local path or s3://; empty: generated data")
    p.add_argument("--val-data", default="", help="held-out token file for validation loss")
    p.add_argument("--val-every", type=int, default=0, help="validation every N steps (0: off)")
    p.add_argument("--val-batches", type=int, default=4)
    p.add_argument("--data-cache", type=Path, default=Path("/tmp/trainstack-data"))
    p.add_argument("--prefetch", type=int, default=2, help="batches prepared ahead on a background thread")
    p.add_argument("--checkpoint-dir", type=Path, default=Path("/checkpoints"))
    p.add_argument("--checkpoint-every", type=int, default=50, help="steps between checkpoints (0: off)")
    p.add_argument("--checkpoint-minutes", type=float, default=0.0, help="also checkpoint every N minutes")
    p.add_argument("--keep-checkpoints", type=int, default=3)
    p.add_argument("--s3-checkpoints", default="", help="s3://bucket/prefix to mirror checkpoints to")
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--seed", type=int, default=0, help="weight init, data order")
    compile_group = p.add_mutually_exclusive_group()
    compile_group.add_argument("--compile", dest="compile", action="store_true", default=None)
    compile_group.add_argument("--no-compile", dest="compile", action="store_false")
    p.add_argument(
        "--float8", action="store_true", help="float8 linear layers (torchao; H100/H200 class GPUs)"
    )
    p.add_argument(
        "--step-timeout",
        type=float,
        default=1800.0,
        help="seconds without a finished step before the rank dumps its stacks and exits (0: off); "
        "checkpoint saves pause it",
    )
    p.add_argument("--inject-hang-step", type=int, default=0, help=argparse.SUPPRESS)  # fault drills, tests
    # Set by the stack on groups whose nodes it checks: the job's own nodes are checked before step 0.
    p.add_argument("--preflight-gpus-per-node", type=int, default=0, help="GPUs each node must show")
    p.add_argument("--preflight-efa-per-node", type=int, default=0, help="EFA devices each pod must get")
    p.add_argument("--preflight-min-bus-bandwidth", type=float, default=0.0, help="GB/s floor; 0: no floor")
    p.add_argument(
        "--tracking-uri",
        default=os.environ.get("MLFLOW_TRACKING_URI", ""),
        help="MLflow server; rank 0 logs the run there (default $MLFLOW_TRACKING_URI; empty: off)",
    )
    p.add_argument("--experiment", default=os.environ.get("MLFLOW_EXPERIMENT_NAME") or "trainstack")
    p.add_argument("--collective-timeout", type=float, default=300.0, help="seconds, training collectives")
    p.add_argument("--transfer-timeout", type=float, default=3600.0, help="seconds, downloads and uploads")
    args = p.parse_args(argv)
    lr, warmup = TRAINING_DEFAULTS[args.model]
    args.lr = lr if args.lr is None else args.lr
    args.warmup_steps = warmup if args.warmup_steps is None else args.warmup_steps
    max_len = MODEL_SIZES[args.model].max_seq_len
    if not 0 <= args.seq_len <= max_len:
        p.error(f"--seq-len {args.seq_len}: the {args.model} model handles at most {max_len} tokens")
    return args


def init_distributed(collective_timeout: float = 300.0, transfer_timeout: float = 3600.0) -> DistContext:
    """Join the process group torchrun (or a PyTorchJob) describes; a bare process is world size 1."""
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    if not dist.is_initialized():
        dist.init_process_group(
            backend="nccl" if device.type == "cuda" else "gloo",
            device_id=device if device.type == "cuda" else None,
            timeout=timedelta(seconds=collective_timeout),
        )
    control = dist.new_group(backend="gloo", timeout=timedelta(seconds=transfer_timeout))
    return DistContext(dist.get_rank(), dist.get_world_size(), local_rank, device, control)


def build_model(
    name: str, ctx: DistContext, compile_blocks: bool | None = None, seed: int = 0, float8: bool = False
) -> torch.nn.Module:
    torch.manual_seed(seed)  # same initial weights on every rank before sharding
    model = Transformer(MODEL_SIZES[name]).to(ctx.device)
    if float8:
        enable_float8(model, ctx.device)
    if compile_blocks is None:
        compile_blocks = ctx.device.type == "cuda"  # the default on GPUs, as torchtitan does
    if compile_blocks:  # per block, so FSDP2 keeps its per-block all-gathers
        for block in model.blocks:
            block.compile(fullgraph=True)
    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
    mp = (
        MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        if ctx.device.type == "cuda"
        else MixedPrecisionPolicy()
    )
    for block in model.blocks:
        fully_shard(block, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    return model


def enable_float8(model: torch.nn.Module, device: torch.device) -> None:
    """Swap the blocks' linear layers for torchao's float8 training layers (dynamic scaling)."""
    if device.type != "cuda" or torch.cuda.get_device_capability(device) < (8, 9):
        raise SystemExit("--float8 needs a GPU with float8 tensor cores (H100/H200, L4/L40S)")
    try:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    except ImportError:
        raise SystemExit("--float8 needs torchao (pip install torchao)") from None
    convert_to_float8_training(
        model,
        config=Float8LinearConfig(enable_fsdp_float8_all_gather=True),
        module_filter_fn=lambda module, fqn: fqn.startswith("blocks."),  # not the head
    )


def train_step(
    model: torch.nn.Module, optimizer, inputs: torch.Tensor, targets: torch.Tensor
) -> torch.Tensor:
    """One optimizer step; returns the (local) loss."""
    loss = model(inputs, targets)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss


def lr_at(step: int, args: argparse.Namespace) -> float:
    """Linear warmup, then cosine decay to 10% of the peak."""
    if step < args.warmup_steps:
        return args.lr * (step + 1) / args.warmup_steps
    progress = (step - args.warmup_steps) / max(1, args.steps - args.warmup_steps)
    return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def peak_flops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((v for k, v in PEAK_BF16_FLOPS if k in name), None)


def dataset_path(uri: str, args: argparse.Namespace, vocab_size: int, ctx: DistContext) -> Path:
    """The token file, downloaded once per node before training starts (long timeout)."""
    if uri:
        if ctx.local_rank == 0:  # one download per node; the others find it cached
            resolve_dataset(uri, args.data_cache)
        dist.barrier(group=ctx.control)
        return resolve_dataset(uri, args.data_cache)
    path = args.data_cache / f"synthetic-v{vocab_size}-s{args.seed}.bin"
    if ctx.local_rank == 0 and not path.exists():
        write_synthetic_dataset(path, SYNTHETIC_TOKENS, vocab_size, seed=args.seed)
    dist.barrier(group=ctx.control)
    return path


class StopRequested:
    """Turns SIGTERM into a checkpoint at the end of the current step (agreed across ranks)."""

    def __init__(self) -> None:
        self.requested = False
        # Under Ray Train the loop runs in a worker thread; Ray handles termination there.
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum, frame) -> None:
        self.requested = True


class Agreement:
    """Per-step decisions every rank must share: stop (SIGTERM on any node), checkpoint now
    (time-based, by rank 0's clock), and whether any rank is still writing or uploading a
    checkpoint (so a finished one is marked complete at once, not at the next save). One tiny MAX
    all-reduce per step."""

    def __init__(self, ctx: DistContext, checkpoint_seconds: float):
        self.ctx = ctx
        self.checkpoint_seconds = checkpoint_seconds
        self.last_checkpoint = time.monotonic()

    def decide(self, stop: bool, writing: bool = False, uploading: bool = False) -> Decision:
        due = (
            self.ctx.rank == 0
            and self.checkpoint_seconds > 0
            and time.monotonic() - self.last_checkpoint >= self.checkpoint_seconds
        )
        flags = torch.tensor([int(stop), int(due), int(writing), int(uploading)], device=self.ctx.device)
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        return Decision(*(bool(flags[i]) for i in range(len(flags))))


@dataclass(frozen=True)
class Decision:
    stop: bool
    checkpoint_due: bool
    any_writing: bool  # some rank's checkpoint files are still being written
    any_uploading: bool  # some rank's S3 upload is still running


@torch.no_grad()
def validation_loss(model, data: TokenWindows, ctx: DistContext, batches: int, batch_size: int) -> float:
    """Mean loss over the same held-out windows every time, averaged across ranks."""
    model.eval()
    total = torch.zeros((), device=ctx.device)
    for i in range(batches):
        inputs, targets = (t.to(ctx.device) for t in data.fixed_batch(i, batch_size))
        total += model(inputs, targets).float()
    model.train()
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    return total.item() / (batches * ctx.world_size)


class StepWatchdog:
    """Ends a rank that stops making progress within `timeout` seconds of its last step, whatever
    it waits on (NCCL's own timeout covers only its collectives): every thread's stack goes to
    stderr, then the process exits WATCHDOG_EXIT_CODE without cleanup, as a hung one must."""

    def __init__(self, timeout: float, rank: int):
        self.timeout, self.rank = timeout, rank
        self.last = time.monotonic()
        self.paused = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="step-watchdog", daemon=True)
        if timeout > 0:
            self._thread.start()

    def beat(self) -> None:
        self.last = time.monotonic()

    @contextlib.contextmanager
    def pause(self):
        """Around long waits that are progress (a checkpoint save and its upload)."""
        self.paused = True
        try:
            yield
        finally:
            self.paused = False
            self.beat()

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        while not self._stop.wait(min(5.0, self.timeout / 4)):
            idle = time.monotonic() - self.last
            if not self.paused and idle > self.timeout:
                sys.stderr.write(
                    f"watchdog: rank {self.rank} made no progress for {idle:.0f} s (limit {self.timeout:g} s); "
                    "stacks follow, then exit for a restart from the newest checkpoint\n"
                )
                faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
                sys.stderr.flush()
                os._exit(WATCHDOG_EXIT_CODE)


class PreflightFailed(SystemExit):
    """The job's nodes failed the check: no step runs over TCP or on missing devices. Exit code 3,
    a permanent failure under the PyTorchJob's ExitCode restart policy (signals are 128+)."""

    code = PREFLIGHT_EXIT_CODE


def check_own_nodes(args: argparse.Namespace, ctx: DistContext) -> None:
    from trainer import preflight  # it imports this module

    report = preflight.check_nodes(
        ctx, args.preflight_gpus_per_node, args.preflight_efa_per_node, args.preflight_min_bus_bandwidth
    )
    if not report["ok"]:
        raise PreflightFailed(PREFLIGHT_EXIT_CODE)


def train(
    args: argparse.Namespace,
    ctx: DistContext,
    report: Callable[[dict], None] | None = None,
    on_checkpoint: Callable[[int, Path], None] | None = None,
) -> dict:
    """Run the loop; `report` gets each metrics record, `on_checkpoint` each finished checkpoint."""
    if args.preflight_gpus_per_node or args.preflight_efa_per_node or args.preflight_min_bus_bandwidth:
        check_own_nodes(args, ctx)
    cfg = MODEL_SIZES[args.model]
    seq_len = args.seq_len or cfg.max_seq_len
    data = TokenWindows(
        dataset_path(args.data, args, cfg.vocab_size, ctx),
        cfg.vocab_size,
        seq_len,
        ctx.rank,
        ctx.world_size,
        args.seed,
    )
    val = None
    if args.val_every:
        val_path = dataset_path(args.val_data, args, cfg.vocab_size, ctx) if args.val_data else data.path
        val = TokenWindows(val_path, cfg.vocab_size, seq_len, ctx.rank, ctx.world_size, args.seed + 1)
    model = build_model(args.model, ctx, args.compile, args.seed, args.float8)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1, fused=ctx.device.type == "cuda"
    )
    store = checkpoint.CheckpointStore(args.checkpoint_dir, ctx.control, args.s3_checkpoints or None)
    start = store.load_latest(model, optimizer)
    log(
        ctx,
        {
            "event": "start",
            "resumed_from": start,
            "steps": args.steps,
            "world_size": ctx.world_size,
            "model": args.model,
            "flops_convention": FLOPS_CONVENTION,
        },
    )

    stop = StopRequested()
    agree = Agreement(ctx, args.checkpoint_minutes * 60)
    tokens_per_step = args.batch_size * seq_len * ctx.world_size
    fpt, peak = flops_per_token(cfg, seq_len), peak_flops(ctx.device)
    metrics: dict = {"step": start}
    loader = Prefetcher(
        data, start, args.steps, args.batch_size, args.prefetch, pin=ctx.device.type == "cuda"
    )
    window = Window(time.perf_counter(), ctx.device)
    pending: checkpoint.PendingSave | None = None

    def finish(save: checkpoint.PendingSave, last: bool = False) -> None:
        # S3 uploads run in the background, except the last one (the run ends, or SIGTERM).
        path = save.finish(background_upload=not last)
        if on_checkpoint:
            on_checkpoint(save.step, path)

    step = start
    watchdog = StepWatchdog(args.step_timeout, ctx.rank)
    tracker = tracking.tracker_for(args, ctx.rank, ctx.world_size, start)
    try:
        while step < args.steps:
            if args.inject_hang_step and step == args.inject_hang_step and ctx.rank == ctx.world_size - 1:
                threading.Event().wait()  # a rank that never returns, as on a dead GPU
            fetch_start = time.perf_counter()
            inputs, targets = (t.to(ctx.device, non_blocking=True) for t in loader.next())
            window.data_wait += time.perf_counter() - fetch_start
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step, args)
            window.add(train_step(model, optimizer, inputs, targets))
            step += 1
            watchdog.beat()
            decision = agree.decide(
                stop.requested, pending is not None and not pending.written(), store.uploading()
            )
            stopping, due = decision.stop, decision.checkpoint_due
            # Every rank's files are written: mark the checkpoint complete now (a fault before the
            # next save resumes from it); its upload goes on in the background, and its S3 marker
            # follows as soon as every rank's upload is done.
            if pending is not None and not decision.any_writing and not decision.any_uploading:
                with watchdog.pause():
                    finish(pending)
                log(ctx, {"event": "checkpoint_complete", "step": pending.step, "at_step": step})
                pending = None
            elif pending is None and store.has_upload() and not decision.any_uploading:
                with watchdog.pause():
                    store.settle_uploads()

            if step % args.log_every == 0 or step == args.steps:
                metrics = window.metrics(step, ctx, tokens_per_step, args.batch_size, fpt, peak)
                metrics["lr"] = lr_at(step - 1, args)
                if val is not None and (step % args.val_every == 0 or step == args.steps):
                    metrics["val_loss"] = round(
                        validation_loss(model, val, ctx, args.val_batches, args.batch_size), 4
                    )
                log(ctx, metrics)
                if tracker:
                    tracker.record(metrics)
                if report:
                    report(metrics)
                window = Window(time.perf_counter(), ctx.device)

            every = args.checkpoint_every and step % args.checkpoint_every == 0
            if every or due or stopping or step == args.steps:
                stall_start = time.perf_counter()
                with watchdog.pause():
                    if pending is not None:
                        finish(pending)
                    last = stopping or step == args.steps
                    # The last save (end, SIGTERM) is finished before exit; the others overlap training.
                    pending = store.save(step, model, optimizer, args.keep_checkpoints, background=not last)
                    if last:
                        finish(pending, last=True)
                        pending = None
                agree.last_checkpoint = time.monotonic()
                window.checkpoint_stall += time.perf_counter() - stall_start
                log(ctx, {"event": "checkpoint", "step": step})
            if stopping:
                log(ctx, {"event": "stopped", "step": step, "reason": "SIGTERM"})
                break
    finally:
        watchdog.stop()
        loader.close()
        if tracker:  # bounded: a server that is down costs at most its close timeout
            tracker.close(finished=step >= args.steps)
    # Not on an error path: these are collectives, and a rank that failed would leave them hanging.
    if pending is not None:
        finish(pending, last=True)
    store.settle_uploads()
    return metrics


class Window:
    """Figures of one logging window: loss averaged over its steps, time lost to data and saves."""

    def __init__(self, started: float, device: torch.device):
        self.started = started
        self.loss_sum = torch.zeros((), device=device)
        self.steps = 0
        self.data_wait = 0.0
        self.checkpoint_stall = 0.0

    def add(self, loss: torch.Tensor) -> None:
        self.loss_sum += loss.detach().float()
        self.steps += 1

    def metrics(
        self, step: int, ctx: DistContext, tokens_per_step: int, batch_size: int, fpt: float, peak
    ) -> dict:
        mean = self.loss_sum / max(1, self.steps)
        dist.all_reduce(mean, op=dist.ReduceOp.SUM)  # gloo has no AVG: sum, then divide
        mean /= ctx.world_size
        if ctx.device.type == "cuda":
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - self.started
        training = max(1e-9, elapsed - self.checkpoint_stall)
        steps = max(1, self.steps)
        tokens_per_s = tokens_per_step * steps / training
        return {
            "step": step,
            "loss": round(mean.item(), 4),
            "tokens_per_s": round(tokens_per_s, 1),
            "samples_per_s": round(batch_size * ctx.world_size * steps / training, 2),
            "step_time_s": round(training / steps, 4),
            "mfu": round(tokens_per_s / ctx.world_size * fpt / peak, 4) if peak else None,
            # Share of wall time spent training: checkpoint stalls count against it.
            "goodput": round(training / max(1e-9, elapsed), 4),
            "checkpoint_stall_s": round(self.checkpoint_stall, 3),
            "data_wait_s": round(self.data_wait, 3),
        }


def log(ctx: DistContext, record: dict) -> None:
    if ctx.rank == 0:
        # One write, newline included: print() writes the text and the newline apart when Python
        # runs unbuffered (PYTHONUNBUFFERED), and another process's warning on the same pipe can
        # land between them, splicing itself into the metrics line.
        sys.stdout.write(f"metrics {json.dumps(record)}\n")
        sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    ctx = init_distributed(args.collective_timeout, args.transfer_timeout)
    try:
        train(args, ctx)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
