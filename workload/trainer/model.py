"""A Llama-style decoder-only transformer: RMSNorm, rotary embeddings, SwiGLU, grouped-query attention.

The output head is untied from the embedding (Llama 3.2 1B ties them): under FSDP2 a tied weight
would have to live in one sharding unit with both the first and the last layer, and the untied
head costs 65M parameters at a 32k vocabulary. Parameter counts and FLOPs below include it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class ModelConfig:
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    ffn_dim: int
    vocab_size: int
    max_seq_len: int
    rope_theta: float = 500000.0
    norm_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads


# "1b" follows Llama 3.2 1B's shape with a 32k vocabulary (~1.0B parameters).
MODEL_SIZES: dict[str, ModelConfig] = {
    "tiny": ModelConfig(
        dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=192, vocab_size=256, max_seq_len=128
    ),
    "small": ModelConfig(
        dim=512, n_layers=8, n_heads=8, n_kv_heads=4, ffn_dim=1536, vocab_size=32000, max_seq_len=1024
    ),
    "1b": ModelConfig(
        dim=2048, n_layers=16, n_heads=32, n_kv_heads=8, ffn_dim=8192, vocab_size=32000, max_seq_len=2048
    ),
}


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in fp32: bf16 sums of squares lose too much precision.
        normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


def rope_tables(cfg: ModelConfig, device: torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = 1.0 / (
        cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, device=device).float() / cfg.head_dim)
    )
    angles = torch.outer(torch.arange(cfg.max_seq_len, device=device).float(), inv_freq)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x: (batch, heads, seq, head_dim); rotate pairs (even, odd) in fp32, as torchtitan does:
    # bf16 angles lose precision at long positions.
    seq = x.shape[-2]
    cos, sin = cos[:seq], sin[:seq]
    even, odd = x[..., 0::2].float(), x[..., 1::2].float()
    rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
    return rotated.flatten(-2).type_as(x)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.wq = nn.Linear(cfg.dim, cfg.n_heads * cfg.head_dim, bias=False)
        self.wkv = nn.Linear(cfg.dim, 2 * cfg.n_kv_heads * cfg.head_dim, bias=False)
        self.wo = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        c = self.cfg
        q = self.wq(x).view(b, s, c.n_heads, c.head_dim).transpose(1, 2)
        k, v = self.wkv(x).view(b, s, 2, c.n_kv_heads, c.head_dim).permute(2, 0, 3, 1, 4)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=c.n_kv_heads != c.n_heads)
        return self.wo(out.transpose(1, 2).reshape(b, s, c.dim))


class SwiGLU(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.w_gate_up = nn.Linear(cfg.dim, 2 * cfg.ffn_dim, bias=False)
        self.w_down = nn.Linear(cfg.ffn_dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.w_gate_up(x).chunk(2, dim=-1)
        return self.w_down(F.silu(gate) * up)


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.ffn = SwiGLU(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), cos, sin)
        return x + self.ffn(self.ffn_norm(x))


class Head(nn.Linear):
    """The output projection, and with `targets` the loss over it in one call: under FSDP2 the head
    is one unit with the final norm, and a unit's hooks run per call of its modules. Called once per
    loss chunk, FSDP2 would gather the unit again for the later chunks (one more all-gather of the
    head each step, seen on two gloo ranks); called once, it is gathered once."""

    def forward(self, x: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        if targets is None:
            return super().forward(x)
        return chunked_cross_entropy(super().forward, x, targets)


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.head = Head(cfg.dim, cfg.vocab_size, bias=False)
        cos, sin = rope_tables(cfg)
        # Buffers, not parameters: recomputed, never checkpointed.
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        std = 0.02
        for name, p in self.named_parameters():
            if p.dim() == 2:
                # Residual projections scaled down with depth (GPT-2 / Llama practice).
                scale = (
                    (2 * self.cfg.n_layers) ** -0.5 if name.endswith(("wo.weight", "w_down.weight")) else 1.0
                )
                nn.init.normal_(p, mean=0.0, std=std * scale)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        """Logits, or with `targets` the mean cross-entropy computed in sequence chunks: the full
        (batch, seq, vocab) fp32 logits never exist at once."""
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, self.rope_cos, self.rope_sin)
        return self.head(self.norm(x), targets)


LOSS_CHUNK_TOKENS = 8192


def chunked_cross_entropy(
    project: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, targets: torch.Tensor
) -> torch.Tensor:
    """Mean next-token cross-entropy; logits stay in the compute dtype, the loss math is fp32."""
    flat_x, flat_t = x.flatten(0, 1), targets.flatten()
    total = flat_x.new_zeros((), dtype=torch.float32)
    for start in range(0, flat_t.numel(), LOSS_CHUNK_TOKENS):
        logits = project(flat_x[start : start + LOSS_CHUNK_TOKENS])
        total = total + F.cross_entropy(
            logits.float(), flat_t[start : start + LOSS_CHUNK_TOKENS], reduction="sum"
        )
    return total / flat_t.numel()


def parameter_count(cfg: ModelConfig) -> int:
    attn = (
        cfg.dim * cfg.n_heads * cfg.head_dim + 2 * cfg.dim * cfg.n_kv_heads * cfg.head_dim + cfg.dim * cfg.dim
    )
    ffn = 3 * cfg.dim * cfg.ffn_dim
    per_layer = attn + ffn + 2 * cfg.dim
    return cfg.n_layers * per_layer + 2 * cfg.vocab_size * cfg.dim + cfg.dim


FLOPS_CONVENTION = (
    "PaLM/torchtitan: 6N (N without the embedding) + 12*layers*dim*seq, causal attention counted in full"
)


def flops_per_token(cfg: ModelConfig, seq_len: int) -> float:
    """Training FLOPs per token by the PaLM (appendix B) and torchtitan convention: 6N for the
    weights plus 12*L*d*T for attention scores, counted in full although half is masked."""
    non_embedding = parameter_count(cfg) - cfg.vocab_size * cfg.dim
    return 6 * non_embedding + 12 * cfg.n_layers * cfg.dim * seq_len


# Peak learning rate and warmup steps that suit each size (larger models need a lower rate).
TRAINING_DEFAULTS: dict[str, tuple[float, int]] = {
    "tiny": (3e-3, 10),
    "small": (1e-3, 100),
    "1b": (3e-4, 200),
}
