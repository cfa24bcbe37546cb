"""The plan's copy of the trainer's facts (domain/model_facts.py, domain/memory_fit.py) equals the
trainer's own: model shapes, parameter and FLOP counts, flag defaults, bf16 peaks, and the bytes
the model saves for backward. The domain cannot import the trainer, so these tests hold them equal.
"""

from __future__ import annotations

import pytest
import torch
from trainer import metrics
from trainer.model import (
    LOSS_CHUNK_TOKENS,
    MODEL_SIZES,
    Transformer,
    flops_per_token,
    parameter_count,
)

from domain import model_facts
from domain.memory_fit import activation_bytes
from domain.model_facts import MODEL_SHAPES


@pytest.mark.parametrize("name", sorted(MODEL_SIZES))
def test_shapes_and_counts_are_the_trainers(name):
    cfg, shape = MODEL_SIZES[name], MODEL_SHAPES[name]
    fields = ("dim", "n_layers", "n_heads", "n_kv_heads", "ffn_dim", "vocab_size", "max_seq_len")
    assert {f: getattr(shape, f) for f in fields} == {f: getattr(cfg, f) for f in fields}
    assert shape.parameters == parameter_count(cfg)
    for seq_len in (1, 128, cfg.max_seq_len):
        assert shape.flops_per_token(seq_len) == flops_per_token(cfg, seq_len)
    assert sorted(MODEL_SHAPES) == sorted(MODEL_SIZES)


@pytest.mark.parametrize("name", ["tiny", "small"])  # 1b would allocate 4.4 GB here
def test_fsdp_units_are_the_modules(name):
    """The memory model counts blocks and the embedding, norm and head units (workload/trainer/parallelize.py)."""
    model = Transformer(MODEL_SIZES[name])
    shape = MODEL_SHAPES[name]
    assert sum(p.numel() for p in model.blocks[0].parameters()) == shape.block_parameters
    root = (model.embed, model.head, model.norm)
    assert sum(p.numel() for m in root for p in m.parameters()) == shape.root_parameters


def test_loss_chunk_is_the_trainers():
    assert model_facts.LOSS_CHUNK_TOKENS == LOSS_CHUNK_TOKENS


def test_peak_table_is_the_trainers():
    assert model_facts.PEAK_BF16_FLOPS == metrics.PEAK_BF16_FLOPS


@pytest.mark.parametrize(
    ("device_name", "peak"),
    [
        ("NVIDIA A10G", 70e12),  # g5: matched by neither A100 nor A10
        ("NVIDIA A10", 125e12),
        ("NVIDIA A100-SXM4-80GB", 312e12),
        ("NVIDIA H100 80GB HBM3", 989e12),
        ("NVIDIA L40S", 362e12),
        ("NVIDIA L4", 121e12),
    ],
)
def test_mfu_peak_by_cuda_device_name(monkeypatch, device_name, peak):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: device_name)
    assert metrics.peak_flops(torch.device("cuda", 0)) == peak
    assert model_facts.peak_bf16_flops(device_name.removeprefix("NVIDIA ")) == peak


@pytest.mark.parametrize(("name", "batch", "seq"), [("tiny", 3, 128), ("small", 2, 256)])
def test_activation_count_is_what_the_model_saves(name, batch, seq):
    """Every tensor autograd saves in a bf16 forward with the loss, each storage counted once and
    the parameters left out, is what the memory model counts (within a few scalars)."""
    cfg = MODEL_SIZES[name]
    torch.manual_seed(0)
    model = Transformer(cfg).to(torch.bfloat16)
    params = {t.untyped_storage().data_ptr() for t in (*model.parameters(), *model.buffers())}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    tokens, targets = (torch.randint(0, cfg.vocab_size, (batch, seq)) for _ in range(2))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(tokens, targets)
    assert abs(sum(saved.values()) - activation_bytes(MODEL_SHAPES[name], batch * seq)) <= 16
