"""Training throughput of the workload's model: step time, tokens/s per GPU, MFU, goodput.

    python benchmarks/train_throughput.py --model 1b --batch-size 8 --seq-len 2048   # on a GPU
    python benchmarks/train_throughput.py --model 1b ... --no-compile                # eager
    python benchmarks/train_throughput.py                                           # tiny, CPU

Part 1 times the same FSDP2 model and optimizer as trainer.train (world size 1) on random tokens,
after warm-up steps (compiled blocks by default on a GPU). Part 2 runs the trainer's own loop on
generated data with checkpoints on, and reports its goodput (checkpoint stalls included) and the
data loader's stall time. MFU follows the PaLM/torchtitan convention (printed). The target on
8 x H100 for the 1b model is >= 45% MFU.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "workload"))

from trainer.config import parse_args
from trainer.distributed import init_distributed
from trainer.metrics import peak_flops
from trainer.model import FLOPS_CONVENTION, MODEL_SIZES, flops_per_token, parameter_count
from trainer.parallelize import build_model
from trainer.train import train, train_step


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=sorted(MODEL_SIZES), default="tiny")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=0, help="0: the model's maximum")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    compile_group = p.add_mutually_exclusive_group()
    compile_group.add_argument("--compile", dest="compile", action="store_true", default=None)
    compile_group.add_argument("--no-compile", dest="compile", action="store_false")
    p.add_argument("--float8", action="store_true")
    p.add_argument("--loop-steps", type=int, default=40, help="steps of the trainer loop (0: skip part 2)")
    args = p.parse_args()

    os.environ.setdefault("MASTER_PORT", "29533")
    ctx = init_distributed()
    cfg = MODEL_SIZES[args.model]
    seq_len = args.seq_len or cfg.max_seq_len
    model = build_model(args.model, ctx, args.compile, float8=args.float8)
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
    compiled = args.compile if args.compile is not None else ctx.device.type == "cuda"
    print(f"device {device_name}, torch {torch.__version__}, compile={compiled}, float8={args.float8}")
    print(f"step time   {step_time * 1000:.1f} ms (mean of {args.steps} after {args.warmup} warm-up)")
    print(f"tokens/s    {tokens_per_s:,.0f}")
    if peak:
        print(
            f"MFU         {tokens_per_s * flops_per_token(cfg, seq_len) / peak:.1%} of {peak / 1e12:.0f} TFLOP/s bf16"
        )
        print(f"peak memory {torch.cuda.max_memory_allocated(ctx.device) / 2**30:.1f} GiB")
    else:
        print("MFU         n/a (no GPU peak figure for this device)")
    print(f"convention  {FLOPS_CONVENTION}")
    del model, optimizer
    if args.loop_steps:
        loop(args, ctx)
    dist.destroy_process_group()
    return 0


def loop(args: argparse.Namespace, ctx) -> None:
    """The trainer's own loop with checkpoints every quarter of the run: goodput and data stalls."""
    with tempfile.TemporaryDirectory() as tmp:
        train_args = parse_args(
            ["--model", args.model, "--steps", str(args.loop_steps), "--batch-size", str(args.batch_size),
             "--seq-len", str(args.seq_len), "--log-every", str(args.loop_steps),
             "--checkpoint-every", str(max(1, args.loop_steps // 4)), "--checkpoint-dir", f"{tmp}/ckpt",
             "--data-cache", f"{tmp}/data", *(["--no-compile"] if args.compile is False else [])]
        )  # fmt: skip
        seen: list[dict] = []
        with contextlib.redirect_stdout(io.StringIO()):
            train(train_args, ctx, report=seen.append)
    last = seen[-1]
    print(f"trainer loop {args.loop_steps} steps, a checkpoint every {max(1, args.loop_steps // 4)}:")
    print(f"  goodput     {last['goodput']:.1%} (checkpoint stall {last['checkpoint_stall_s']:.2f} s)")
    print(f"  data wait   {last['data_wait_s']:.3f} s over the run's last window")
    print(f"  tokens/s    {last['tokens_per_s']:,.0f} ({last['tokens_per_s'] / ctx.world_size:,.0f} per GPU)")


if __name__ == "__main__":
    sys.exit(main())
