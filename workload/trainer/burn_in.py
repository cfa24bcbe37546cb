"""The burn-in of a new GPU node, one step per container of the health gate's pod, in order.

    python -m trainer.burn_in checks --gpus 8 --efa 32 --nvlink
    python -m trainer.burn_in dcgm-verdict --level 2 --file /results/dcgm.json
    python -m trainer.burn_in nccl --gpus 8 --floor 354.4

`checks`: the GPU inventory and the kernel's Xid lines, the EFA devices, NVLink between every pair
of GPUs, stopping at the first fatal one. `dcgm-verdict`: DCGM's diagnostics, which the container
before it ran with NVIDIA's image and left as JSON. `nccl`: nccl-tests' all_reduce_perf over all the
node's GPUs at 2 GiB, against the group's floor.

Each step writes its checks as JSON to the pod's termination log, where the gate's controller
(trainer.health_gate) reads them from the pod's status, and exits 1 on a fatal result so the
kubelet runs none of the steps after it (init containers run in order, each only after the one
before succeeded).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from trainer import health_checks as hc

TERMINATION_LOG = Path("/dev/termination-log")
# The kernel's log as records (one per read); a privileged container reads the node's.
KMSG = Path("/dev/kmsg")
# nccl-tests, built in workload/Dockerfile against the NCCL and CUDA runtime of torch's wheels.
ALL_REDUCE_PERF = "/opt/nccl-tests/all_reduce_perf"
ALL_REDUCE_BYTES = "2G"  # the message every published figure has
# The kubelet keeps the first 4096 bytes of a termination message.
MESSAGE_BYTES = 4096


def run(command: list[str], env: dict[str, str] | None = None) -> str:
    return subprocess.run(command, check=True, capture_output=True, text=True, timeout=300, env=env).stdout


def wheel_libraries() -> str:
    """Where torch's nvidia-* wheels keep the NCCL and CUDA runtime all_reduce_perf was built against:
    found the way Python finds the packages, so the image's Python version is no one's concern."""
    import nvidia.cu13
    import nvidia.nccl

    return ":".join(str(Path(next(iter(p.__path__))) / "lib") for p in (nvidia.nccl, nvidia.cu13))


def all_reduce(gpus: int, floor_gbps: float | None) -> hc.Check:
    env = {**os.environ, "LD_LIBRARY_PATH": f"{wheel_libraries()}:{os.environ.get('LD_LIBRARY_PATH', '')}"}
    command = [
        ALL_REDUCE_PERF,
        "-b",
        ALL_REDUCE_BYTES,
        "-e",
        ALL_REDUCE_BYTES,
        "-g",
        str(gpus),
        "-w",
        "5",
        "-n",
        "20",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    return hc.all_reduce(done.stdout + done.stderr, floor_gbps)


def kernel_log(path: Path = KMSG) -> str:
    """Every record the kernel still holds, without waiting for new ones."""
    lines = []
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        while True:
            try:
                record = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError:  # EPIPE: a record overwritten while read; the next read goes on
                continue
            if not record:
                break
            lines.append(record.decode(errors="replace").partition(";")[2].rstrip("\n"))
    finally:
        os.close(fd)
    return "\n".join(lines)


def node_checks(gpus: int, efa: int, nvlink: bool) -> list[hc.Check]:
    """In order, stopping at the first fatal result: what follows a missing GPU says nothing new."""
    steps = [
        lambda: hc.gpu_inventory(run(["nvidia-smi", "-q", "-x"]), gpus),
        lambda: hc.xid_scan(kernel_log()),
    ]
    if efa:
        steps.append(lambda: hc.efa_devices(run(["fi_info", "-p", "efa", "-t", "FI_EP_RDM"]), efa))
    if nvlink:
        steps.append(lambda: hc.nvlink_topology(run(["nvidia-smi", "topo", "-m"]), gpus))
    done: list[hc.Check] = []
    for step in steps:
        done.append(step())
        if done[-1].failed:
            break
    return done


def report(checks: list[hc.Check], termination_log: Path | None = None) -> int:
    termination_log = termination_log or TERMINATION_LOG
    text = hc.as_json(checks)
    sys.stdout.write(text + "\n")
    if termination_log.parent.is_dir() and os.access(termination_log.parent, os.W_OK):
        termination_log.write_text(text[:MESSAGE_BYTES])
    return 1 if any(c.failed for c in checks) else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="trainer.burn_in", description=__doc__.splitlines()[0])
    steps = parser.add_subparsers(dest="step", required=True)
    checks = steps.add_parser("checks")
    checks.add_argument("--gpus", type=int, required=True)
    checks.add_argument("--efa", type=int, default=0)
    checks.add_argument("--nvlink", action="store_true")
    dcgm = steps.add_parser("dcgm-verdict")
    dcgm.add_argument("--level", type=int, required=True)
    dcgm.add_argument("--file", type=Path, required=True)
    nccl = steps.add_parser("nccl")
    nccl.add_argument("--gpus", type=int, required=True)
    nccl.add_argument("--floor", type=float, default=None, help="GB/s; none: the figure is recorded")
    args = parser.parse_args(argv)
    if args.step == "nccl":
        return report([all_reduce(args.gpus, args.floor)])
    if args.step == "checks":
        try:
            return report(node_checks(args.gpus, args.efa, args.nvlink))
        except (OSError, subprocess.SubprocessError) as err:
            # nvidia-smi or fi_info that cannot run is a node that cannot train.
            return report([hc.failed("node-checks", f"a check could not run: {err}", "REBOOT")])
    output = args.file.read_text() if args.file.is_file() else ""
    return report([hc.dcgm_diagnostics(output, args.level)])


if __name__ == "__main__":
    sys.exit(main())
