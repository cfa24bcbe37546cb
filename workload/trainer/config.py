"""The trainer's run config: every flag of `trainer.train` (and `trainer.ray_train`), parsed once.

`parse_args` turns the command line into a `TrainConfig`, a frozen dataclass with one field per flag
(the flag's name, dashes as underscores) and the per-model-size defaults already resolved; the rest
of the trainer takes it, or the few fields it needs. Ray Train carries it to its workers as a plain
dict (`to_dict`, `from_dict`).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from trainer.model import MODEL_SIZES, TRAINING_DEFAULTS

# The first line of trainer.train's docstring: the description `--help` shows.
DESCRIPTION = "Train the Llama-style model with FSDP2 under torchrun (what a PyTorchJob runs)."
_PATHS = ("data_cache", "checkpoint_dir")


@dataclass(frozen=True)
class TrainConfig:
    """One run's settings, a field per flag in the flags' order (their defaults: `parser`)."""

    model: str
    steps: int
    batch_size: int
    seq_len: int  # 0: the model's maximum (see `sequence_length`)
    lr: float  # resolved: the model size's default unless `--lr` is given
    warmup_steps: int  # likewise
    data: str
    val_data: str
    val_every: int
    val_batches: int
    data_cache: Path
    prefetch: int
    checkpoint_dir: Path
    checkpoint_every: int
    checkpoint_minutes: float
    keep_checkpoints: int
    keep_every: int
    s3_checkpoints: str
    log_every: int
    seed: int
    compile: bool | None  # None: compiled on GPUs, eager on CPU
    float8: bool
    step_timeout: float
    gc_every: int
    inject_hang_step: int
    preflight_gpus_per_node: int
    preflight_efa_per_node: int
    preflight_min_bus_bandwidth: float
    tracking_uri: str
    experiment: str
    collective_timeout: float
    transfer_timeout: float

    @property
    def sequence_length(self) -> int:
        """Tokens per training window: `--seq-len`, or the model's maximum."""
        return self.seq_len or MODEL_SIZES[self.model].max_seq_len

    @property
    def checks_own_nodes(self) -> bool:
        """Set by the stack on groups whose nodes it checks: the job's own nodes, before step 0."""
        return bool(
            self.preflight_gpus_per_node or self.preflight_efa_per_node or self.preflight_min_bus_bandwidth
        )

    def to_dict(self) -> dict:
        """Plain values (paths as strings), as Ray Train's `train_loop_config` carries them."""
        return {k: str(v) if isinstance(v, Path) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, values: dict) -> TrainConfig:
        return cls(**{k: Path(v) if k in _PATHS else v for k, v in values.items()})


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=DESCRIPTION)
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
    p.add_argument("--collective-timeout", type=float, default=300.0, help="seconds, training collectives")
    p.add_argument("--transfer-timeout", type=float, default=3600.0, help="seconds, downloads and uploads")
    return p


def parse_args(argv: list[str] | None = None) -> TrainConfig:
    """The run config from the command line; `--lr` and `--warmup-steps` default per model size."""
    p = parser()
    args = p.parse_args(argv)
    lr, warmup = TRAINING_DEFAULTS[args.model]
    args.lr = lr if args.lr is None else args.lr
    args.warmup_steps = warmup if args.warmup_steps is None else args.warmup_steps
    if args.gc_every < 0:
        p.error(f"--gc-every {args.gc_every}: a number of steps, or 0 for Python's own collector")
    max_len = MODEL_SIZES[args.model].max_seq_len
    if not 0 <= args.seq_len <= max_len:
        p.error(f"--seq-len {args.seq_len}: the {args.model} model handles at most {max_len} tokens")
    return TrainConfig(**vars(args))
