"""Where a rank runs: its device, the default process group and the gloo control group.

Rank, world size and local rank come from the torchrun/PyTorchJob environment; a bare process is
world size 1. GPUs: NCCL, which takes only tensors on the rank's own GPU. CPU: gloo, the same code.
Start-up and checkpoint transfers wait on the control group's long timeout (`--transfer-timeout`),
the training collectives on a tight one (`--collective-timeout`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from trainer.exits import PREFLIGHT_EXIT_CODE, Refused


@dataclass(frozen=True)
class DistContext:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    # gloo group with a long timeout: barriers around downloads and uploads, and object exchange.
    control: dist.ProcessGroup | None = None


# What the NVIDIA device plugin gives a container it allocated GPUs to (its default envvar strategy):
# their IDs. CUDA images set `all` themselves, and `void`/`none` mean no GPU.
VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
NO_ALLOCATION = ("", "all", "none", "void")


def allocated_gpus() -> str | None:
    """The GPUs the device plugin allocated to this container, or None where it allocated none."""
    found = os.environ.get(VISIBLE_DEVICES, "").strip()
    return None if found.lower() in NO_ALLOCATION else found


def training_device(local_rank: int) -> torch.device:
    """The rank's GPU (made current), or the CPU on a machine without one. A pod that was given GPUs
    but whose CUDA does not start (a driver the image cannot use, a GPU off the bus) stops with
    a sentence and a permanent exit, instead of training on its CPUs over gloo."""
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    allocated = allocated_gpus()
    if allocated is not None:
        raise Refused(
            PREFLIGHT_EXIT_CODE,
            f"this pod was given GPUs ({VISIBLE_DEVICES}={allocated}) and CUDA does not start in it "
            f"(torch {torch.__version__}, CUDA {torch.version.cuda}): the node's driver is older than the "
            "image needs, or a GPU is lost; `trainstack doctor` checks the group's nodes",
        )
    return torch.device("cpu")


def control_group(transfer_timeout: float) -> dist.ProcessGroup:
    """A gloo group over every rank, for waits as long as a download or an upload."""
    return dist.new_group(backend="gloo", timeout=timedelta(seconds=transfer_timeout))


def init_distributed(collective_timeout: float = 300.0, transfer_timeout: float = 3600.0) -> DistContext:
    """Join the process group torchrun (or a PyTorchJob) describes; a bare process is world size 1."""
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    local_rank = int(os.environ["LOCAL_RANK"])
    device = training_device(local_rank)
    if not dist.is_initialized():
        dist.init_process_group(
            backend="nccl" if device.type == "cuda" else "gloo",
            device_id=device if device.type == "cuda" else None,
            timeout=timedelta(seconds=collective_timeout),
        )
    control = control_group(transfer_timeout)
    return DistContext(dist.get_rank(), dist.get_world_size(), local_rank, device, control)


def tighten_collective_timeout(seconds: float) -> None:
    """The training group's timeout from now on: once compilation and warm-up are done, a collective
    that waits longer waits on a dead peer (torch.distributed.distributed_c10d._set_pg_timeout: gloo and
    NCCL apply it to the collectives that follow; torchtitan tightens its timeout the same way after
    the first step)."""
    if seconds > 0 and dist.is_initialized():
        dist.distributed_c10d._set_pg_timeout(timedelta(seconds=seconds))
