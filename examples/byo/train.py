"""Bring your own script: a small model trained with DistributedDataParallel.

torchrun starts one process per GPU (or one per node on CPU) and sets RANK, WORLD_SIZE and the
rendezvous; in a TrainJob Trainer's torch plugin (in a PyTorchJob the training operator) gives
torchrun its node count, rank and rendezvous through PET_* variables. Run alone (no WORLD_SIZE) it trains in one process.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--checkpoint-dir", type=Path, default=None, help="rank 0 saves the model here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> float:
    args = parse(argv)
    distributed = "WORLD_SIZE" in os.environ
    if distributed:
        # NCCL where the process has a GPU, gloo on CPU nodes.
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank = dist.get_rank() if distributed else 0
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")

    torch.manual_seed(0)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)).to(device)
    target = torch.nn.Linear(16, 1).to(device)  # the function to learn, the same on every rank
    if distributed:
        model = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    data = torch.Generator(device="cpu").manual_seed(1 + rank)  # each rank its own samples

    loss = torch.tensor(0.0)
    for step in range(args.steps):
        x = torch.randn(args.batch_size, 16, generator=data).to(device)
        with torch.no_grad():
            y = target(x)
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()  # DDP averages the gradients over every rank here
        optimizer.step()
        if rank == 0 and (step % 20 == 0 or step == args.steps - 1):
            print(f"step {step} loss {loss.item():.4f}", flush=True)

    if rank == 0 and args.checkpoint_dir is not None:
        args.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        weights = model.module.state_dict() if distributed else model.state_dict()
        torch.save(weights, args.checkpoint_dir / "model.pt")
    if distributed:
        dist.barrier()  # rank 0 has saved: no rank tears the group down while another still uses it
        dist.destroy_process_group()
    return loss.item()


if __name__ == "__main__":
    main()
