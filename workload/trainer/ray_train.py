"""Ray Train entrypoint (what a RayJob or a RayCluster submission runs): TorchTrainer over trainer.train.

    python -m trainer.ray_train --num-workers 16 --use-gpu --model 1b --steps 2000 \\
        --checkpoint-dir /checkpoints --s3-checkpoints s3://bucket/checkpoints/job

Ray Train starts one worker per GPU and sets up torch.distributed (with `--collective-timeout`);
each worker runs the same training loop, data sharding and checkpoint code as the torchrun path.
Ray's own fault tolerance is used, not bypassed: every finished checkpoint is registered with Ray
Train, `FailureConfig(max_failures)` bounds the restarts, and a restarted worker group resumes from
the newest complete checkpoint. No checkpoint is uploaded twice:

- With `--s3-checkpoints` the run lives at that prefix (storage path its parent, name its last
  part), so the step directories the trainer mirrors there are inside Ray's run and Ray registers
  them where they are (`NO_UPLOAD`), each once its S3 marker is there. A restart resumes from S3's
  newest complete step, as under torchrun.
- Without, each worker hands Ray its own files of the checkpoint (hard links on the checkpoint
  volume), which Ray uploads to `--storage-path` in the background (`ASYNC`); a restart copies Ray's
  checkpoint onto the volume. Multi-node runs need a storage path every node reaches.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import tempfile
from pathlib import Path, PurePosixPath

import pyarrow.fs
import ray
import ray.train
import torch
from ray.train import (
    Checkpoint,
    CheckpointConfig,
    CheckpointUploadMode,
    FailureConfig,
    RunConfig,
    ScalingConfig,
)
from ray.train.torch import TorchConfig, TorchTrainer

from trainer import checkpoint, flags, process, storage
from trainer.config import TrainConfig, parse_args
from trainer.distributed import DistContext, control_group
from trainer.resilience import FAILED_EXIT_CODE, Drained
from trainer.train import train

# Where a worker links its files for Ray's background upload (on the checkpoint volume: a hard
# link, never a copy); Ray deletes each directory once uploaded, a restart what a failure left.
UPLOADS = ".ray-uploads"
# The node check reads the network from NCCL's log, whose settings NCCL reads once, at its first
# line (trainer.preflight.log_nccl_network). Ray Train creates each worker's process group before
# the training function runs (ray/train/torch/config.py, _TorchBackend.on_start), so the settings
# come from a worker process setup hook: Ray runs it in each of the job's worker processes as the
# process starts, before any task or actor (ray/_private/workers/default_worker.py).
NCCL_LOG_HOOK = "trainer.preflight.log_nccl_network"


class RayCheckpoints:
    """Registers the trainer's finished checkpoints with Ray Train (every worker calls it alike:
    `ray.train.report` is a barrier across workers)."""

    def __init__(self, rank: int, root: Path, s3_uri: str | None):
        self.rank, self.root, self.s3_uri = rank, root, s3_uri
        self.unregistered: int | None = None

    def finished(self, step: int, path: Path) -> None:
        """`on_checkpoint`: `step` is complete on the volumes; its S3 copy may still be uploading."""
        if self.s3_uri is None:
            self.upload(step, path)
            return
        # PendingSave.finish settles the previous checkpoint's upload (S3 marker last) before it
        # marks this one, so the previous step is complete in S3 by now.
        if self.unregistered is not None:
            self.register(self.unregistered)
        self.unregistered = step

    def flush(self) -> None:
        """After train() returns: Loop.run has settled every upload, the last marker included."""
        if self.unregistered is not None:
            self.register(self.unregistered)
            self.unregistered = None

    def register(self, step: int) -> None:
        """Ray records the S3 copy where it is (ray/train/v2/_internal/execution/context.py,
        TrainContext.report: NO_UPLOAD takes a checkpoint inside the run's directory as is)."""
        found = None
        if self.rank == 0:  # Ray keeps the first worker's checkpoint (report_handler.py)
            bucket, prefix = storage.split_s3_uri(self.s3_uri)
            filesystem = ray.train.get_context().get_storage().storage_filesystem
            path = checkpoint.step_dir(Path(bucket, prefix), step).as_posix()  # pyarrow's path: no s3://
            found = Checkpoint(path=path, filesystem=filesystem)
        ray.train.report(
            {"checkpoint_step": step}, checkpoint=found, checkpoint_upload_mode=CheckpointUploadMode.NO_UPLOAD
        )

    def upload(self, step: int, path: Path) -> None:
        """This worker's own files (rank 0 adds the marker), uploaded by Ray on its upload thread,
        which deletes the links when done (ASYNC's default)."""
        uploads = self.root / UPLOADS
        uploads.mkdir(exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f"{path.name}-rank{self.rank}-", dir=uploads))
        files = checkpoint.rank_files(path, self.rank) + (
            [path / checkpoint.MARKER] if self.rank == 0 else []
        )
        for file in files:
            try:
                os.link(file, staging / file.name)
            except OSError:  # a volume without hard links
                shutil.copy2(file, staging / file.name)
        ray.train.report(
            {"checkpoint_step": step},
            checkpoint=Checkpoint.from_directory(staging),
            checkpoint_upload_mode=CheckpointUploadMode.ASYNC,
        )


