"""Modeled goodput of a default-trainer job: the share of wall time spent training when every
checkpoint is staged, written to the node's disk and uploaded to S3.

Between two saves the job trains for an interval (`--checkpoint-every` steps of the modeled step
time, domain/step_time.py, or `--checkpoint-minutes`, whichever comes first). A save then stalls training while each
rank copies its shard into its pinned host buffer (`dcp.async_save`'s staging); the write to the
node's checkpoint disk and the upload to S3 run in the background. The next save waits for both
(the trainer's `PendingSave.finish` settles the previous upload first, and the one staging buffer
is reused), so a write or upload longer than the interval stalls it:

    cycle = stage + max(interval, write, upload)        goodput = interval / cycle

Figures the model assumes, named so a measured run can replace them:
- STAGING_GB_PER_S: device-to-host copy per GPU into pinned memory. PCIe Gen4 x16 moves ~25 GB/s
  one way and Gen5 twice that; DCP copies tensor by tensor and GPUs share PCIe switches: 10.
- S3_UPLOAD_GB_PER_S: the most one node uploads whatever its network: 8 GB/s, the highest S3
  throughput measured from one instance with many parallel transfers (dvassallo/s3-benchmark,
  c5n.18xlarge, 8,003 MB/s).
- SAVE_FIXED_S: what a save stalls beyond its copy, however small the state: DCP plans it with
  collectives over every rank (the save plans gathered and scattered on the gloo control group),
  and the previous save's barriers and marker. 0.2 s, assumed.
- UPLOAD_FIXED_S: what an upload takes beyond its bytes: each file and the marker is a PUT whose
  round trip is tens of milliseconds, the marker waits for every rank's files. 0.5 s, assumed.
  Without these two a tiny model's save would cost microseconds.
"""

from __future__ import annotations

from dataclasses import dataclass

from domain.memory_fit import CHECKPOINT_BYTES_PER_PARAM
from domain.model_facts import ModelShape

STAGING_GB_PER_S = 10.0
S3_UPLOAD_GB_PER_S = 8.0
SAVE_FIXED_S = 0.2
UPLOAD_FIXED_S = 0.5
GB = 1e9


@dataclass(frozen=True)
class Goodput:
    checkpoint_gb_per_node: float
    step_s: float
    interval_s: float  # training between two saves; 0: the job never checkpoints on its own
    stage_s: float
    write_s: float
    upload_s: float

    @property
    def cycle_s(self) -> float:
        return self.stage_s + max(self.interval_s, self.write_s, self.upload_s)

    @property
    def goodput(self) -> float:
        return self.interval_s / self.cycle_s if self.interval_s else 1.0

    @property
    def bottleneck(self) -> str:
        """What bounds the cycle: training, or the save that outlasts it."""
        slowest = max(
            ("training", self.interval_s),
            ("write", self.write_s),
            ("upload", self.upload_s),
            key=lambda x: x[1],
        )
        return slowest[0]


@dataclass(frozen=True)
class CheckpointPath:
    """Where a node's checkpoints go: its disk's write throughput and its network to S3."""

    write_gb_per_s: float
    network_gbps: float  # sustained: the instance's baseline, not its burst
    uploads: bool = True  # mirrored to S3 (--s3-checkpoints)


def checkpoint_interval_s(step: float, checkpoint_every: int, checkpoint_minutes: float) -> float:
    """Training between two saves: `checkpoint_every` steps of `step` seconds or `checkpoint_minutes`,
    whichever comes first (either 0: off); 0 where neither is on."""
    intervals = [checkpoint_every * step] if checkpoint_every > 0 else []
    intervals += [checkpoint_minutes * 60] if checkpoint_minutes > 0 else []
    return min(intervals, default=0.0)


def modeled_goodput(
    shape: ModelShape,
    step: float,
    world_size: int,
    ranks_per_node: int,
    checkpoint_every: int,
    checkpoint_minutes: float,
    path: CheckpointPath,
) -> Goodput:
    """The save cycle of a job whose modeled step takes `step` seconds."""
    rank_bytes = CHECKPOINT_BYTES_PER_PARAM * shape.parameters / world_size
    node_bytes = rank_bytes * ranks_per_node
    upload_gb_per_s = min(path.network_gbps / 8, S3_UPLOAD_GB_PER_S)
    return Goodput(
        checkpoint_gb_per_node=node_bytes / GB,
        step_s=step,
        interval_s=checkpoint_interval_s(step, checkpoint_every, checkpoint_minutes),
        stage_s=SAVE_FIXED_S + rank_bytes / GB / STAGING_GB_PER_S,
        write_s=node_bytes / GB / path.write_gb_per_s,
        upload_s=UPLOAD_FIXED_S + node_bytes / GB / upload_gb_per_s if path.uploads else 0.0,
    )
