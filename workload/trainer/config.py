"""The trainer's run config: every flag of `trainer.train` (and `trainer.ray_train`), parsed once.

`parse_args` turns the command line into a `TrainConfig`, a frozen dataclass with one field per flag
(the flag's name, dashes as underscores) and the per-model-size defaults already resolved; the rest
of the trainer takes it, or the few fields it needs. Ray Train carries it to its workers as a plain
dict (`to_dict`, `from_dict`).
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass
from pathlib import Path

from trainer import flags
from trainer.model import MODEL_SIZES, TRAINING_DEFAULTS

MAX_SEQ_LEN = {name: size.max_seq_len for name, size in MODEL_SIZES.items()}
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
    train_collective_timeout: float
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
    """The trainer's flags (trainer.flags, which the stack's plan parses jobs' args with too)."""
    return flags.train_parser(MAX_SEQ_LEN)


def parse_args(argv: list[str] | None = None) -> TrainConfig:
    """The run config from the command line; `--lr` and `--warmup-steps` default per model size."""
    p = parser()
    args = p.parse_args(argv)
    lr, warmup = TRAINING_DEFAULTS[args.model]
    args.lr = lr if args.lr is None else args.lr
    args.warmup_steps = warmup if args.warmup_steps is None else args.warmup_steps
    refusal = flags.value_refusal(args, MAX_SEQ_LEN)
    if refusal:
        p.error(refusal)
    return TrainConfig(**vars(args))