def restore(cfg: TrainConfig, local_rank: int) -> None:
    """Before training, on a restarted worker group. With S3 nothing to do: the store resumes from
    S3's newest complete step, never older than the one Ray registered. Without, one process per
    node copies Ray's checkpoint onto the volume, and drops the links a failure left unuploaded."""
    if cfg.s3_checkpoints or local_rank != 0:
        return
    cfg.checkpoint_dir.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(cfg.checkpoint_dir / UPLOADS, ignore_errors=True)
    restored = ray.train.get_checkpoint()
    if restored is not None:
        with restored.as_directory() as directory:
            checkpoint.install_copy(cfg.checkpoint_dir, Path(directory))


def train_loop_per_worker(config: dict) -> None:
    process.set_aside_startup_objects()  # a Ray worker's imports, as each torchrun worker's
    cfg = TrainConfig.from_dict(config)
    context = ray.train.get_context()
    device = ray.train.torch.get_device() if torch.cuda.is_available() else torch.device("cpu")
    control = control_group(cfg.transfer_timeout)
    rank = context.get_world_rank()
    ctx = DistContext(rank, context.get_world_size(), context.get_local_rank(), device, control)
    restore(cfg, ctx.local_rank)  # the store's first collectives wait for every node's copy
    checkpoints = RayCheckpoints(rank, cfg.checkpoint_dir, cfg.s3_checkpoints or None)
    try:
        train(
            cfg,
            ctx,
            report=lambda metrics: ray.train.report({k: v for k, v in metrics.items() if v is not None}),
            on_checkpoint=checkpoints.finished,
        )
    except Drained:  # a SIGTERM stopped it, its checkpoint saved and settled all the same
        checkpoints.flush()
        raise
    checkpoints.flush()


class WithoutDirectories(pyarrow.fs.FileSystemHandler):
    """An object store through pyarrow, with directories left out. Ray creates the run's directory
    before anything else (ray/train/v2/_internal/execution/storage.py,
    StorageContext._create_validation_file), and Arrow's S3FileSystem.CreateDir asks whether the
    bucket exists (HeadBucket: a ListBucket with no prefix) and writes an empty marker object for
    each parent prefix (cpp/src/arrow/filesystem/s3fs.cc): both outside a job's role, which may touch
    only its own checkpoints/<job>/ prefix. S3 has no directories: creating one is a no-op."""

    def __init__(self, inner: pyarrow.fs.FileSystem):
        self.inner = inner

    def get_type_name(self) -> str:
        return f"without-directories+{self.inner.type_name}"

    def normalize_path(self, path):
        return self.inner.normalize_path(path)

    def get_file_info(self, paths):
        return self.inner.get_file_info(paths)

    def get_file_info_selector(self, selector):
        return self.inner.get_file_info(selector)

    def create_dir(self, path, recursive) -> None:
        return None

    def delete_dir(self, path) -> None:
        self.inner.delete_dir(path)

    def delete_dir_contents(self, path, missing_dir_ok=False) -> None:
        self.inner.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self) -> None:
        self.inner.delete_dir_contents("/", accept_root_dir=True)

    def delete_file(self, path) -> None:
        self.inner.delete_file(path)

    def move(self, src, dest) -> None:
        self.inner.move(src, dest)

    def copy_file(self, src, dest) -> None:
        self.inner.copy_file(src, dest)

    def open_input_stream(self, path):
        return self.inner.open_input_stream(path)

    def open_input_file(self, path):
        return self.inner.open_input_file(path)

    def open_output_stream(self, path, metadata):
        return self.inner.open_output_stream(path, metadata=metadata)

    def open_append_stream(self, path, metadata):
        return self.inner.open_append_stream(path, metadata=metadata)


