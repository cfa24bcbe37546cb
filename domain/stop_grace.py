"""How long a default-trainer pod is given to stop (its terminationGracePeriodSeconds), sized to what
stopping takes rather than to a fixed ten minutes.

On SIGTERM (a relaunch, a drain, JobSet restarting the gang after a fault) torchrun forwards the
signal, the ranks agree at their next agreement step to stop, save once more and exit. What that
takes, at most:
  - the wait for that agreement: AGREEMENT_WAIT_S to reach the step (assumed), and where a peer is
    dead, the training collectives' timeout (`--train-collective-timeout`) before the survivors
    give up;
  - the last save, whole: staged, written to the node's disk and uploaded to S3 (domain/goodput.py),
    twice over for what the model does not see;
  - torchrun's own exit after its workers' (LAUNCHER_EXIT_S), within the pod's grace.
Bounded below by FLOOR_S and above by CEILING_S, the earlier fixed grace. A gang's restart waits for
its old pods to go, so every second of grace a survivor does not need is a second the whole gang
idles. Jobs the model does not know (a command, VERL, a CPU group) keep the ceiling."""

from __future__ import annotations

import math

from domain.goodput import CheckpointPath, modeled_goodput
from domain.model_facts import ModelShape

AGREEMENT_WAIT_S = 60.0
LAUNCHER_EXIT_S = 30
FLOOR_S = 120
CEILING_S = 600


def stop_grace_s(
    shape: ModelShape,
    world_size: int,
    ranks_per_node: int,
    path: CheckpointPath,
    collective_timeout_s: float,
) -> int:
    save = modeled_goodput(shape, 0.0, world_size, ranks_per_node, 0, 0, path)
    needed = (
        AGREEMENT_WAIT_S
        + collective_timeout_s
        + 2 * (save.stage_s + save.write_s + save.upload_s)
        + LAUNCHER_EXIT_S
    )
    return min(CEILING_S, max(FLOOR_S, 10 * math.ceil(needed / 10)))
