"""The trainer's permanent refusals, below everything else of the trainer (the device choice and the
model build raise them; trainer.resilience holds the other exit codes)."""

from __future__ import annotations

import sys

# Argparse's exit for a flag it refuses (the trainer's or torchrun's), and any job flag this
# hardware cannot run: a config error, permanent.
CONFIG_EXIT_CODE = 2
# The job's own nodes failed the check before step 0 (PreflightFailed), or are not what they
# should be (GPUs given, CUDA not starting): permanent.
PREFLIGHT_EXIT_CODE = 3


class Refused(SystemExit):
    """A failure that the same pods would meet again: its sentence on stderr, then a permanent exit
    code (trainer.resilience PERMANENT_EXIT_CODES), so the operator fails the job at once instead of restarting the
    gang into it. `code`: CONFIG_EXIT_CODE where the job's own flags cannot run on its hardware,
    PREFLIGHT_EXIT_CODE where the node is not what it should be."""

    def __init__(self, code: int, message: str):
        print(message, file=sys.stderr, flush=True)
        super().__init__(code)
        self.message = message

    def __str__(self) -> str:
        return self.message
