"""Check a node group before the first training job on it: devices, NCCL's network, bandwidth.

    torchrun --nnodes N --nproc-per-node G ... -m trainer.preflight \\
        --gpus-per-node 8 --efa-per-node 32 --min-bus-bandwidth 200

Every rank checks that its node exposes the expected GPUs and EFA devices; then all ranks run
all-reduces and rank 0 reports the bus bandwidth (nccl-tests' convention: algorithm bandwidth x
2(n-1)/n) and the network NCCL chose, from NCCL's own log. On CPU (gloo) the same runs without
device or EFA checks. Exit 0 when every check passes; 1 with a `preflight {json}` line, and the
same message in the pod's termination log, saying what was measured and what to check.

NCCL's own log says which network it chose, and NCCL reads where to write it once, at its first log
line: `log_nccl_network` sets that up before the process group exists (this module's main, and the
trainer's check of its own nodes, call it first).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist

from trainer import process
from trainer.distributed import DistContext, init_distributed
from trainer.resilience import FAILED_EXIT_CODE

TERMINATION_LOG = Path("/dev/termination-log")
# The EFA device plugin gives a pod its devices as /dev/infiniband/uverbsN character devices. Not
# /sys/class/infiniband: in the kernel's default shared RDMA namespace mode that lists every device
# on the host, whatever the pod was given.
RDMA_DEVICES = Path("/dev/infiniband")
_NETWORK = re.compile(r"NCCL INFO Using network (.+?)\s*$", re.MULTILINE)
# Where NCCL writes each process's log for the check to read (NCCL_DEBUG_FILE).
NCCL_LOG_DIR = Path(tempfile.gettempdir()) / "trainstack-nccl"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gpus-per-node", type=int, default=0)
    p.add_argument("--efa-per-node", type=int, default=0)
    p.add_argument("--min-bus-bandwidth", type=float, default=0.0, help="GB/s; 0 reports without a floor")
    p.add_argument("--size-mb", type=int, default=256, help="all-reduce message size")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument(
        "--termination-json",
        action="store_true",
        help="the whole report as JSON in the termination log, passed or not (the health gate's two-node test)",
    )
    return p.parse_args(argv)


def nccl_log_file() -> Path:
    """This process's NCCL log. The pid is written out rather than left to NCCL's %p: the check
    reads its own file, not those of the node's other ranks or of workers before a restart."""
    return NCCL_LOG_DIR / f"nccl.{os.getpid()}.log"


def log_nccl_network() -> None:
    """Have NCCL log its init and network lines to `nccl_log_file()`. Before the process group
    exists: NCCL reads NCCL_DEBUG and NCCL_DEBUG_FILE once, at its first log line (ncclDebugInit in
    NCCL's src/debug.cc), and `init_distributed` creates the communicator at once (device_id)."""
    NCCL_LOG_DIR.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("NCCL_DEBUG", "INFO")
    os.environ.setdefault("NCCL_DEBUG_SUBSYS", "INIT,NET")
    os.environ["NCCL_DEBUG_FILE"] = str(nccl_log_file())


def network_from_nccl_log(text: str) -> str | None:
    """The network NCCL picked ('Libfabric' or 'AWS Libfabric' for EFA, 'Socket' for TCP)."""
    found = _NETWORK.findall(text)
    return found[-1] if found else None


def uses_efa(network: str | None) -> bool:
    return network is not None and "libfabric" in network.lower()


def local_problems(gpus_per_node: int, efa_per_node: int, device: torch.device) -> list[str]:
    problems = []
    if gpus_per_node and device.type == "cuda":
        seen = torch.cuda.device_count()
        if seen != gpus_per_node:
            problems.append(
                f"{os.uname().nodename}: {seen} GPUs visible, {gpus_per_node} expected "
                "(check the pod's nvidia.com/gpu request and the NVIDIA device plugin on the node)"
            )
    if efa_per_node:
        seen = efa_devices_given()
        if seen != efa_per_node:
            problems.append(
                f"{os.uname().nodename}: {seen} EFA devices given to the pod ({RDMA_DEVICES}/uverbs*), "
                f"{efa_per_node} expected "
                "(check the pod's vpc.amazonaws.com/efa request and the EFA device plugin on the node)"
            )
    return problems


def efa_devices_given() -> int:
    return len(list(RDMA_DEVICES.glob("uverbs*"))) if RDMA_DEVICES.is_dir() else 0


# How many times the bandwidth is measured before it is found below the floor.
BANDWIDTH_SAMPLES = 3


