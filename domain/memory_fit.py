"""Whether the default trainer's model trains on a GPU, and whether its checkpoint staging fits the
node's memory.

Peak memory per GPU, the terms summed as if all were live at once (an upper bound: in backward
the activations shrink while the gradients grow):

- Sharded state, 16 bytes per parameter over the world: FSDP2 keeps fp32 parameters and fp32
  gradients and AdamW two fp32 moments, each rank a 1/world shard (workload/trainer/parallelize.py).
  The 16 bytes are the ZeRO paper's mixed-precision Adam figure (Rajbhandari et al. 2020, sec. 3.1:
  2 + 2 + 12 bytes); here the fp32 copy is the sharded parameter and the bf16 one is transient.
- Gathered bf16 parameters: the final norm and head, one FSDP unit kept gathered from forward to
  backward (reshard_after_forward=False in workload/trainer/parallelize.py, as torchtitan does), plus
  two blocks in flight (the one computing and the one prefetched; the last block is also kept). The
  embedding, its own unit, is resharded after forward; it is counted as if gathered at the same
  time, an upper bound by 2 bytes x vocab x dim (131 MB for 1b).
- Gradient reduction of the largest unit: its bf16 unsharded gradients and the fp32 reduce-scatter
  input they are cast into (`foreach_reduce` in _fsdp_collectives.py allocates it in reduce_dtype).
- Activations, bytes per token per block, after Korthikanti et al. 2022 ("Reducing Activation
  Recomputation in Large Transformer Models", sec. 4: 34 sbh + 5 a s^2 b per layer) counted for this
  model's code: SDPA saves q, k, v, its output and a log-sum-exp per head (flash attention: no
  s^2 scores), each RMSNorm saves two fp32 copies of its input and its bf16 output (10d), the
  linear layers their bf16 inputs, SwiGLU its gate/up output, the SiLU output and their product:
  30d + 6kv + 8ffn + 4heads + 8. Counted eager: torch.compile (on by default on GPUs) saves less,
  so a job fits either way. tests/workload/test_model_facts.py measures the saved tensors on CPU
  and holds this count equal to them.
- The loss: every chunk's fp32 log-probabilities stay saved for backward (4 bytes x vocab per
  token, chunking does not free them), and one 8192-token chunk of bf16 logits with its fp32 copy
  (6 bytes x vocab per token) is live at a time (trainer.model.chunked_cross_entropy).
- A fixed allowance for the CUDA context, cuBLAS and NCCL workspaces and the caching allocator's
  fragmentation.

Host staging: `dcp.async_save` copies each rank's shard of the fp32 parameters and Adam moments
(12 bytes per parameter) into one pinned host buffer per rank, held for the run, so a node pins
its ranks' share of the checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass

from domain.catalog import INSTANCE_TYPES, InstanceType
from domain.model_facts import LOSS_CHUNK_TOKENS, MODEL_SHAPES, ModelShape

GIB = 2**30
STATE_BYTES_PER_PARAM = 16  # fp32 parameter, fp32 gradient, two fp32 AdamW moments
CHECKPOINT_BYTES_PER_PARAM = 12  # fp32 parameter and the two moments (DCP's model + optim state)
GATHERED_BYTES_PER_PARAM = 2  # bf16 compute copy
REDUCE_BYTES_PER_PARAM = 2 + 4  # bf16 unsharded gradient + its fp32 reduce-scatter input
BLOCKS_IN_FLIGHT = 2
ALLOWANCE_BYTES = 2 * GIB  # CUDA context, cuBLAS/NCCL workspaces, allocator fragmentation
# Pinned memory cannot be paged out; the other half of the node holds the ranks' processes, the
# data loader, the page cache the checkpoint writes go through, and the kubelet.
HOST_STAGING_SHARE = 0.5
MAX_BATCH = 4096  # the largest batch the fit search tries


def block_activation_bytes_per_token(shape: ModelShape) -> int:
    """What one block saves for backward per token (see the module docstring)."""
    d, kv, ffn, heads = shape.dim, shape.kv_dim, shape.ffn_dim, shape.n_heads
    return 30 * d + 6 * kv + 8 * ffn + 4 * heads + 8


def activation_bytes(shape: ModelShape, tokens: int) -> int:
    """Saved for backward over the whole model: the blocks, the final norm and head input (12d + 4),
    the token ids and targets (int64), every token's fp32 log-probabilities."""
    per_token = (
        shape.n_layers * block_activation_bytes_per_token(shape)
        + 12 * shape.dim
        + 4
        + 16
        + 4 * shape.vocab_size
    )
    return tokens * per_token


