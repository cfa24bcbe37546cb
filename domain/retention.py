"""Which checkpoints a run keeps: the newest `keep` complete ones, and every one whose step is a
multiple of `every` (0: none beyond the newest). The default trainer applies the rule as it saves,
on its volume and in S3 (trainer.checkpoint.retained, held equal to `retained` by a test); on FSx
the volume's deletions are exported to S3 (components/shared_storage.py). The plan counts what a
run leaves behind.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from domain.memory_fit import CHECKPOINT_BYTES_PER_PARAM
from domain.model_facts import MODEL_SHAPES


def retained(steps: Iterable[int], keep: int, every: int) -> set[int]:
    ordered = sorted(steps)
    return set(ordered[-keep:]) | {s for s in ordered if every and s % every == 0}


def checkpoints_left(total_steps: int, checkpoint_every: int, keep: int, every: int) -> int:
    """How many checkpoints a run of `total_steps` leaves, saving every `checkpoint_every` steps
    and at its last step (saves by time land on no fixed step and are not counted)."""
    if total_steps < 1:
        return 0
    by_steps = total_steps // checkpoint_every if checkpoint_every > 0 else 0
    final_extra = 0 if checkpoint_every > 0 and total_steps % checkpoint_every == 0 else 1
    tail = [k * checkpoint_every for k in range(max(1, by_steps - keep + 1), by_steps + 1)]
    newest = (tail + ([total_steps] if final_extra else []))[-keep:]
    if not every:
        return len(newest)
    # The saves on a multiple of `every`: the cadence's multiples of lcm(cadence, every), and the last.
    marked = total_steps // math.lcm(checkpoint_every, every) if checkpoint_every > 0 else 0
    marked += 1 if final_extra and total_steps % every == 0 else 0
    return len(newest) + marked - sum(1 for s in newest if s % every == 0)


# A checkpoint larger than this is saved by time alone: the stack passes `--checkpoint-every 0`, so
# the trainer saves every --checkpoint-minutes (30 by default) and at its last step. By steps, the
# 1b model on two p5 nodes wrote its 13 GB every ~15 s, and each pruned save stays a day as
# noncurrent S3 versions: tens of TB a day. A job's own --checkpoint-every in `args` comes after
# and wins.
BY_TIME_ABOVE_GB = 1.0


def checkpoint_gb(model: str) -> float:
    """One whole checkpoint of the default trainer's `model`, in GB (every rank's shard together)."""
    return CHECKPOINT_BYTES_PER_PARAM * MODEL_SHAPES[model].parameters / 1e9


def cadence_args(model: str) -> list[str]:
    """The stack's checkpoint flags for a default-trainer job of `model`, before the job's own args."""
    return ["--checkpoint-every", "0"] if checkpoint_gb(model) > BY_TIME_ABOVE_GB else []


def saves_by_steps(total_steps: int, checkpoint_every: int) -> int:
    """Saves of a run of `total_steps` saving every `checkpoint_every` steps, and at its last."""
    return total_steps // checkpoint_every + (1 if total_steps % checkpoint_every else 0)


def saves_by_time(training_s: float, interval_s: float) -> int:
    """Saves over `training_s` of training, one every `interval_s` (0: none), and the last step's."""
    return 1 + (int(training_s // interval_s) if interval_s > 0 else 0)
