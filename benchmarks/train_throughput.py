"""Training throughput of the workload's model: tokens/s, step time and MFU on one device.

    python benchmarks/train_throughput.py --model 1b --batch-size 8 --seq-len 2048   # on a GPU
    python benchmarks/train_throughput.py                                           # tiny, CPU

Runs the same FSDP2 model and optimizer as trainer.train (world size 1) on random tokens, after
warm-up steps, and prints the figures. The target on H100/H200 for the 1b model is >= 40% MFU.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "workload"))

from trainer.model import MODEL_SIZES, flops_per_token, parameter_count
from trainer.train import build_model, init_distributed, peak_flops, train_step


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=sorted(MODEL_SIZES), default="tiny")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=0, help="0: the model's maximum")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--compile", action="store_true", help="torch.compile each block")
    args = p.parse_args()

    os.environ.setdefault("MASTER_PORT", "29533")
    ctx = init_distributed()
    cfg = MODEL_SIZES[args.model]
    seq_len = args.seq_len or cfg.max_seq_len
    model = build_model(args.model, ctx, args.compile)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=ctx.device.type == "cuda")
    tokens = torch.randint(0, cfg.vocab_size, (args.batch_size, seq_len + 1), device=ctx.device)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]

    def sync() -> None:
        if ctx.device.type == "cuda":
            torch.cuda.synchronize()

    for _ in range(args.warmup):
        train_step(model, optimizer, inputs, targets)
    sync()
    start = time.perf_counter()
    for _ in range(args.steps):
        train_step(model, optimizer, inputs, targets)
    sync()
    elapsed = time.perf_counter() - start

    step_time = elapsed / args.steps
    tokens_per_s = args.batch_size * seq_len / step_time
    peak = peak_flops(ctx.device)
    device_name = torch.cuda.get_device_name(ctx.device) if ctx.device.type == "cuda" else "CPU"
    print(
        f"model {args.model} ({parameter_count(cfg) / 1e6:.1f}M parameters), batch {args.batch_size} x {seq_len}"
    )
    print(f"device {device_name}, torch {torch.__version__}, compile={args.compile}")
    print(f"step time   {step_time * 1000:.1f} ms (mean of {args.steps} after {args.warmup} warm-up)")
    print(f"tokens/s    {tokens_per_s:,.0f}")
    if peak:
        print(
            f"MFU         {tokens_per_s * flops_per_token(cfg, seq_len) / peak:.1%} of {peak / 1e12:.0f} TFLOP/s bf16"
        )
        print(f"peak memory {torch.cuda.max_memory_allocated(ctx.device) / 2**30:.1f} GiB")
    else:
        print("MFU         n/a (no GPU peak figure for this device)")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