def run_storage(storage_path: str) -> tuple[pyarrow.fs.FileSystem | None, str]:
    """Ray's storage filesystem and path: on S3 without directories (see WithoutDirectories), in
    the pod's region when it is known (else Arrow asks the bucket's region itself)."""
    if not storage_path.startswith("s3://"):
        return None, storage_path
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region:
        inner, path = pyarrow.fs.S3FileSystem(region=region), storage_path.removeprefix("s3://")
    else:
        inner, path = pyarrow.fs.FileSystem.from_uri(storage_path)
    return pyarrow.fs.PyFileSystem(WithoutDirectories(inner)), path


def run_location(cfg: TrainConfig, storage_path: str) -> tuple[str, str]:
    """Ray's storage path and run name. With S3 checkpoints the run is their prefix, so Ray
    registers them in place (NO_UPLOAD only takes checkpoints inside the run's directory)."""
    if not cfg.s3_checkpoints:
        return storage_path or "/tmp/ray-results", f"trainstack-{cfg.model}"
    if storage_path:
        raise ValueError(
            "--storage-path: with --s3-checkpoints, Ray's run is the checkpoints' prefix "
            f"({cfg.s3_checkpoints}); leave --storage-path unset"
        )
    bucket, prefix = storage.split_s3_uri(cfg.s3_checkpoints)
    if not prefix:
        raise ValueError(f"--s3-checkpoints: a prefix inside the bucket is needed: {cfg.s3_checkpoints!r}")
    parent = PurePosixPath(bucket, prefix)
    return f"s3://{parent.parent}", parent.name


def build_trainer(argv: list[str] | None = None) -> TorchTrainer:
    """The TorchTrainer for these arguments. A run with the same name and storage path (a RayJob
    relaunched with the same config) restores Ray's latest checkpoint, as a restart does."""
    parser = flags.ray_parser()
    ray_args, rest = parser.parse_known_args(argv)
    cfg = parse_args(rest)
    try:
        storage_path, name = run_location(cfg, ray_args.storage_path)
    except ValueError as err:
        parser.error(str(err))
    filesystem, path = run_storage(storage_path)
    return TorchTrainer(
        train_loop_per_worker,
        train_loop_config=cfg.to_dict(),
        scaling_config=ScalingConfig(num_workers=ray_args.num_workers, use_gpu=ray_args.use_gpu),
        # ray/train/torch/config.py: timeout_s is init_process_group's timeout for the training group.
        torch_config=TorchConfig(
            backend="nccl" if ray_args.use_gpu else "gloo", timeout_s=math.ceil(cfg.collective_timeout)
        ),
        run_config=RunConfig(
            name=name,
            storage_filesystem=filesystem,
            storage_path=path,
            failure_config=FailureConfig(max_failures=ray_args.max_failures),
            # The store prunes the S3 copies itself (trainer.checkpoint.prune_s3), keeping every
            # `--keep-every` step too, as under torchrun: Ray would keep the newest only.
            checkpoint_config=CheckpointConfig(
                num_to_keep=None if cfg.s3_checkpoints else cfg.keep_checkpoints
            ),
        ),
    )


def runtime_env(cfg: TrainConfig) -> dict:
    """The job's runtime environment: NCCL's log set up in every worker process when the job
    checks its own nodes, as trainer.train's main does before its process group."""
    return {"worker_process_setup_hook": NCCL_LOG_HOOK} if cfg.checks_own_nodes else {}


def main(argv: list[str] | None = None) -> int:
    trainer = build_trainer(argv)
    cfg = TrainConfig.from_dict(trainer.train_loop_config)
    # On a RayCluster/RayJob pod RAY_ADDRESS points at the head; locally Ray starts one.
    ray.init(
        address=os.environ.get("RAY_ADDRESS") or None, ignore_reinit_error=True, runtime_env=runtime_env(cfg)
    )
    result = trainer.fit()
    print(f"ray train finished: error={result.error!r}, checkpoint={result.checkpoint}", flush=True)
    return 0 if result.error is None else FAILED_EXIT_CODE


if __name__ == "__main__":
    process.set_aside_startup_objects()
    sys.exit(main())
