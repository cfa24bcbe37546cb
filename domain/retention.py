"""Which checkpoints a run keeps: the newest `keep` complete ones, and every one whose step is a
multiple of `every` (0: none beyond the newest). The default trainer applies the rule as it saves,
on its volume and in S3 (trainer.checkpoint.retained, held equal to `retained` by a test); on FSx
the volume's deletions are exported to S3 (components/shared_storage.py). The plan counts what a
run leaves behind.
"""

from __future__ import annotations

import math
from collections.abc import Iterable


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
