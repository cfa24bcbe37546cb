"""Train the Llama-style model with FSDP2 under torchrun (what a PyTorchJob runs).

    torchrun --nproc-per-node=gpu -m trainer.train --model 1b --steps 2000 \\
        --data s3://bucket/datasets/tokens.bin --checkpoint-dir /checkpoints --s3-checkpoints s3://bucket/checkpoints/job

Rank, world size and local rank come from the torchrun/PyTorchJob environment. GPUs: NCCL, bf16
parameters with fp32 reductions. CPU: gloo, fp32, the same code. Rank 0 prints one `metrics {json}`
line per log interval. A SIGTERM (pod eviction, Spot reclaim) saves a checkpoint before exiting.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from trainer import checkpoint
from trainer.data import TokenWindows, resolve_dataset, write_synthetic_dataset
from trainer.model import MODEL_SIZES, Transformer, flops_per_token

# Dense bf16 peak FLOP/s per GPU, for MFU (vendor datasheets, SXM parts).
PEAK_BF16_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "L40S": 362e12, "L4": 121e12}
SYNTHETIC_TOKENS = 2_000_000


@dataclass(frozen=True)
class DistContext:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=sorted(MODEL_SIZES), default="tiny")
    p.add_argument("--steps", type=int, default=100, help="total optimizer steps of the run")
    p.add_argument("--batch-size", type=int, default=8, help="sequences per rank per step")
    p.add_argument("--seq-len", type=int, default=0, help="0: the model's maximum")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup-steps", type=int, default=10)
    p.add_argument("--data", default="", help="token file: local path or s3://; empty: generated data")
    p.add_argument("--data-cache", type=Path, default=Path("/tmp/trainstack-data"))
    p.add_argument("--checkpoint-dir", type=Path, default=Path("/checkpoints"))
    p.add_argument("--checkpoint-every", type=int, default=50)
    p.add_argument("--keep-checkpoints", type=int, default=3)
    p.add_argument("--s3-checkpoints", default="", help="s3://bucket/prefix to mirror checkpoints to")
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--compile", action="store_true", help="torch.compile each transformer block")
    return p.parse_args(argv)


def init_distributed() -> DistContext:
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
        )
    return DistContext(dist.get_rank(), dist.get_world_size(), local_rank, device)


def build_model(name: str, ctx: DistContext, compile_blocks: bool = False) -> torch.nn.Module:
    torch.manual_seed(0)  # same initial weights on every rank before sharding
    model = Transformer(MODEL_SIZES[name]).to(ctx.device)
    if compile_blocks:  # per block, so FSDP2 keeps its per-block all-gathers
        for block in model.blocks:
            block.compile()
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


def train_step(
    model: torch.nn.Module, optimizer, inputs: torch.Tensor, targets: torch.Tensor
) -> torch.Tensor:
    """One optimizer step; returns the (local) loss."""
    logits = model(inputs)
    loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
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
    return next((v for k, v in PEAK_BF16_FLOPS.items() if k in name), None)


def dataset_path(args: argparse.Namespace, vocab_size: int, ctx: DistContext) -> Path:
    if args.data:
        if ctx.local_rank == 0:  # one download per node; the others find it cached
            resolve_dataset(args.data, args.data_cache)
        dist.barrier()
        return resolve_dataset(args.data, args.data_cache)
    path = args.data_cache / f"synthetic-v{vocab_size}-s{args.seed}.bin"
    if ctx.local_rank == 0 and not path.exists():
        write_synthetic_dataset(path, SYNTHETIC_TOKENS, vocab_size, seed=args.seed)
    dist.barrier()
    return path


class StopRequested:
    """Turns SIGTERM into a checkpoint at the end of the current step."""

    def __init__(self) -> None:
        self.requested = False
        # Under Ray Train the loop runs in a worker thread; Ray handles termination there.
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum, frame) -> None:
        self.requested = True


def train(args: argparse.Namespace, ctx: DistContext, report: Callable[[dict], None] | None = None) -> dict:
    cfg = MODEL_SIZES[args.model]
    seq_len = args.seq_len or cfg.max_seq_len
    data = TokenWindows(
        dataset_path(args, cfg.vocab_size, ctx), cfg.vocab_size, seq_len, ctx.rank, ctx.world_size, args.seed
    )
    model = build_model(args.model, ctx, args.compile)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1, fused=ctx.device.type == "cuda"
    )
    args.checkpoint_dir.mkdir(parents=True, exist_ok=True)
    start = checkpoint.load_latest(args.checkpoint_dir, model, optimizer, args.s3_checkpoints or None)
    log(
        ctx,
        {
            "event": "start",
            "resumed_from": start,
            "steps": args.steps,
            "world_size": ctx.world_size,
            "model": args.model,
        },
    )

    stop = StopRequested()
    tokens_per_step = args.batch_size * seq_len * ctx.world_size
    fpt, peak = flops_per_token(cfg, seq_len), peak_flops(ctx.device)
    metrics: dict = {"step": start}
    window_start, window_steps = time.perf_counter(), 0
    step = start
    while step < args.steps:
        inputs, targets = (t.to(ctx.device, non_blocking=True) for t in data.batch(step, args.batch_size))
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, args)
        loss = train_step(model, optimizer, inputs, targets)
        step += 1
        window_steps += 1

        if step % args.log_every == 0 or step == args.steps:
            mean_loss = loss.detach().clone()
            dist.all_reduce(mean_loss, op=dist.ReduceOp.SUM)  # gloo has no AVG: sum, then divide
            mean_loss /= ctx.world_size
            if ctx.device.type == "cuda":
                torch.cuda.synchronize()
            elapsed = time.perf_counter() - window_start
            tokens_per_s = tokens_per_step * window_steps / elapsed
            metrics = {
                "step": step,
                "loss": round(mean_loss.item(), 4),
                "tokens_per_s": round(tokens_per_s, 1),
                "step_time_s": round(elapsed / window_steps, 4),
                "mfu": round(tokens_per_s / ctx.world_size * fpt / peak, 4) if peak else None,
                "lr": lr_at(step - 1, args),
            }
            log(ctx, metrics)
            if report:
                report(metrics)
            window_start, window_steps = time.perf_counter(), 0

        if step % args.checkpoint_every == 0 or step == args.steps or stop.requested:
            checkpoint.save(
                args.checkpoint_dir,
                step,
                model,
                optimizer,
                args.s3_checkpoints or None,
                args.keep_checkpoints,
            )
            log(ctx, {"event": "checkpoint", "step": step})
            window_start = time.perf_counter()  # saving is not training time
        if stop.requested:
            log(ctx, {"event": "stopped", "step": step, "reason": "SIGTERM"})
            break
    return metrics


def log(ctx: DistContext, record: dict) -> None:
    if ctx.rank == 0:
        print("metrics " + json.dumps(record), flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    ctx = init_distributed()
    try:
        train(args, ctx)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
