"""How long a default-trainer pod is given to stop (its terminationGracePeriodSeconds), sized to what
stopping takes rather than to a fixed ten minutes.

On SIGTERM (a relaunch, a drain, JobSet restarting the gang after a fault) torchrun forwards the
signal, the ranks agree at their next agreement step to stop, save once more and exit. What that
takes, at most (trainer.train Loop.run and CheckpointStore, workload/trainer/checkpoint.py):
  - reaching that agreement: up to `--log-every` steps of the modeled step (at least
    AGREEMENT_WAIT_S), and where a peer is dead, the training collectives' timeout
    (`--train-collective-timeout`) before the survivors give up;
  - the last save behind what is still in flight: the pending save's write and the earlier
    upload, then that save's upload, then the last one staged, written and uploaded (the plan's
    checkpoint model, domain/goodput.py): one stage, two writes, three uploads;
  - the MLflow tracker's close (TRACKER_CLOSE_S: its queue's put and its thread's join);
  - torchrun's own exit after its workers' (LAUNCHER_EXIT_S), within the pod's grace.
Bounded above by CEILING_S, the earlier fixed grace; the fixed terms alone make at least 150 s. A gang's restart waits for
its old pods to go, so every second of grace a survivor does not need is a second the whole gang
idles. Jobs the model does not know (a command, VERL, a CPU group) keep the ceiling."""

from __future__ import annotations

import math

from domain.goodput import CheckpointPath, modeled_goodput
from domain.model_facts import ModelShape

AGREEMENT_WAIT_S = 60.0
TRACKER_CLOSE_S = 60.0
LAUNCHER_EXIT_S = 30
CEILING_S = 600


def stop_grace_s(
    shape: ModelShape,
    world_size: int,
    ranks_per_node: int,
    path: CheckpointPath,
    collective_timeout_s: float,
    agreement_s: float = AGREEMENT_WAIT_S,
) -> int:
    """`agreement_s`: `--log-every` steps of the modeled step (AGREEMENT_WAIT_S at least)."""
    save = modeled_goodput(shape, 0.0, world_size, ranks_per_node, 0, 0, path)
    needed = (
        max(AGREEMENT_WAIT_S, agreement_s)
        + collective_timeout_s
        + save.stage_s
        + 2 * save.write_s
        + 3 * save.upload_s
        + TRACKER_CLOSE_S
        + LAUNCHER_EXIT_S
    )
    return min(CEILING_S, 10 * math.ceil(needed / 10))
