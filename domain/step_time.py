"""A default-trainer step's modeled time: its compute, the traffic its sharding sends between
nodes, and the floor of its kernel launches; the largest bounds the step.

- compute: one rank's FLOPs over the GPU's dense bf16 peak at the MFU measured for that GPU, model
  and mode (MEASURED_MFU), or ASSUMED_MFU where nothing was measured; the plan says which.
- communication: what FSDP2 sends between nodes per step, sharded as the trainer shards
  (workload/trainer/parallelize.py): each unit's bf16 parameters all-gathered for the forward and
  again for the backward (not the last block nor the head and final norm, which keep theirs:
  `reshard_after_forward`), and the gradients reduce-scattered in fp32 (`reduce_dtype`). NCCL's
  ring passes (W-1)/W of each collective's whole tensor through every node's link (W ranks), in
  each direction; DDP's all-reduce passes twice that of its gradients. On one node nothing crosses
  the network (NVLink or PCIe, not modeled). The link is the group's EFA where it has EFA, else the
  instance's sustained baseline bandwidth, never its burst (g6e.xlarge bursts to 20 Gbps for a
  while and sustains 2.5: the catalog's `baseline_gbps`).
- launch: a step of a small model is its kernel launches and Python, not its FLOPs.

Assumptions, named so a measured run can replace them:
- ASSUMED_OVERLAP: the trainer hides communication behind compute entirely (FSDP2 prefetches the
  next unit's all-gather during the current unit's compute and reduce-scatters during the
  backward), so a step takes the longer of the two, never their sum; and NCCL reaches the link's
  nominal rate. Both flatter a network-bound step: it is a floor.
- LAUNCH_S_PER_BLOCK, LAUNCH_S_PER_STEP: eager PyTorch spends about 10 us of CPU per op; a block's
  forward and backward, its FSDP hooks and its share of the optimizer run about 100 ops (1 ms),
  and the embedding, the chunked loss, the optimizer, the clip and the per-step agreement about 500
  more (5 ms).
"""

from __future__ import annotations

from dataclasses import dataclass

from domain.model_facts import ModelShape

ASSUMED_MFU = 0.38  # torchtitan's Llama 3 8B on p5 reached 39.7% (../shared/reference/aws-gpu-facts.md)
# What the trainer measured (docs/workload.md, "Measured on one H200": one rank, batch 8 x 2048,
# benchmarks/train_throughput.py), by (GPU, model, compiled, float8). One rank sends nothing between
# GPUs, so a gang's MFU lands somewhat under these.
MEASURED_MFU = {
    ("H200", "1b", True, False): 0.514,
    ("H200", "1b", True, True): 0.546,
    ("H200", "1b", False, False): 0.369,
}
ASSUMED_OVERLAP = "communication fully overlapped with compute, at the link's nominal rate"
LAUNCH_S_PER_BLOCK = 0.001
LAUNCH_S_PER_STEP = 0.005
BF16_BYTES, FP32_BYTES = 2, 4
GB = 1e9


@dataclass(frozen=True)
class Mfu:
    """The model FLOPs utilisation a step is modeled at, and where the figure comes from."""

    value: float
    source: str  # "assumed", or what was measured

    def __str__(self) -> str:
        return f"{self.value:.0%} MFU ({self.source})"


ASSUMED = Mfu(ASSUMED_MFU, "assumed")


def mfu_for(gpu: str, model: str, compiled: bool, float8: bool) -> Mfu:
    """The measured MFU for this GPU, model and mode where there is one, else the assumption."""
    measured = MEASURED_MFU.get((gpu, model, compiled, float8))
    if measured is None:
        return ASSUMED
    mode = ("compiled" if compiled else "eager") + (", float8" if float8 else "")
    return Mfu(measured, f"measured: one {gpu}, {model}, {mode}")


def compute_seconds(
    shape: ModelShape, batch_size: int, seq_len: int, peak_flops: float, mfu: float = ASSUMED_MFU
) -> float:
    """FLOPs of one rank's step over the GPU's peak at `mfu`."""
    return shape.flops_per_token(seq_len) * batch_size * seq_len / (peak_flops * mfu)


def launch_seconds(shape: ModelShape) -> float:
    return LAUNCH_S_PER_STEP + LAUNCH_S_PER_BLOCK * shape.n_layers


def fsdp_node_bytes(shape: ModelShape, world: int) -> float:
    """Bytes one node's link carries each way per step under the trainer's FSDP2."""
    kept = shape.block_parameters + shape.vocab_size * shape.dim + shape.dim  # last block, head, norm
    gathered = BF16_BYTES * (shape.parameters + shape.parameters - kept)
    reduced = FP32_BYTES * shape.parameters
    return (world - 1) / world * (gathered + reduced)


def ddp_node_bytes(shape: ModelShape, world: int, grad_bytes: int = BF16_BYTES) -> float:
    """Bytes one node's link carries each way per step for DDP's ring all-reduce of the gradients."""
    return 2 * (world - 1) / world * grad_bytes * shape.parameters


@dataclass(frozen=True)
class Link:
    """What joins a job's nodes: Gbit/s per node, and whether it is EFA."""

    gbps: float
    efa: bool

    @property
    def description(self) -> str:
        return f"{self.gbps:g} Gbps {'EFA' if self.efa else 'baseline, no EFA'}"


@dataclass(frozen=True)
class StepTime:
    compute_s: float
    communication_s: float | None  # None: one node, nothing crosses the network
    launch_s: float
    mfu: Mfu  # what compute_s is modeled at

    @property
    def step_s(self) -> float:
        return max(self.compute_s, self.communication_s or 0.0, self.launch_s)

    @property
    def bound(self) -> str:
        """What sets the step: compute, network or launch."""
        return max(
            ("compute", self.compute_s),
            ("network", self.communication_s or 0.0),
            ("launch", self.launch_s),
            key=lambda x: x[1],
        )[0]


def step_time(
    shape: ModelShape,
    batch_size: int,
    seq_len: int,
    peak_flops: float,
    nodes: int,
    ranks_per_node: int,
    link: Link,
    mfu: Mfu = ASSUMED,
) -> StepTime:
    world = nodes * ranks_per_node
    communication = None
    if nodes > 1:
        communication = fsdp_node_bytes(shape, world) / (link.gbps / 8 * GB) if link.gbps else float("inf")
    return StepTime(
        compute_s=compute_seconds(shape, batch_size, seq_len, peak_flops, mfu.value),
        communication_s=communication,
        launch_s=launch_seconds(shape),
        mfu=mfu,
    )
