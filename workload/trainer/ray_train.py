"""Ray Train entrypoint (what a RayJob or a RayCluster submission runs): TorchTrainer over trainer.train.

    python -m trainer.ray_train --num-workers 16 --use-gpu --model 1b --steps 2000 \\
        --checkpoint-dir /checkpoints --s3-checkpoints s3://bucket/checkpoints/job

Ray Train starts one worker per GPU and sets up torch.distributed; each worker runs the same
training loop, data sharding and checkpoint code as the torchrun path. Ray's own fault tolerance
is used, not bypassed: every finished checkpoint is reported to Ray Train (each worker its own
shard files, so Ray assembles one checkpoint without copies), a restarted worker group resumes
from `ray.train.get_checkpoint()`, `FailureConfig(max_failures)` bounds the restarts, and the run
state lives in `--storage-path`, which defaults to S3 next to the checkpoints: multi-node runs need
storage every node reaches.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

import ray
import ray.train
import torch
import torch.distributed as dist
from ray.train import Checkpoint, CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchConfig, TorchTrainer

from trainer import checkpoint
from trainer.config import TrainConfig, parse_args
from trainer.distributed import DistContext, control_group
from trainer.resilience import FAILED_EXIT_CODE
from trainer.train import train


def report_checkpoint(rank: int, step: int, path: Path, metrics: dict) -> None:
    """Report a finished checkpoint to Ray Train: this worker's own files only."""
    with tempfile.TemporaryDirectory() as staging:
        for file in checkpoint.rank_files(path, rank):
            if _same_fs(file, staging):
                os.link(file, Path(staging) / file.name)
            else:
                shutil.copy2(file, staging)
        if rank == 0:
            shutil.copy2(path / checkpoint.MARKER, staging)
        ray.train.report({**metrics, "checkpoint_step": step}, checkpoint=Checkpoint.from_directory(staging))


def _same_fs(file: Path, directory: str) -> bool:
    return os.stat(file).st_dev == os.stat(directory).st_dev


def train_loop_per_worker(config: dict) -> None:
    cfg = TrainConfig.from_dict(config)
    context = ray.train.get_context()
    device = ray.train.torch.get_device() if torch.cuda.is_available() else torch.device("cpu")
    # checkpoint.py elects one writer per node by LOCAL_RANK, as under torchrun.
    os.environ["LOCAL_RANK"] = str(context.get_local_rank())
    control = control_group(cfg.transfer_timeout)
    rank = context.get_world_rank()
    ctx = DistContext(rank, context.get_world_size(), context.get_local_rank(), device, control)
    restored = ray.train.get_checkpoint()
    if restored is not None:  # a worker group restarted by Ray after a failure
        with restored.as_directory() as directory:
            step = checkpoint.marker_step(Path(directory))
            target = checkpoint.step_dir(cfg.checkpoint_dir, step)
            if ctx.local_rank == 0 and not (target / checkpoint.MARKER).is_file():
                shutil.copytree(directory, target, dirs_exist_ok=True)
            dist.barrier(group=control)
    train(
        cfg,
        ctx,
        report=lambda metrics: ray.train.report({k: v for k, v in metrics.items() if v is not None}),
        on_checkpoint=lambda step, path: report_checkpoint(rank, step, path, {"step": step}),
    )


def build_trainer(argv: list[str] | None = None) -> TorchTrainer:
    """The TorchTrainer for these arguments. A run with the same name and storage path (a RayJob
    relaunched with the same config) restores Ray's latest checkpoint, as a restart does."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--num-workers", type=int, default=1)
    parser.add_argument("--use-gpu", action="store_true")
    parser.add_argument("--max-failures", type=int, default=3, help="worker-group restarts Ray may make")
    parser.add_argument(
        "--storage-path", default="", help="Ray Train run state (default: <s3-checkpoints>/ray, else local)"
    )
    ray_args, rest = parser.parse_known_args(argv)
    cfg = parse_args(rest)
    storage = ray_args.storage_path or (
        f"{cfg.s3_checkpoints.rstrip('/')}/ray" if cfg.s3_checkpoints else "/tmp/ray-results"
    )
    return TorchTrainer(
        train_loop_per_worker,
        train_loop_config=cfg.to_dict(),
        scaling_config=ScalingConfig(num_workers=ray_args.num_workers, use_gpu=ray_args.use_gpu),
        torch_config=TorchConfig(backend="nccl" if ray_args.use_gpu else "gloo"),
        run_config=RunConfig(
            name=f"trainstack-{cfg.model}",
            storage_path=storage,
            failure_config=FailureConfig(max_failures=ray_args.max_failures),
            checkpoint_config=CheckpointConfig(num_to_keep=cfg.keep_checkpoints),
        ),
    )


def main(argv: list[str] | None = None) -> int:
    # On a RayCluster/RayJob pod RAY_ADDRESS points at the head; locally Ray starts one.
    ray.init(address=os.environ.get("RAY_ADDRESS") or None, ignore_reinit_error=True)
    result = build_trainer(argv).fit()
    print(f"ray train finished: error={result.error!r}, checkpoint={result.checkpoint}", flush=True)
    return 0 if result.error is None else FAILED_EXIT_CODE


if __name__ == "__main__":
    sys.exit(main())
