"""The model as it trains: float8 linear layers, compiled blocks, sharded with FSDP2.

GPUs: bf16 parameters with fp32 reductions, each block compiled (the torchtitan default) and
sharded on its own, so FSDP2 keeps its per-block all-gathers. CPU: fp32, eager, the same sharding.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from trainer import flags
from trainer.distributed import DistContext
from trainer.exits import CONFIG_EXIT_CODE, Refused
from trainer.model import MODEL_SIZES, Transformer

if TYPE_CHECKING:
    from torchao.float8 import Float8LinearConfig

# cast_forward_inputs=False: FSDP2 would otherwise cast every floating-point forward argument of a
# unit to param_dtype (FSDPState._cast_forward_inputs -> _cast_fp_tensor in torch 2.13's
# distributed/fsdp/_fully_shard/_fsdp_state.py), the blocks' fp32 RoPE tables included, and
# apply_rope would rotate with bf16 angles. Nothing else needs the cast: token ids are integers and
# each unit's activations come out of bf16 parameters already.
GPU_MIXED_PRECISION = MixedPrecisionPolicy(
    param_dtype=torch.bfloat16, reduce_dtype=torch.float32, cast_forward_inputs=False
)
CPU_MIXED_PRECISION = MixedPrecisionPolicy()


def build_model(
    name: str, ctx: DistContext, compile_blocks: bool | None = None, seed: int = 0, float8: bool = False
) -> torch.nn.Module:
    """The `name` model on the rank's device: float8 if asked, compiled per block, then sharded."""
    torch.manual_seed(seed)  # same initial weights on every rank before sharding
    model = Transformer(MODEL_SIZES[name]).to(ctx.device)
    if float8:
        enable_float8(model, ctx.device)
    if compiles(compile_blocks, ctx.device):
        compile_each_block(model)
    shard(model, ctx)
    return model


def compiles(compile_blocks: bool | None, device: torch.device) -> bool:
    """`--compile` as given; unset, on GPUs only, as torchtitan does."""
    return device.type == "cuda" if compile_blocks is None else compile_blocks


def float8_config(emulate: bool = False) -> Float8LinearConfig:
    """Tensorwise dynamic scaling with float8 all-gathers: FSDP2 gathers the weights in float8,
    and only then can `precompute_float8_scales` apply (torchao wraps the weights it scales,
    WeightWithDynamicFloat8CastTensor, only with this flag; torchtitan gates its precompute on
    it). `emulate` runs the float8 matmuls in high precision, for CPU tests."""
    from torchao.float8 import Float8LinearConfig

    return Float8LinearConfig(enable_fsdp_float8_all_gather=True, emulate=emulate)


def enable_float8(model: torch.nn.Module, device: torch.device) -> None:
    """Swap the blocks' linear layers for torchao's float8 training layers (dynamic scaling)."""
    # Permanent (exit 2): every restart of the gang would land on the same GPUs.
    if device.type != "cuda" or torch.cuda.get_device_capability(device) < flags.FLOAT8_CAPABILITY:
        found = torch.cuda.get_device_name(device) if device.type == "cuda" else "no GPU"
        raise Refused(CONFIG_EXIT_CODE, flags.float8_refusal(found))
    try:
        from torchao.float8 import convert_to_float8_training
    except ImportError:
        raise Refused(CONFIG_EXIT_CODE, "--float8 needs torchao (pip install torchao)") from None
    convert_to_float8_training(
        model,
        config=float8_config(),
        module_filter_fn=lambda module, fqn: fqn.startswith("blocks."),  # not the head
    )


def precompute_float8_scales(model: torch.nn.Module) -> None:
    """After each optimizer step: every float8 weight's scale for the next all-gathers in one
    all-reduce, instead of one all-reduce per weight inside each all-gather (torchao's
    WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather reduces the amax of its weight when no
    scale is precomputed; torchao/float8/fsdp_utils.py). Nothing without float8 layers."""
    if "torchao.float8" not in sys.modules:
        return  # no float8 layer before torchao.float8 is imported; a run without one never imports it
    from torchao.float8 import precompute_float8_dynamic_scale_for_fsdp

    precompute_float8_dynamic_scale_for_fsdp(model)  # itself a no-op when no weight is float8


def compile_each_block(model: torch.nn.Module) -> None:
    """Per block, so FSDP2 keeps its per-block all-gathers."""
    for block in model.blocks:
        block.compile(fullgraph=True)


def shard(model: torch.nn.Module, ctx: DistContext, mp: MixedPrecisionPolicy | None = None) -> None:
    """FSDP2 over every rank, laid out as torchtitan's llama apply_fsdp does. The embedding its
    own unit: forward then starts on its all-gather alone (and backward ends on its
    reduce-scatter alone), not on the embedding's, norm's and head's together in the root, which
    gathers nothing. Each block its own unit. The norm and the head one unit, and it and the last
    block kept gathered after forward: backward needs them at once. Then the root."""
    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
    if mp is None:
        mp = GPU_MIXED_PRECISION if ctx.device.type == "cuda" else CPU_MIXED_PRECISION
    fully_shard(model.embed, mesh=mesh, mp_policy=mp)
    last = len(model.blocks) - 1
    for i, block in enumerate(model.blocks):
        fully_shard(block, mesh=mesh, mp_policy=mp, reshard_after_forward=i < last)
    # A grouped unit runs its hooks per call of its modules (_register_group_forward_hooks in
    # torch 2.13's _fsdp_state.py): the Head computes the chunked loss in one call (model.Head).
    fully_shard([model.norm, model.head], mesh=mesh, mp_policy=mp, reshard_after_forward=False)
    fully_shard(model, mesh=mesh, mp_policy=mp)
