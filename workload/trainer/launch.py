"""torchrun as a PyTorchJob pod runs it, so that losing a node ends in a resumed job, not a failed one.

    python -m trainer.launch -m trainer.train --steps 2000 ...   # torchrun's own flags and PET_* env

Two things stand between torchrun and a job that survives a node loss under the training operator:

- torchrun shares its rendezvous TCPStore with the workers by default, and keeps the address it
  learned in the first round. A replacement node then waits for an address nobody publishes in the
  new round, and the survivors for the replacement, until the rendezvous times out (seen with torch
  2.13; pytorch/pytorch#147064 reports the same). With the store not shared, rank 0 publishes a
  fresh address every round and the replacement is admitted.
- The c10d store lives in worker-0's launcher. When worker-0's node is lost, every other launcher
  fails with a RendezvousConnectionError and exits 1, which the `ExitCode` restart policy treats as
  permanent. Exiting 138 instead (the operator's code for a retryable failure) has the operator
  recreate the pod: it meets worker-0's replacement in a new rendezvous and resumes from the newest
  complete checkpoint.

A pod the operator keeps recreating without progress (an OOM kill at every start) ends the job
after the stack's limit (trainer.recreations): the operator itself bounds nothing under ExitCode.

A worker's permanent exit (trainer.resilience.PERMANENT_EXIT_CODES: a flag it refuses, its nodes'
failed check, a checkpoint no rank can load) is the launcher's too, where torchrun's own would be
1: a TrainJob's pod failure policy reads the pod's code, and fails the job at once only on those.

A drain (node repair, a version roll, a Spot reclaim) is the kubelet's SIGTERM to the pod's PID 1,
this launcher. torchrun's handler raises SignalException (torch/distributed/elastic/multiprocessing/
api.py), its agent forwards SIGTERM to the workers and waits for them up to its shutdown timeout
(TORCH_ELASTIC_SHUTDOWN_TIMEOUT, which the stack sets under the pod's grace period; torch >= 2.12,
torch/distributed/launcher/api.py LaunchConfig) before SIGKILL, then re-raises. The workers save
the step every rank agreed on and exit retryable (trainer.resilience.Drained); this launcher then
exits 128 + the signal, retryable too, instead of the traceback's 1 that would fail the job.
"""

from __future__ import annotations

import os
import sys

from torch.distributed import run
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.elastic.rendezvous.api import RendezvousConnectionError

from trainer import debug_dumps, process, recreations
from trainer.config import parse_args
from trainer.resilience import (
    PERMANENT_EXIT_CODES,
    RECREATIONS_EXIT_CODE,
    RETRYABLE_EXIT_CODE,
    signal_exit_code,
)


def over_recreation_limit(argv: list[str]) -> bool:
    """Whether this pod was recreated too often without progress (trainer.recreations). A count
    that cannot be read or written never stops the job: it is a bound, not a health check."""
    try:
        sentence = recreations.check(argv)
    except (Exception, SystemExit) as err:  # S3 unreachable, flags argparse refuses: the trainer says
        print(f"launch: could not count this pod's starts ({err!r}); not bounded this time", file=sys.stderr)
        return False
    if sentence:
        print(sentence, file=sys.stderr, flush=True)
    return sentence is not None


def keep_flight_recorder(argv: list[str]) -> None:
    """Upload the node's flight-recorder dumps on the launcher's way out: a TrainJob's restart
    replaces the whole pod, and with it the volume the dumps were written to, before any restarted
    trainer could upload them (trainer.debug_dumps). Never changes how the launcher exits."""
    try:
        flags = recreations.trainer_args(argv)
        if flags is not None:
            debug_dumps.upload_dumps(parse_args(flags).s3_checkpoints, local_rank=0)
    except (Exception, SystemExit) as err:  # S3 unreachable, flags argparse refuses: the trainer says
        print(f"launch: could not upload the flight recorder's dumps ({err!r})", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        return run_workers(argv)
    finally:
        keep_flight_recorder(argv)


def run_workers(argv: list[str]) -> int:
    os.environ["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    if over_recreation_limit(argv):
        return RECREATIONS_EXIT_CODE
    try:
        run.main(argv)
    except RendezvousConnectionError as exc:
        print(
            f"launch: the rendezvous store ({os.environ.get('PET_RDZV_ENDPOINT', 'worker-0')}) is gone: "
            f"its node was lost ({exc}). Exiting {RETRYABLE_EXIT_CODE} so the pod is recreated and "
            "joins the replacement's rendezvous.",
            file=sys.stderr,
            flush=True,
        )
        return RETRYABLE_EXIT_CODE
    except ChildFailedError as exc:
        permanent = sorted({f.exitcode for f in exc.failures.values()} & set(PERMANENT_EXIT_CODES))
        if not permanent:
            raise  # exits 1, as torchrun would
        print(
            f"launch: a worker exited {permanent[0]}, which no restart mends; exiting {permanent[0]} too.",
            file=sys.stderr,
            flush=True,
        )
        return permanent[0]
    except SignalException as exc:
        code = signal_exit_code(exc.sigval)
        print(
            f"launch: {exc.sigval.name} (a drain): the workers were stopped, each after saving the step "
            f"the ranks agreed on. Exiting {code} so the pod is recreated and the job resumes there.",
            file=sys.stderr,
            flush=True,
        )
        return code
    return 0


if __name__ == "__main__":
    process.set_aside_startup_objects()
    process.exit_now(main())
