"""Flight-recorder dumps (each rank's last collectives before an NCCL timeout), kept past the pod.

On a collective timeout PyTorch's NCCL watchdog writes each rank's flight recorder to
`$TORCH_FR_DUMP_TEMP_FILE<rank>` (torch/csrc/distributed/c10d/FlightRecorder.cpp,
DebugInfoWriter::getWriter, which still reads the older TORCH_NCCL_DEBUG_INFO_TEMP_FILE after it)
and the rank ends. The stack points that prefix at the checkpoint volume (components/jobs/pods.py
GPU_ENV), which outlives the worker that torchrun restarts. Two uploads put them beside the job's
checkpoints in S3, which outlives the pod, for `torchfrtrace` to read: the launcher's on its way out
(trainer.launch: a TrainJob's restart replaces the whole pod and its volume), and the restarted
trainer's at its start (a PyTorchJob's pod restarted in place).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from trainer import storage

DUMP_PREFIX_ENV = "TORCH_FR_DUMP_TEMP_FILE"
S3_FOLDER = "flight-recorder"  # beside the step_* checkpoints of the job's prefix


def upload_dumps(s3_checkpoints: str, local_rank: int) -> list[str]:
    """Upload the node's dumps (local rank 0 only) to <s3_checkpoints>/flight-recorder/ and remove
    them from the volume; returns the S3 keys. Makes the dump directory first: torch opens the
    file in it, but does not create it."""
    prefix = os.environ.get(DUMP_PREFIX_ENV)
    if not prefix:
        return []
    directory = Path(prefix).parent
    directory.mkdir(parents=True, exist_ok=True)
    if local_rank != 0 or not s3_checkpoints:
        return []
    bucket, key_prefix = storage.split_s3_uri(s3_checkpoints)
    keys = []
    for dump in sorted(directory.glob(f"{Path(prefix).name}*")):
        try:
            # The dump time in the name: a rank's file has the same name after every restart.
            key = f"{key_prefix}/{S3_FOLDER}/{int(dump.stat().st_mtime)}-{dump.name}"
            storage.upload_file(dump, bucket, key)
            dump.unlink()
        except FileNotFoundError:  # on a volume the nodes share, another node's rank 0 took it
            continue
        sys.stderr.write(f"flight recorder: uploaded {dump} to s3://{bucket}/{key}\n")
        keys.append(key)
    sys.stderr.flush()
    return keys
