"""Which NVIDIA driver a training image needs, and which one a node has.

An image built on CUDA X.Y needs a driver at least as new as the one that release shipped with:
the NVIDIA Container Toolkit refuses to start its container on an older one (the image's
NVIDIA_REQUIRE_CUDA). The least driver branch per CUDA release is NVIDIA's table "CUDA Toolkit
and Corresponding Driver Versions" (CUDA Toolkit release notes, Linux x86_64, the GA driver of
each release): CUDA 13.0 needs R580 (580.65.06). The EKS AL2023 NVIDIA AMIs carry R580 since late
2025, so the node groups the stack creates have it; an existing or HyperPod cluster on an older AMI
may not.

A node's driver is what NVIDIA's GPU feature discovery labels it with (conventions.driver_major),
read before anything is registered where a cluster runs GFD; on every cluster, each GPU job's
driver probe reads it from the node itself before the job is registered (components/driver_probe.py,
workload/trainer/driver_probe.py, which take this table).
"""

from __future__ import annotations

import re

from conventions import DRIVER_MAJOR_LABELS, driver_major

# (CUDA major, minor) -> the least driver major branch (NVIDIA's table above).
LEAST_DRIVER = {
    (12, 0): 525,
    (12, 1): 530,
    (12, 2): 535,
    (12, 3): 545,
    (12, 4): 550,
    (12, 5): 555,
    (12, 6): 560,
    (12, 8): 570,
    (12, 9): 575,
    (13, 0): 580,
}

# nvidia/cuda:<major>.<minor>[.<patch>]-<flavor>, as image.baseImage names it.
_CUDA_TAG = re.compile(r"(?:^|/)cuda:(\d+)\.(\d+)(?:\.\d+)?-")


def cuda_of(base_image: str) -> tuple[int, int] | None:
    """The CUDA release an nvidia/cuda base image carries; None for any other image."""
    m = _CUDA_TAG.search(base_image.partition("@")[0])
    return (int(m.group(1)), int(m.group(2))) if m else None


def least_driver(base_image: str) -> int | None:
    """The least driver major an image on `base_image` runs with; None: not known here."""
    cuda = cuda_of(base_image)
    return None if cuda is None else LEAST_DRIVER.get(cuda)


def driver_problem(node: str, labels: dict[str, str], needed: int, image: str) -> str | None:
    """The sentence for a node whose driver is older than `needed`; None when it is new enough or
    not labelled (unknown)."""
    found = driver_major(labels)
    if found is None or found >= needed:
        return None
    return (
        f"node {node} has NVIDIA driver R{found} ({DRIVER_MAJOR_LABELS[0]}); the training image "
        f"({image}) needs R{needed} or newer, and its containers would not start there: move the "
        f"node group to an AMI with R{needed} (the EKS AL2023 NVIDIA AMIs since late 2025), or build "
        "on a base image of an older CUDA (image.baseImage)"
    )


def least_driver_table() -> dict[str, int]:
    """LEAST_DRIVER keyed as an image's CUDA_VERSION starts (`13.0`), for the driver probe
    (workload/trainer/driver_probe.py), which reads its own image's release."""
    return {f"{major}.{minor}": driver for (major, minor), driver in LEAST_DRIVER.items()}
