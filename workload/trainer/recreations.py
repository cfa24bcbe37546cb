"""How often a PyTorchJob's pod was created while the job's newest complete checkpoint stayed the
same: past the stack's limit the launcher exits for good instead of training again.

Under the `ExitCode` restart policy the training operator (v1.9.4) deletes a pod that failed with a
retryable code (128 and above: a signal, an OOM kill, trainer.launch's 138) and creates it again,
without end: `runPolicy.backoffLimit` sums the restart counts of running pods' containers
(pkg/core/job.go, PastBackoffLimit), which stay 0 under the pod restartPolicy `Never` that
ExitCode sets (pkg/core/pod.go, SetRestartPolicy), and its other test reads a work queue whose
NumRequeues is always 0 in this controller (pkg/common/util/fake_workqueue.go). A pod that is OOM
killed at every start would hold its GPUs for ever. A code from 1 to 127 fails the job
(pkg/controller.v1/common/pod.go, ReconcilePods), so the launcher counts its pod's starts where the
checkpoints outlive the pod (S3, or the shared volume) and exits RECREATIONS_EXIT_CODE once the pod
was recreated more than the limit without a newer checkpoint. A start after progress (a drain
saves a checkpoint first) begins the count again; so does a new run of the job (another spec or
image: the stack's run id).
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

from trainer import checkpoint, storage
from trainer.config import parse_args
from trainer.resilience import RECREATIONS_EXIT_CODE

# Set by the stack on a PyTorchJob's pods (components/job_pods.py; a test holds the names equal).
LIMIT_ENV = "TRAINSTACK_MAX_RECREATIONS"
RUN_ENV = "TRAINSTACK_RUN"
RECORDS = "recreations"


def trainer_args(argv: list[str]) -> list[str] | None:
    """The trainer's own flags in torchrun's command line (`... -m trainer.train <flags>`)."""
    for i, arg in enumerate(argv[:-1]):
        if arg == "-m" and argv[i + 1] == "trainer.train":
            return argv[i + 2 :]
    return None


def newest_step(root: Path, s3_uri: str) -> int:
    """The newest complete checkpoint where the job keeps them (0: none yet)."""
    steps = checkpoint.s3_complete_steps(s3_uri) if s3_uri else checkpoint.complete_steps(root)
    return steps[-1] if steps else 0


def check(argv: list[str], pod: str | None = None) -> str | None:
    """Count this pod's start; the sentence to exit with when it is over the limit, else None."""
    limit, flags = os.environ.get(LIMIT_ENV), trainer_args(argv)
    if not limit or flags is None:  # unset: not bounded (a pod the stack did not render)
        return None
    cfg, limit = parse_args(flags), int(limit)
    pod = pod or socket.gethostname()  # `<job>-worker-<i>`: the same name each time it is created
    step, run = newest_step(cfg.checkpoint_dir, cfg.s3_checkpoints), os.environ.get(RUN_ENV, "")
    name = f"{RECORDS}/{pod}.json"
    if cfg.s3_checkpoints:
        bucket, prefix = storage.split_s3_uri(cfg.s3_checkpoints)
        before = storage.read_text(bucket, f"{prefix}/{name}")
    else:
        path = cfg.checkpoint_dir / name
        before = path.read_text() if path.is_file() else None
    last = json.loads(before) if before else {}
    same = last.get("run") == run and last.get("step") == step
    starts = last.get("starts", 0) + 1 if same else 1
    record = json.dumps({"run": run, "step": step, "starts": starts})
    if cfg.s3_checkpoints:
        storage.write_text(record, bucket, f"{prefix}/{name}")
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(record)
    if starts - 1 <= limit:
        return None
    where = f"{cfg.s3_checkpoints.rstrip('/')}/{name}" if cfg.s3_checkpoints else str(path)
    return (
        f"launch: pod {pod} was created {starts - 1} times since the job's newest checkpoint "
        f"(step {step}) without saving a newer one, more than the {limit} the stack allows "
        f"(jobs[].maxRecreations); exiting {RECREATIONS_EXIT_CODE}, which fails the job. Its logs "
        f"say why each start ended; delete {where} to let an unchanged job try again."
    )
