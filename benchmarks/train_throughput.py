"""Training throughput of the production path: the trainer's own loop, as a PyTorchJob worker runs it.

    PYTHONPATH=workload torchrun --standalone --nproc-per-node=gpu -m benchmarks.train_throughput --model 1b --steps 300
    make bench                                                     # tiny model on CPU, about a minute
    PYTHONPATH=workload python -m benchmarks.train_throughput --model 1b ... --no-compile --checkpoint-every 0

Runs `trainer.train.train` with the job's own flags (any trainer flag is passed through): the data
loader over a token file (generated, as the trainer does without `--data`), the agreement
and its host sync at each log step, logging's all-reduce, and checkpoints at the job's cadence (DCP's async save to
`--checkpoint-dir`, the last one synchronous; with `--s3-checkpoints` mirrored to S3 as well).
From rank 0's metrics records after the warm-up windows (compilation, first allocations) it reports
step time, tokens/s, MFU (PaLM/torchtitan convention, printed), goodput (time training / wall time:
checkpoint stalls count against it), data-loader waits and peak GPU memory, allocated (tensors) and
reserved (what the caching allocator holds: what the GPU must have). Every second the loop spends on
checkpoints is in a window's stall: the saves, marking a written one complete and settling its
upload, and the last save, which comes before the last record.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile

import torch
import torch.distributed as dist
from trainer.config import parse_args
from trainer.distributed import init_distributed
from trainer.model import FLOPS_CONVENTION, MODEL_SIZES, parameter_count
from trainer.train import train


def bench_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    p.add_argument("--warmup-windows", type=int, default=1, help="log windows left out (compilation)")
    return p.parse_known_args(argv)


def summarize(records: list[dict], warmup_windows: int) -> dict:
    """Whole-run figures from the measured windows: times are summed, never re-derived from rounded
    rates. A window ends at its record's step and began at the previous record's; its goodput is its
    training time over its wall time."""
    logged = [r for r in records if "loss" in r]
    ends = [r["step"] for r in logged]
    sizes = [end - begin for begin, end in zip([0, *ends], ends, strict=False)]
    windows = list(zip(logged, sizes, strict=True))[warmup_windows:]
    if not windows:
        raise SystemExit("no log window after the warm-up: raise --steps or lower --warmup-windows")
    steps = sum(n for _, n in windows)
    training = sum(r["step_time_s"] * n for r, n in windows)
    wall = sum(r["step_time_s"] * n / r["goodput"] for r, n in windows)
    mfu = [(r["mfu"], n) for r, n in windows if r["mfu"] is not None]
    return {
        "windows": len(windows),
        "steps": steps,
        "step_time_s": training / steps,
        "tokens_per_s": sum(r["tokens_per_s"] * r["step_time_s"] * n for r, n in windows) / training,
        "mfu": sum(m * n for m, n in mfu) / sum(n for _, n in mfu) if mfu else None,
        "goodput": training / wall,
        "checkpoint_stall_s": sum(r["checkpoint_stall_s"] for r, _ in windows),
        # The warm-up windows' too: every second of checkpoint work in the run.
        "checkpoint_run_s": sum(r["checkpoint_stall_s"] for r in logged),
        "data_wait_s": sum(r["data_wait_s"] for r, _ in windows),
    }


def main(argv: list[str] | None = None) -> int:
    bench, rest = bench_args(argv)
    ctx = init_distributed()
    with tempfile.TemporaryDirectory() as tmp:
        defaults = ["--checkpoint-dir", f"{tmp}/ckpt", "--data-cache", f"{tmp}/data"]
        cfg = parse_args([*defaults, *rest])
        records: list[dict] = []
        with contextlib.redirect_stdout(io.StringIO()):  # the trainer's own lines; the summary follows
            train(cfg, ctx, report=records.append)
    memory = None
    if ctx.device.type == "cuda":
        memory = (torch.cuda.max_memory_allocated(ctx.device), torch.cuda.max_memory_reserved(ctx.device))
    if ctx.rank == 0:
        print(report(cfg, ctx, summarize(records, bench.warmup_windows), memory))
    dist.destroy_process_group()
    return 0


def report(cfg, ctx, s: dict, memory: tuple[int, int] | None) -> str:
    """The summary; `memory` is rank 0's peak (allocated, reserved) bytes on a GPU."""
    size = MODEL_SIZES[cfg.model]
    device = torch.cuda.get_device_name(ctx.device) if ctx.device.type == "cuda" else "CPU"
    cadence = f"every {cfg.checkpoint_every} steps" if cfg.checkpoint_every else "at the end only"
    if cfg.checkpoint_minutes:
        cadence += f" and every {cfg.checkpoint_minutes:g} min"
    lines = [
        f"model {cfg.model} ({parameter_count(size) / 1e6:.1f}M parameters), batch {cfg.batch_size} x "
        f"{cfg.sequence_length} per rank, {ctx.world_size} rank(s) on {device}",
        f"torch {torch.__version__}, compile={cfg.compile if cfg.compile is not None else ctx.device.type == 'cuda'}, "
        f"float8={cfg.float8}, checkpoints {cadence}",
        f"measured over {s['steps']} steps ({s['windows']} log windows after the warm-up):",
        f"  step time    {s['step_time_s'] * 1000:.1f} ms",
        f"  tokens/s     {s['tokens_per_s']:,.0f} ({s['tokens_per_s'] / ctx.world_size:,.0f} per rank)",
        f"  MFU          {s['mfu']:.1%}"
        if s["mfu"] is not None
        else "  MFU          n/a (no peak figure for this device)",
        f"  goodput      {s['goodput']:.1%} (checkpoint stalls {s['checkpoint_stall_s']:.3f} s; "
        f"{s['checkpoint_run_s']:.3f} s in the whole run, the last save included)",
        f"  data wait    {s['data_wait_s']:.3f} s",
    ]
    if memory is not None:
        allocated, reserved = memory
        lines.append(
            f"  peak memory  {allocated / 2**30:.1f} GiB allocated, {reserved / 2**30:.1f} GiB reserved on rank 0's GPU"
        )
    lines.append(f"convention   {FLOPS_CONVENTION}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
