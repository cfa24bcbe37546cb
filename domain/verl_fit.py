"""Whether a node group can hold a VERL job (GRPO or PPO): GPU memory per GPU for FSDP training and
vLLM rollouts, from the model's size, the algorithm and the tensor parallelism."""

from __future__ import annotations

# Bytes per parameter while training with FSDP and Adam: bf16 weights and gradients, fp32 master
# weights and two moments (2 + 2 + 4 + 4 + 4); the rollout's vLLM copy adds bf16 weights per TP group.
TRAIN_BYTES_PER_PARAM = 16
ROLLOUT_BYTES_PER_PARAM = 2
GPU_MEMORY_FOR_MODEL = 0.6  # the rest: activations, vLLM's KV cache, CUDA context


def verl_fits(
    algorithm: str,
    billions: float,
    tensor_parallel: int,
    gpus_per_node: int,
    gpu_memory_gib: float,
    nodes: int,
) -> str | None:
    """Why a group cannot hold this VERL job, or None."""
    if gpus_per_node < 1:
        return "VERL needs GPU nodes (vLLM rollouts and FSDP training run on GPUs)"
    if gpus_per_node % tensor_parallel:
        return f"tensorParallel {tensor_parallel} does not divide the {gpus_per_node} GPUs of a node"
    params = billions * 1e9
    if not params:
        return None
    copies = 2 if algorithm == "ppo" else 1  # PPO trains a critic of the same size
    train = copies * TRAIN_BYTES_PER_PARAM * params / (nodes * gpus_per_node)
    rollout = ROLLOUT_BYTES_PER_PARAM * params / tensor_parallel
    need = (train + rollout) / 2**30
    have = gpu_memory_gib * GPU_MEMORY_FOR_MODEL
    if need > have:
        return (
            f"a {billions:g}B model needs ~{need:.0f} GiB per GPU for training and rollout, "
            f"more than {have:.0f} of its {gpu_memory_gib:.0f} GiB; use more nodes, a larger tensorParallel "
            "or a larger GPU"
        )
    return None
