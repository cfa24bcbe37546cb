"""What the plan knows of the default trainer: its model shapes, FLOPs per token and the GPUs'
dense bf16 peaks.

The domain cannot import the training image's code (workload/trainer), so these are copies of
trainer.model (MODEL_SIZES, parameter_count, flops_per_token, LOSS_CHUNK_TOKENS) and
trainer.metrics.PEAK_BF16_FLOPS; tests/workload/test_model_facts.py holds them equal, so the two
cannot drift. The trainer's flags are not copied: the plan parses jobs' args with the trainer's own
parser (config/trainer_args.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelShape:
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    ffn_dim: int
    vocab_size: int
    max_seq_len: int

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @property
    def kv_dim(self) -> int:
        """Width of the keys (and of the values): grouped-query attention shares them across heads."""
        return self.n_kv_heads * self.head_dim

    @property
    def block_parameters(self) -> int:
        """One transformer block: attention, SwiGLU and its two RMSNorm weights (one FSDP unit)."""
        q_and_out = 2 * self.dim * self.n_heads * self.head_dim
        attn = q_and_out + 2 * self.dim * self.kv_dim
        return attn + 3 * self.dim * self.ffn_dim + 2 * self.dim

    @property
    def root_parameters(self) -> int:
        """What the root FSDP unit holds: the embedding, the untied head and the final norm."""
        return 2 * self.vocab_size * self.dim + self.dim

    @property
    def parameters(self) -> int:
        return self.n_layers * self.block_parameters + self.root_parameters

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token, PaLM (appendix B) / torchtitan convention: 6N without the
        embedding, plus 12*layers*dim*seq for attention scores, counted in full although causal."""
        non_embedding = self.parameters - self.vocab_size * self.dim
        return 6 * non_embedding + 12 * self.n_layers * self.dim * seq_len


MODEL_SHAPES: dict[str, ModelShape] = {
    "tiny": ModelShape(
        dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=192, vocab_size=256, max_seq_len=128
    ),
    "small": ModelShape(
        dim=512, n_layers=8, n_heads=8, n_kv_heads=4, ffn_dim=1536, vocab_size=32000, max_seq_len=1024
    ),
    "1b": ModelShape(
        dim=2048, n_layers=16, n_heads=32, n_kv_heads=8, ffn_dim=8192, vocab_size=32000, max_seq_len=2048
    ),
}

# The chunk of tokens whose vocabulary logits the loss materialises at once (trainer.model).
LOSS_CHUNK_TOKENS = 8192

# Dense bf16 peak FLOP/s per GPU (vendor datasheets), matched in order against the GPU's name:
# the same table as trainer.metrics.PEAK_BF16_FLOPS, which matches CUDA device names.
PEAK_BF16_FLOPS = (
    ("B200", 2.25e15),  # HGX B200: 4.5 PFLOP/s with sparsity, half that dense
    ("H100 PCIe", 756e12),
    ("H100 NVL", 835e12),
    ("H100", 989e12),  # SXM
    ("H200", 989e12),
    ("A100", 312e12),
    ("A10G", 70e12),  # AWS's part (g5); before "A10", which its name contains
    ("A10", 125e12),
    ("L40S", 362e12),
    ("L4", 121e12),
)


def peak_bf16_flops(gpu_name: str) -> float | None:
    """The first entry whose key the name contains (catalog names such as "H100" or "A10G")."""
    return next((v for k, v in PEAK_BF16_FLOPS if k in gpu_name), None)


# GPUs EC2 still sells that predate Ampere, so have no bf16 tensor cores: T4 (g4dn; T4g on g5g),
# V100 (p3), K80 (p2), M60 (g3). The default trainer computes in bf16 (its FSDP2 param_dtype):
# there it would run on emulated bf16, many times slower, or not at all.
PRE_AMPERE_GPUS = ("T4", "V100", "K80", "M60")


def has_bf16_tensor_cores(gpu_name: str) -> bool:
    return not any(k in gpu_name for k in PRE_AMPERE_GPUS)


# GPUs with float8 tensor cores (CUDA compute capability 8.9 and newer: Ada, Hopper, Blackwell), the
# trainer's --float8 condition (trainer.flags.FLOAT8_CAPABILITY) by name: A100 (8.0), A10G (8.6) and
# older have none.
FLOAT8_GPUS = ("H100", "H200", "B200", "L40S", "L4")


def has_float8_tensor_cores(gpu_name: str) -> bool:
    return any(k in gpu_name for k in FLOAT8_GPUS)
