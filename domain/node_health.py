"""What a new GPU node must prove before it trains: which groups are burnt in, the steps and what
they take (the plan's figures and its checks against the autoscaler's and Kueue's clocks), and the
published figures a group's floors fall back on. The programs that run it are in the image
(workload/trainer/burn_in.py on the node, workload/trainer/health_gate.py deciding, with the XID
table both judge by); floors are data, calibrated from a group's own first healthy nodes, since
published scripts and published runs disagree by nearly 2x.
"""

from __future__ import annotations

import math
from typing import Literal

from domain.catalog import IMAGE_PULL_GB_PER_MINUTE, InstanceType

HealthMode = Literal["burnIn", "passive", "off"]

# Families whose nodes are burnt in by default: eight NVLink-connected GPUs and EFA, where one bad
# GPU or link stops a gang of hundreds. The others (g4dn, g5, g6, g6e, ...) are watched (passive).
BURN_IN_FAMILIES = ("p4d", "p4de", "p5", "p5e", "p5en", "p6-b200", "p6-b300", "p6e-gb200")
# GPUs joined by NVLink through NVSwitch: every pair of GPUs shows NV<n> in `nvidia-smi topo -m`.
NVLINK_FAMILIES = BURN_IN_FAMILIES


def family(instance_type: str) -> str:
    return instance_type.removeprefix("ml.").partition(".")[0]


def default_mode(instance_type: str) -> HealthMode:
    return "burnIn" if family(instance_type) in BURN_IN_FAMILIES else "passive"


def has_nvlink(instance_type: str) -> bool:
    return family(instance_type) in NVLINK_FAMILIES


# The burn-in's steps, in order; the gate stops at the first fatal one.
STEPS = ("inventory", "efa", "topology", "dcgm", "nccl")
# DCGM's run levels (`dcgmi diag -r`): 1 quick (seconds), 2 medium, 3 long, 4 extended.
DCGM_LEVELS = (1, 2, 3, 4)
DEFAULT_DCGM_LEVEL = 2
# Minutes each level takes on an eight-GPU P instance (level 2: about 2.5-10.5 minutes; the
# longest is planned) and on a smaller node; levels 3 and 4 run the stress tests for far longer.
DCGM_MINUTES = {1: (1.0, 0.5), 2: (10.5, 2.5), 3: (45.0, 30.0), 4: (120.0, 90.0)}
# The other steps: inventory, XID scan, EFA, topology (seconds together) and the intra-node
# all-reduce (three samples of twenty 2 GiB all-reduces at most, after NCCL's set-up).
CHECK_MINUTES = 0.5
NCCL_MINUTES = 1.0
# Two fresh nodes of an EFA group together: torchrun's start and three samples of twenty 2 GiB
# all-reduces over EFA (trainer.preflight).
PAIR_MINUTES = 1.5
# NVIDIA's DCGM image, whose `dcgmi` asks the node's DCGM host engine (the node monitoring agent's
# dcgm-server, hostPort 5555) for the diagnostics; pinned at DCGM 4.5.3, the release dcgm-exporter
# 4.8.2 in ../shared/charts is built on. What a node pulls for it, compressed, estimated.
DCGM_IMAGE = "nvcr.io/nvidia/cloud-native/dcgm:4.5.3-1-ubuntu22.04"
DCGM_IMAGE_GB = 1.6
# The cluster autoscaler counts a registered node that is not ready (a startup taint makes it so)
# as starting for this long, then as unready, and scales up again for the pods it was meant for
# (clusterstate.go MaxNodeStartupTime). Up to 1.34 a constant; from 1.35 its flag
# `--max-node-startup-time` sets it (config/flags/flags.go), which the stack lengthens to cover the
# burn-in (`autoscaler_startup_minutes`).
AUTOSCALER_NODE_STARTUP_MINUTES = 15
STARTUP_FLAG_SINCE = (1, 35)
# What the stack adds to the longest burn-in before the autoscaler takes a node as unready.
STARTUP_MARGIN_MINUTES = 5


def startup_flag(kubernetes_version: str) -> bool:
    """Whether the autoscaler of this Kubernetes minor (it follows the cluster's) takes the flag."""
    major, minor = (int(x) for x in kubernetes_version.split(".")[:2])
    return (major, minor) >= STARTUP_FLAG_SINCE


def autoscaler_startup_minutes(gate_minutes: list[float]) -> int | None:
    """The autoscaler's `--max-node-startup-time` in minutes where a burn-in (the image pull included)
    would outlast its 15-minute default; None where the default covers every one."""
    longest = max(gate_minutes, default=0.0)
    if longest + STARTUP_MARGIN_MINUTES <= AUTOSCALER_NODE_STARTUP_MINUTES:
        return None
    return math.ceil(longest + STARTUP_MARGIN_MINUTES)


def dcgm_minutes(level: int, instance: InstanceType) -> float:
    big, small = DCGM_MINUTES[level]
    return big if instance.gpus >= 8 else small


def burn_in_minutes(level: int, instance: InstanceType, pairs: bool = False) -> float:
    """The burn-in on a node, from its pod's start: pulling NVIDIA's DCGM image (the training
    image's pull is the job's, which the burn-in takes over), the checks, DCGM and the all-reduce,
    and for a node of an EFA group (`pairs`) the two-node all-reduce with a fresh partner."""
    own = (
        DCGM_IMAGE_GB / IMAGE_PULL_GB_PER_MINUTE
        + CHECK_MINUTES
        + dcgm_minutes(level, instance)
        + NCCL_MINUTES
    )
    return own + (PAIR_MINUTES if pairs else 0.0)


# Published all-reduce bus bandwidth, GB/s, for the fallback floor: (instance type, nodes, message
# GiB). Two p5.48xlarge over EFA: 487 at 16 GiB and 443 at 2 GiB; two p4de.24xlarge: 78 at 2 GiB
# (NCCL tests as AWS's and others' published runs report them; ../shared/reference/aws-gpu-facts.md
# has about 440 at 2 GB).
PUBLISHED_BUS_GBPS: dict[tuple[str, int, int], float] = {
    ("p5.48xlarge", 2, 16): 487.0,
    ("p5.48xlarge", 2, 2): 443.0,
    ("p4de.24xlarge", 2, 2): 78.0,
}
# The message the gate measures at, the one every published figure has.
MEASURED_MESSAGE_GIB = 2
# The gate's floor for a test: this fraction of the median of the group's own healthy nodes once
# enough passed (workload/trainer/health_gate.py), of the published figure until then.
DEFAULT_FLOOR_FRACTION = 0.8
# The breaker: past this share of a group failing at once (at least one node), nothing more is
# replaced and the gate says so, as EKS node repair stops past its threshold: a fault that wide is
# the AMI's, the driver's or the network's, and replacing nodes would only churn them.
MAX_FAILING_SHARE = 0.2


def published_bus_gbps(instance_type: str, nodes: int) -> float | None:
    return PUBLISHED_BUS_GBPS.get((instance_type.removeprefix("ml."), nodes, MEASURED_MESSAGE_GIB))
