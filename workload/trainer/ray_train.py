"""Ray Train entrypoint (what a RayJob or a RayCluster submission runs): TorchTrainer over trainer.train.

    python -m trainer.ray_train --num-workers 16 --use-gpu --model 1b --steps 2000 \\
        --checkpoint-dir /checkpoints --s3-checkpoints s3://bucket/checkpoints/job

Ray Train starts one worker per GPU and sets up torch.distributed; each worker runs the same
training loop, data sharding and checkpoint/resume code as the torchrun path. Checkpoints go to
--checkpoint-dir (a volume every worker sees) and, optionally, S3; Ray receives the metrics.
"""

from __future__ import annotations

import argparse
import os
import sys

import ray
import ray.train
import torch
from ray.train import RunConfig, ScalingConfig
from ray.train.torch import TorchConfig, TorchTrainer

from trainer.train import DistContext, parse_args, train


def train_loop_per_worker(config: dict) -> None:
    args = argparse.Namespace(**config)
    context = ray.train.get_context()
    device = ray.train.torch.get_device() if torch.cuda.is_available() else torch.device("cpu")
    # checkpoint.py elects one S3 uploader per node by LOCAL_RANK, as under torchrun.
    os.environ["LOCAL_RANK"] = str(context.get_local_rank())
    ctx = DistContext(context.get_world_rank(), context.get_world_size(), context.get_local_rank(), device)
    train(
        args,
        ctx,
        report=lambda metrics: ray.train.report({k: v for k, v in metrics.items() if v is not None}),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--num-workers", type=int, default=1)
    parser.add_argument("--use-gpu", action="store_true")
    parser.add_argument(
        "--storage-path", default="/tmp/ray-results", help="Ray Train run state (not checkpoints)"
    )
    ray_args, rest = parser.parse_known_args(argv)
    args = parse_args(rest)

    # On a RayCluster/RayJob pod RAY_ADDRESS points at the head; locally Ray starts one.
    ray.init(address=os.environ.get("RAY_ADDRESS") or None, ignore_reinit_error=True)
    trainer = TorchTrainer(
        train_loop_per_worker,
        train_loop_config=vars(args),
        scaling_config=ScalingConfig(num_workers=ray_args.num_workers, use_gpu=ray_args.use_gpu),
        torch_config=TorchConfig(backend="nccl" if ray_args.use_gpu else "gloo"),
        run_config=RunConfig(name=f"trainstack-{args.model}", storage_path=ray_args.storage_path),
    )
    result = trainer.fit()
    print(f"ray train finished: error={result.error!r}, run state in {result.path}", flush=True)
    return 0 if result.error is None else 1


if __name__ == "__main__":
    sys.exit(main())