def bus_bandwidth(device: torch.device, size_mb: int, iters: int) -> float:
    """All-reduce bus bandwidth in GB/s, timed on the slowest rank."""
    world = dist.get_world_size()
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    numel = size_mb * 2**20 // torch.tensor([], dtype=dtype).element_size()
    tensor = torch.ones(numel, dtype=dtype, device=device)
    for _ in range(3):  # warm-up: connections, buffers
        dist.all_reduce(tensor)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(tensor)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    # On the training device: the default group is NCCL on GPUs, and NCCL takes no CPU tensors.
    elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64, device=device)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    bytes_ = numel * tensor.element_size()
    algbw = bytes_ * iters / elapsed.item()
    return algbw * 2 * (world - 1) / world / 1e9 if world > 1 else algbw / 1e9


def check_nodes(
    ctx: DistContext,
    gpus_per_node: int,
    efa_per_node: int,
    min_bus_bandwidth: float,
    size_mb: int = 256,
    iters: int = 20,
    samples: int = BANDWIDTH_SAMPLES,
) -> dict:
    """Every check over the ranks of `ctx`, on the nodes they run on; the report, on every rank.

    Collectives run on the training device: the default group is NCCL on GPUs. NCCL's log, in the
    file `log_nccl_network` named before the group existed, says the network it chose; with the
    file set NCCL writes nothing to the output, so its network lines are echoed to stderr, where
    `trainstack doctor` reads them."""
    problems = local_problems(gpus_per_node, efa_per_node, ctx.device)
    # The best of up to `samples` measurements, each rounded once (the report and the message show
    # the figures the floor compared): one run of 20 all-reduces can land on a busy moment of the
    # fabric, and a job failed for good on it would be a false alarm. Every rank measures the same
    # times (each figure is the slowest rank's), so all stop after the same sample.
    measured: list[float] = []
    while len(measured) < max(1, samples):
        measured.append(round(bus_bandwidth(ctx.device, size_mb, iters), 2))
        if not min_bus_bandwidth or measured[-1] >= min_bus_bandwidth:
            break
    busbw = max(measured)
    log_file = nccl_log_file()
    nccl_log = log_file.read_text(errors="replace") if log_file.is_file() else ""
    chosen = [line for line in nccl_log.splitlines() if _NETWORK.search(line)]
    if chosen:
        sys.stderr.write("".join(f"{line}\n" for line in chosen))
    network = network_from_nccl_log(nccl_log) if ctx.device.type == "cuda" else "gloo (TCP)"
    gathered: list[list[str]] = [[] for _ in range(ctx.world_size)]
    dist.all_gather_object(gathered, problems, group=ctx.control)
    problems = [p for rank in gathered for p in rank]
    if efa_per_node and ctx.world_size > 1 and not uses_efa(network):
        problems.append(
            f"the collectives use {network or f'an unknown network (no network line in {log_file})'}, "
            "not EFA: check the pods request vpc.amazonaws.com/efa, the image's aws-ofi-nccl plugin is "
            "on LD_LIBRARY_PATH and FI_PROVIDER=efa"
        )
    if min_bus_bandwidth and busbw < min_bus_bandwidth:
        problems.append(
            f"all-reduce bus bandwidth {busbw} GB/s is below the floor of {min_bus_bandwidth:g} GB/s "
            f"(the best of {len(measured)} samples, {size_mb} MB messages over {ctx.world_size} ranks, "
            f"network {network}): check that "
            "every node is in one placement group and AZ, and the EFA security group allows all traffic"
        )
    report = {
        "ok": not problems,
        "world_size": ctx.world_size,
        "bus_bandwidth_gbps": busbw,
        "bandwidth_samples_gbps": measured,
        "network": network,
        "problems": problems,
    }
    if ctx.rank == 0:
        # One write, newline included: other ranks' output shares the pipe (see metrics.log).
        sys.stdout.write(f"preflight {json.dumps(report)}\n")
        sys.stdout.flush()
        if problems and TERMINATION_LOG.parent.is_dir() and os.access(TERMINATION_LOG.parent, os.W_OK):
            TERMINATION_LOG.write_text("; ".join(problems)[:4000])
    return report


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    log_nccl_network()
    ctx = init_distributed()
    report = check_nodes(
        ctx, args.gpus_per_node, args.efa_per_node, args.min_bus_bandwidth, args.size_mb, args.iters
    )
    if args.termination_json and ctx.rank == 0 and os.access(TERMINATION_LOG.parent, os.W_OK):
        # The kubelet keeps 4096 bytes: the problems are cut, never the JSON.
        brief = {**report, "problems": [p[:500] for p in report["problems"][:5]]}
        TERMINATION_LOG.write_text(json.dumps(brief))
    dist.destroy_process_group()
    return 0 if report["ok"] else FAILED_EXIT_CODE


if __name__ == "__main__":
    process.set_aside_startup_objects()
    sys.exit(main())
