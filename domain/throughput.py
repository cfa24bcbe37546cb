"""A default-trainer job's modeled throughput on any number of its group's nodes: the plan's step model
(domain/step_time.py: compute at the GPU's MFU, FSDP's traffic over the nodes' link, the launch
floor). `trainstack estimate` scales a measured throughput by its ratios: how a job's tokens/s
change with its node count is the model's, anchored where it was measured."""

from __future__ import annotations

from domain.model_facts import MODEL_SHAPES, peak_bf16_flops
from domain.step_time import Link, mfu_for, step_time


def modeled_tokens_per_s(
    model: str,
    batch_size: int,
    seq_len: int,
    gpu_model: str,
    gpus_per_node: int,
    link: Link,
    compiled: bool,
    float8: bool,
    nodes: int,
) -> float | None:
    """Tokens/s on `nodes` nodes; None where the GPU's peak is unknown."""
    peak = peak_bf16_flops(gpu_model)
    if peak is None or gpus_per_node < 1:
        return None
    mfu = mfu_for(gpu_model, model, compiled, float8)
    step = step_time(MODEL_SHAPES[model], batch_size, seq_len, peak, nodes, gpus_per_node, link, mfu)
    return batch_size * seq_len * nodes * gpus_per_node / step.step_s


def node_counts(largest: int) -> list[int]:
    """1, 2, 4, ... up to `largest`, and `largest` itself."""
    counts, n = [], 1
    while n < largest:
        counts.append(n)
        n *= 2
    return [*counts, largest]