@dataclass(frozen=True)
class MemoryNeed:
    """Modeled peak bytes on one GPU, by term."""

    state: int
    gathered: int
    reduce: int
    activations: int
    loss_chunk: int
    allowance: int = ALLOWANCE_BYTES

    @property
    def total(self) -> int:
        return self.state + self.gathered + self.reduce + self.activations + self.loss_chunk + self.allowance

    def describe(self) -> str:
        parts = (
            ("sharded fp32 state", self.state),
            ("gathered bf16 parameters and gradients", self.gathered + self.reduce),
            ("activations", self.activations + self.loss_chunk),
            ("CUDA allowance", self.allowance),
        )
        return ", ".join(f"{name} {value / GIB:.1f}" for name, value in parts)


def gpu_memory_need(shape: ModelShape, batch_size: int, seq_len: int, world_size: int) -> MemoryNeed:
    tokens = batch_size * seq_len
    return MemoryNeed(
        state=STATE_BYTES_PER_PARAM * shape.parameters // world_size,
        gathered=GATHERED_BYTES_PER_PARAM
        * (shape.root_parameters + BLOCKS_IN_FLIGHT * shape.block_parameters),
        reduce=REDUCE_BYTES_PER_PARAM * max(shape.root_parameters, shape.block_parameters),
        activations=activation_bytes(shape, tokens),
        loss_chunk=min(tokens, LOSS_CHUNK_TOKENS) * 6 * shape.vocab_size,
    )


def gpu_memory_bytes(instance: InstanceType) -> int:
    return instance.gpu_memory_mib * 2**20  # EC2 gives it per GPU, in MiB


# A batch suggested to a user leaves this share of the GPU free: the model counts the allocator's
# fragmentation and NCCL's buffers only roughly (CUDA allowance), and a run at 96% of the GPU is one
# shape change from running out.
SUGGESTED_SHARE = 0.9


def largest_batch(
    shape: ModelShape, seq_len: int, world_size: int, instance: InstanceType, share: float = 1.0
) -> int:
    """The most sequences per rank whose need is within `share` of the GPU (0: not even one); the
    need grows with the batch."""
    have = gpu_memory_bytes(instance) * share
    low, high = 0, MAX_BATCH
    while low < high:
        mid = (low + high + 1) // 2
        if gpu_memory_need(shape, mid, seq_len, world_size).total <= have:
            low = mid
        else:
            high = mid - 1
    return low


def staging_bytes_per_node(shape: ModelShape, world_size: int, ranks_per_node: int) -> int:
    return CHECKPOINT_BYTES_PER_PARAM * shape.parameters * ranks_per_node // world_size


def staging_room_bytes(instance: InstanceType) -> int:
    return int(instance.memory_gib * GIB * HOST_STAGING_SHARE)


@dataclass(frozen=True)
class JobShape:
    """What the fit depends on: the default trainer's model, batch and length, and its nodes."""

    model: str
    batch_size: int
    seq_len: int
    nodes: int

    def world(self, instance: InstanceType) -> int:
        return self.nodes * max(1, instance.gpus)

    def gpu_fits(self, instance: InstanceType) -> bool:
        shape = MODEL_SHAPES[self.model]
        need = gpu_memory_need(shape, self.batch_size, self.seq_len, self.world(instance))
        return need.total <= gpu_memory_bytes(instance)

    def staging_fits(self, instance: InstanceType) -> bool:
        shape = MODEL_SHAPES[self.model]
        need = staging_bytes_per_node(shape, self.world(instance), max(1, instance.gpus))
        return need <= staging_room_bytes(instance)


