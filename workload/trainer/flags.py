"""The trainer's flags, defined once: `trainer.train` and `trainer.ray_train` parse their command
lines with these parsers, and the stack's plan parses every default-trainer job's `args` with the
same ones (config/trainer_args.py) before anything is registered, so a flag the trainer would refuse
is refused at plan time, in the trainer's words.

The standard library only: the plan loads this file without the image's torch. The models' names
and lengths come in as an argument (the trainer's trainer.model, the plan's domain/model_facts.py,
which a test holds equal).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from pathlib import Path

# The first line of trainer.train's docstring: the description `--help` shows.
DESCRIPTION = "Train the Llama-style model with FSDP2 under torchrun (what a PyTorchJob runs)."

# GPUs with float8 tensor cores: CUDA compute capability 8.9 (Ada: L4, L40S) and newer (Hopper,
# Blackwell), what torch's float8 matmul (torch._scaled_mm) needs.
FLOAT8_CAPABILITY = (8, 9)


def train_parser(max_seq_len: Mapping[str, int]) -> argparse.ArgumentParser:
    """`trainer.train`'s flags; `max_seq_len`: each model's name and its longest sequence."""
    p = argparse.ArgumentParser(description=DESCRIPTION)
    p.add_argument("--model", choices=sorted(max_seq_len), default="tiny")
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
    # By time as well as by steps: on a slow GPU or a long sequence 50 steps can be hours of work.
    p.add_argument(
        "--checkpoint-minutes",
        type=float,
        default=30.0,
        help="also checkpoint every N minutes (0: steps only)",
    )
    p.add_argument(
        "--keep-checkpoints", type=int, default=3, help="newest complete checkpoints kept, on disk and in S3"
    )
    p.add_argument(
        "--keep-every", type=int, default=0, help="also keep steps that are multiples of N (0: none)"
    )
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
    p.add_argument(
        "--gc-every",
        type=int,
        default=50,
        help="steps between Python's garbage collections, at the same step on every rank "
        "(0: whenever Python's own collector decides, on each rank apart)",
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
    p.add_argument(
        "--collective-timeout",
        type=float,
        default=300.0,
        help="seconds, training collectives until the first step is done (compilation, warm-up)",
    )
    # A fault stops the whole gang, and its survivors wait in a collective with the dead peer until this
    # runs out: once the first step is done (compiled, warmed up; torchtitan does the same), no healthy
    # collective comes near it.
    p.add_argument(
        "--train-collective-timeout",
        type=float,
        default=100.0,
        help="seconds, training collectives after the first step (0: keep --collective-timeout)",
    )
    p.add_argument("--transfer-timeout", type=float, default=3600.0, help="seconds, downloads and uploads")
    return p


def ray_parser() -> argparse.ArgumentParser:
    """`trainer.ray_train`'s own flags, read before the rest goes to `train_parser`."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--num-workers", type=int, default=1)
    p.add_argument("--use-gpu", action="store_true")
    p.add_argument("--max-failures", type=int, default=3, help="worker-group restarts Ray may make")
    p.add_argument(
        "--storage-path",
        default="",
        help="Ray Train run state without --s3-checkpoints (default: local); with them, their prefix",
    )
    return p


def value_refusal(args: argparse.Namespace, max_seq_len: Mapping[str, int]) -> str | None:
    """The trainer's sentence for a value its parser takes but no run can use; None when all can."""
    if args.gc_every < 0:
        return f"--gc-every {args.gc_every}: a number of steps, or 0 for Python's own collector"
    longest = max_seq_len[args.model]
    if not 0 <= args.seq_len <= longest:
        return f"--seq-len {args.seq_len}: the {args.model} model handles at most {longest} tokens"
    return None


def float8_refusal(found: str) -> str:
    """The trainer's sentence for --float8 where the GPU (`found`: its name, or "no GPU") has no
    float8 tensor cores."""
    return (
        f"--float8 needs a GPU with float8 tensor cores (H100/H200, L4/L40S), and this pod has {found}: "
        "drop --float8 or run the job on such a group"
    )


def flag_names(parser: argparse.ArgumentParser) -> list[str]:
    """Every long flag the parser takes, hidden ones included."""
    return sorted(s for action in parser._actions for s in action.option_strings if s.startswith("--"))
