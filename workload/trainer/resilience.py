"""What ends or pauses training, and how each process exits.

Across nodes the ranks agree on everything that ends or pauses training: a SIGTERM on any node
(a drain, a Spot reclaim) makes every rank save the same step and exit retryable, so the job
resumes from that step once the drained node is replaced; checkpoint times come from one clock. A
rank that stops making progress dumps its stacks and exits for a restart; a job whose own nodes
fail their check exits for good. Every exit code the workload chooses is defined here,
the launcher's (trainer.launch) included.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import select
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from trainer.distributed import DistContext
from trainer.exits import CONFIG_EXIT_CODE, PREFLIGHT_EXIT_CODE

# Exit codes, read by the PyTorchJob's `ExitCode` restart policy: 1-127 are permanent failures,
# 128 and above retryable (signals are 128+); by a TrainJob's pod failure policy: those of
# PERMANENT_EXIT_CODES permanent, every other failure a restart of the gang.
# A check that found a problem (trainer.preflight on its own), or a Ray Train run that failed.
FAILED_EXIT_CODE = 1
# CONFIG_EXIT_CODE (2) and PREFLIGHT_EXIT_CODE (3): trainer.exits.
# A complete checkpoint exists that the ranks cannot load (CheckpointUnavailable): permanent, since a
# retry would meet the same missing file, and starting from step 0 would silently lose every step.
CHECKPOINT_UNAVAILABLE_EXIT_CODE = 4
# The launcher's, when its pod was recreated more often than the stack allows without a newer
# checkpoint (trainer.recreations): permanent, so the operator stops recreating it.
RECREATIONS_EXIT_CODE = 5
# The exits no restart mends, which a TrainJob's pod failure policy fails the job on at once (1 is
# not among them there: a survivor of a lost node exits 1, and its gang must be restarted).
PERMANENT_EXIT_CODES = (
    CONFIG_EXIT_CODE,
    PREFLIGHT_EXIT_CODE,
    CHECKPOINT_UNAVAILABLE_EXIT_CODE,
    RECREATIONS_EXIT_CODE,
)
# A rank that stopped making progress (a hung collective, a dead peer, a stuck loader) exits with
# this, after dumping every thread's stack: torchrun restarts the workers, which resume from the
# newest complete checkpoint.
WATCHDOG_EXIT_CODE = 86
# The training operator's user-defined retryable exit code (128 + SIGUSR1) under `ExitCode`: the
# launcher's, when worker-0's rendezvous store is gone with its node (trainer.launch).
RETRYABLE_EXIT_CODE = 138


def signal_exit_code(signum: int) -> int:
    """The exit after a signal from outside (trainer.launch's, for any signal torchrun forwards):
    128 + the signal, as a shell reports a process the signal ended; retryable."""
    return 128 + signum


# A drain (node repair, a version roll, a Spot reclaim): the kubelet's SIGTERM reaches the launcher,
# which forwards it to its workers; every rank saves the same step and exits this (143), as does the
# launcher. Retryable on every node: no pod completes (the operator marks an elastic PyTorchJob
# Succeeded as soon as one does), the drained one is recreated, and the others' torchrun restarts
# its workers, which wait in the rendezvous for it and resume from the drain's checkpoint.
DRAINED_EXIT_CODE = signal_exit_code(signal.SIGTERM)


class StopRequested:
    """Turns SIGTERM into a checkpoint at the end of the current step (agreed across ranks)."""

    def __init__(self) -> None:
        self.requested = False
        # Under Ray Train the loop runs in a worker thread; Ray handles termination there.
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum, frame) -> None:
        self.requested = True


class Agreement:
    """Decisions every rank must share: stop (SIGTERM on any node), checkpoint now (time-based, by
    rank 0's clock), and whether any rank is still writing or uploading a checkpoint (so a finished
    one is marked complete). Agreed every `every` steps (the log interval) and at the last step, in
    one tiny MAX all-reduce read back to the host once, as the step's loss is: between them the
    host never waits for the GPU and queues the next step while this one runs (torchtitan syncs
    only at log steps too). So k = `every`: a rank that wants to stop is heard within k steps, and
    every rank stops at the same step."""

    def __init__(self, ctx: DistContext, checkpoint_seconds: float, every: int):
        self.ctx = ctx
        self.checkpoint_seconds = checkpoint_seconds
        self.every = every
        self.last_checkpoint = time.monotonic()

    def due(self, step: int, last_step: int) -> bool:
        """Whether the ranks agree after `step`: every rank computes the same answer from the step."""
        return step % self.every == 0 or step == last_step

    def decide(self, stop: bool, writing: bool = False, uploading: bool = False) -> Decision:
        due = (
            self.ctx.rank == 0
            and self.checkpoint_seconds > 0
            and time.monotonic() - self.last_checkpoint >= self.checkpoint_seconds
        )
        flags = torch.tensor([int(stop), int(due), int(writing), int(uploading)], device=self.ctx.device)
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        # One read back to the host: on a GPU each read waits for the stream (a sync per flag).
        return Decision(*(bool(flag) for flag in flags.tolist()))


@dataclass(frozen=True)
class Decision:
    stop: bool
    checkpoint_due: bool
    any_writing: bool  # some rank's checkpoint files are still being written
    any_uploading: bool  # some rank's S3 upload is still running


class StepWatchdog:
    """Ends a rank that stops making progress within `timeout` seconds of its last step, whatever
    it waits on (NCCL's own timeout covers only its collectives): every thread's stack goes to
    stderr, then the process exits WATCHDOG_EXIT_CODE without cleanup, as a hung one must."""

    def __init__(self, timeout: float, rank: int):
        self.timeout, self.rank = timeout, rank
        self.last = time.monotonic()
        self.paused = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="step-watchdog", daemon=True)
        if timeout > 0:
            self._thread.start()

    def beat(self) -> None:
        self.last = time.monotonic()

    @contextlib.contextmanager
    def pause(self):
        """Around long waits that are progress (a checkpoint save and its upload)."""
        self.paused = True
        try:
            yield
        finally:
            self.paused = False
            self.beat()

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        while not self._stop.wait(min(5.0, self.timeout / 4)):
            idle = time.monotonic() - self.last
            if not self.paused and idle > self.timeout:
                header = (
                    f"watchdog: rank {self.rank} made no progress for {idle:.0f} s (limit {self.timeout:g} s); "
                    "stacks follow, then exit for a restart from the newest checkpoint\n"
                )
                sys.stderr.flush()
                write_whole(header.encode() + all_stacks())
                os._exit(WATCHDOG_EXIT_CODE)


def all_stacks() -> bytes:
    """Every thread's stack as faulthandler writes it (it needs a file descriptor: a temporary file)."""
    with tempfile.TemporaryFile() as f:
        faulthandler.dump_traceback(file=f, all_threads=True)
        f.seek(0)
        return f.read()


def write_whole(text: bytes, fd: int = 2) -> None:
    """Write to `fd` in pieces of whole lines no longer than PIPE_BUF, which a pipe never interleaves
    with another writer's: a pod's ranks share its stdout, and their watchdogs fire together, while
    faulthandler writes a stack in many small pieces ("Thread ", "0x...", a frame's name)."""
    piece = b""
    for line in text.splitlines(keepends=True):
        if piece and len(piece) + len(line) > select.PIPE_BUF:
            os.write(fd, piece)
            piece = b""
        piece += line
    if piece:
        os.write(fd, piece)


class PreflightFailed(SystemExit):
    """The job's nodes failed the check: no step runs over TCP or on missing devices. Exit code 3,
    a permanent failure under the PyTorchJob's ExitCode restart policy (signals are 128+)."""

    code = PREFLIGHT_EXIT_CODE


class Drained(SystemExit):
    """Every rank saved the step they agreed on after a SIGTERM, before the last step: exit
    DRAINED_EXIT_CODE (retryable), never 0, which would end an elastic PyTorchJob as Succeeded."""

    code = DRAINED_EXIT_CODE


class CheckpointUnavailable(SystemExit):
    """A complete checkpoint exists (in S3 or on a volume) that the ranks cannot load: exit
    CHECKPOINT_UNAVAILABLE_EXIT_CODE (permanent) with one line naming the step and the missing
    file, instead of training from step 0."""

    code = CHECKPOINT_UNAVAILABLE_EXIT_CODE

    def __init__(self, message: str):
        super().__init__(CHECKPOINT_UNAVAILABLE_EXIT_CODE)
        self.message = message

    def __str__(self) -> str:
        return self.message
