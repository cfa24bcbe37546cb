"""The NVIDIA driver of the node this pod runs on, against the CUDA release of the image it runs in:
the stack runs it as a Job on a job's node group before the job is registered
(components/driver_probe.py), so a node whose driver the image cannot use stops `pulumi up` with a
sentence, instead of pods the container runtime refuses to start and Kueue's waitForPodsReady
evicting and requeueing the job in a loop.

The driver is read from the kernel (`/sys/module/nvidia/version`, the loaded module's version, which
is the driver's: the module declares MODULE_VERSION; a container's sysfs shows the node's kernel): no
GPU is asked for, so the probe
neither waits for the group's GPUs nor needs the CUDA its image may not get (the pod runs with
NVIDIA_VISIBLE_DEVICES=void, so the NVIDIA runtime does not check NVIDIA_REQUIRE_CUDA). The image's
CUDA release is its `CUDA_VERSION`, as NVIDIA's CUDA images set it (the probe runs in the job's own
image, given whole to `python3 -c`); the least driver per release is
the stack's table (domain/drivers.py LEAST_DRIVER), given as `--least-driver`. Where the node shows
no NVIDIA driver the probe fails closed; where the image names no CUDA release nothing can be
compared, which it says and passes.

Its sentence goes to the container's termination message (`/dev/termination-log`), which
pulumi-kubernetes shows when the Job fails. Standard library only and one file: it runs in any image
with python3.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path

OK, INCOMPATIBLE = 0, 1


def driver_version(module_dir: Path) -> str | None:
    """The loaded NVIDIA kernel module's version (the driver's, e.g. 580.65.06); None without one."""
    try:
        return (module_dir / "nvidia" / "version").read_text().strip() or None
    except OSError:
        return None


def cuda_release(version: str | None) -> str | None:
    """`13.0` of a CUDA_VERSION such as 13.0.3."""
    if not version:
        return None
    parts = version.strip().split(".")
    return ".".join(parts[:2]) if len(parts) >= 2 and all(p.isdigit() for p in parts[:2]) else None


def verdict(
    node: str, where: str, driver: str | None, cuda: str | None, least: dict[str, int], fix: str
) -> tuple[int, str]:
    """The exit code and the sentence for a node's driver against the image's CUDA release."""
    if driver is None:
        return INCOMPATIBLE, (
            f"{where}: node {node} shows no NVIDIA driver (no loaded nvidia kernel module: "
            "/sys/module/nvidia/version), so no GPU container can start there; "
            f"use a GPU AMI with the NVIDIA driver for the group ({fix})"
        )
    major = int(driver.split(".")[0])
    needed = least.get(cuda) if cuda else None
    if needed is None:
        why = (
            f"is on CUDA {cuda}, not in the stack's driver table"
            if cuda
            else "names no CUDA release (CUDA_VERSION)"
        )
        return OK, f"{where}: node {node} has NVIDIA driver {driver}; the job's image {why}: not compared"
    if major < needed:
        return INCOMPATIBLE, (
            f"{where}: node {node} has NVIDIA driver {driver} (R{major}); the training image's CUDA {cuda} "
            f"needs R{needed} or newer, and its containers would not start there: move the group's nodes to "
            f"an AMI with R{needed} ({fix}), or build on a base image of an older CUDA (image.baseImage)"
        )
    return OK, f"{where}: node {node} has NVIDIA driver {driver}; CUDA {cuda} needs R{needed}: ok"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="driver-probe", description="The node's NVIDIA driver against the image's CUDA."
    )
    parser.add_argument("--where", required=True, help="what is probed, as a sentence names it")
    parser.add_argument("--least-driver", required=True, help='JSON: {"13.0": 580, ...}')
    parser.add_argument("--fix", required=True, help="where the group's AMI is set, as a sentence names it")
    parser.add_argument(
        "--cuda", help="the job's image's CUDA release (X.Y or unknown); default: this image's"
    )
    parser.add_argument("--module-dir", type=Path, default=Path("/sys/module"))
    parser.add_argument("--termination-log", type=Path, default=Path("/dev/termination-log"))
    args = parser.parse_args(argv)
    node = os.environ.get("NODE_NAME", "(unknown)")
    code, sentence = verdict(
        node,
        args.where,
        driver_version(args.module_dir),
        cuda_release(os.environ.get("CUDA_VERSION")),
        {k: int(v) for k, v in json.loads(args.least_driver).items()},
        args.fix,
    )
    print(sentence, file=sys.stderr if code else sys.stdout, flush=True)
    with contextlib.suppress(OSError):  # outside a pod: the sentence is on the console
        args.termination_log.write_text(sentence)
    return code


if __name__ == "__main__":
    sys.exit(main())