def gpu_fit_problem(job: JobShape, instance: InstanceType) -> tuple[str, str] | None:
    """(why, what would fit) when the model cannot train on the instance's GPUs, else None."""
    shape = MODEL_SHAPES[job.model]
    world = job.world(instance)
    need = gpu_memory_need(shape, job.batch_size, job.seq_len, world)
    have = gpu_memory_bytes(instance)
    if need.total <= have:
        return None
    why = (
        f"the {job.model} model at batch {job.batch_size} x {job.seq_len} tokens over {world} GPU(s) needs "
        f"~{need.total / GIB:.1f} GiB per GPU ({need.describe()}), more than the "
        f"{have / GIB:.1f} GiB of each {instance.gpu_model} on {instance.name}"
    )
    return why, _what_fits(job, instance)


def _what_fits(job: JobShape, instance: InstanceType) -> str:
    """The largest batch that fits with headroom (or, failing that, at all), else a smaller model
    or a larger instance type."""
    shape, world = MODEL_SHAPES[job.model], job.world(instance)
    batch = largest_batch(shape, job.seq_len, world, instance, SUGGESTED_SHARE)
    if batch:
        return f"--batch-size {batch} or less in args (the most that leaves {1 - SUGGESTED_SHARE:.0%} of the GPU free)"
    batch = largest_batch(shape, job.seq_len, world, instance)
    if batch:
        return f"--batch-size {batch} in args (the most that fits, with under {1 - SUGGESTED_SHARE:.0%} free)"
    options = []
    names = list(MODEL_SHAPES)
    for smaller in reversed(names[: names.index(job.model)]):
        seq = min(job.seq_len, MODEL_SHAPES[smaller].max_seq_len)
        fit = largest_batch(MODEL_SHAPES[smaller], seq, job.world(instance), instance, SUGGESTED_SHARE)
        if fit:
            options.append(f"model: {smaller} (fits at --batch-size {min(fit, job.batch_size)})")
            break
    larger = larger_instance_type(job, instance)
    if larger:
        options.append(f"a node group of {larger} (the cheapest type the job fits as it is)")
    return ", or ".join(options) or "a smaller model, or a GPU with more memory"


def larger_instance_type(job: JobShape, instance: InstanceType) -> str | None:
    """The cheapest on-demand NVIDIA type with more GPU memory on which the job fits as it is."""
    bigger = [
        t
        for t in INSTANCE_TYPES.values()
        if t.has_nvidia_gpus
        and t.on_demand
        and t.gpu_memory_mib > instance.gpu_memory_mib
        and job.gpu_fits(t)
        and job.staging_fits(t)
    ]
    # A type with no known price is suggested only when no priced one fits.
    cheapest = min(bigger, key=lambda t: (t.hourly_usd is None, t.hourly_usd or 0.0)) if bigger else None
    return cheapest.name if cheapest else None


def staging_problem(job: JobShape, instance: InstanceType) -> tuple[str, str] | None:
    """(why, what would fit) when a node cannot pin its ranks' checkpoint staging, else None."""
    shape = MODEL_SHAPES[job.model]
    world = job.world(instance)
    need = staging_bytes_per_node(shape, world, max(1, instance.gpus))
    room = staging_room_bytes(instance)
    if need <= room:
        return None
    why = (
        f"async checkpoints pin each rank's shard of the fp32 parameters and Adam moments in host "
        f"memory: ~{need / GIB:.1f} GiB on each {instance.name} node, more than half its "
        f"{instance.memory_gib} GiB (the other half holds the ranks' processes, the data loader and "
        "the page cache the checkpoint writes go through)"
    )
    nodes = -(-need * job.nodes // room)
    return why, f"{nodes} or more nodes, a smaller model, or an instance type with more memory"
