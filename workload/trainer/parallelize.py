"""The model as it trains: float8 linear layers, compiled blocks, sharded with FSDP2.

GPUs: bf16 parameters with fp32 reductions, each block compiled (the torchtitan default) and
sharded on its own, so FSDP2 keeps its per-block all-gathers. CPU: fp32, eager, the same sharding.
"""

from __future__ import annotations

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from trainer.distributed import DistContext
from trainer.model import MODEL_SIZES, Transformer


def build_model(
    name: str, ctx: DistContext, compile_blocks: bool | None = None, seed: int = 0, float8: bool = False
) -> torch.nn.Module:
    """The `name` model on the rank's device: float8 if asked, compiled per block, then sharded."""
    torch.manual_seed(seed)  # same initial weights on every rank before sharding
    model = Transformer(MODEL_SIZES[name]).to(ctx.device)
    if float8:
        enable_float8(model, ctx.device)
    if compile_blocks is None:
        compile_blocks = ctx.device.type == "cuda"  # the default on GPUs, as torchtitan does
    if compile_blocks:
        compile_each_block(model)
    shard(model, ctx)
    return model


def enable_float8(model: torch.nn.Module, device: torch.device) -> None:
    """Swap the blocks' linear layers for torchao's float8 training layers (dynamic scaling)."""
    if device.type != "cuda" or torch.cuda.get_device_capability(device) < (8, 9):
        raise SystemExit("--float8 needs a GPU with float8 tensor cores (H100/H200, L4/L40S)")
    try:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    except ImportError:
        raise SystemExit("--float8 needs torchao (pip install torchao)") from None
    convert_to_float8_training(
        model,
        config=Float8LinearConfig(enable_fsdp_float8_all_gather=True),
        module_filter_fn=lambda module, fqn: fqn.startswith("blocks."),  # not the head
    )


def compile_each_block(model: torch.nn.Module) -> None:
    """Per block, so FSDP2 keeps its per-block all-gathers."""
    for block in model.blocks:
        block.compile(fullgraph=True)


def shard(model: torch.nn.Module, ctx: DistContext) -> None:
    """FSDP2 over every rank: each block its own unit, then the rest of the model."""
    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
    mp = (
        MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        if ctx.device.type == "cuda"
        else MixedPrecisionPolicy()
    )
    for block in model.blocks:
        fully_shard(block, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
