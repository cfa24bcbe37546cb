"""The code paths that only run on GPU nodes, held to NCCL's rules on CPU (see collective_spy.py):
every collective on the default group carries tensors on the training device, every one on the
gloo control group CPU tensors. On a GPU machine the same code runs for real (README: GPU checks)."""

from __future__ import annotations

import sys

import torch
from collective_spy import TRAINING_DEVICE, emulated_nccl
from conftest import ROOT

sys.path.insert(0, str(ROOT / "workload"))

from trainer import preflight
from trainer.data import TokenWindows, write_synthetic_dataset
from trainer.model import MODEL_SIZES, Transformer
from trainer.train import Agreement, DistContext, Window, validation_loss

CONTROL = object()  # the gloo control group


def gpu_context() -> DistContext:
    return DistContext(rank=0, world_size=2, local_rank=0, device=TRAINING_DEVICE, control=CONTROL)


def test_the_preflight_measures_on_the_training_device(monkeypatch):
    with emulated_nccl(monkeypatch) as spy:
        busbw = preflight.bus_bandwidth(TRAINING_DEVICE, size_mb=1, iters=2)
    assert busbw > 0
    reductions = [c for c in spy.calls if c[0] == "all_reduce"]
    # Warm-up, timed iterations, then the slowest rank's time: all on the training device.
    assert reductions == [("all_reduce", "default", "meta")] * (3 + 2 + 1)


def test_the_trainers_collectives_follow_each_groups_device(monkeypatch, tmp_path):
    ctx = gpu_context()
    cfg = MODEL_SIZES["tiny"]
    data = TokenWindows(
        write_synthetic_dataset(tmp_path / "d.bin", 20_000, cfg.vocab_size), cfg.vocab_size, 32, 0, 2
    )
    with torch.device(TRAINING_DEVICE):
        model = Transformer(cfg)
    window = Window(0.0, TRAINING_DEVICE)
    window.add(torch.ones((), device=TRAINING_DEVICE))
    with emulated_nccl(monkeypatch) as spy:
        assert Agreement(ctx, checkpoint_seconds=0).decide(stop=True) == (True, True)
        window.metrics(10, ctx, tokens_per_step=64, batch_size=2, fpt=1.0, peak=None)
        validation_loss(model, data, ctx, batches=2, batch_size=2)
    assert [c[1:] for c in spy.calls] == [("default", "meta")] * 3


def test_the_spy_refuses_a_cpu_tensor_on_the_default_group(monkeypatch):
    """The rule the tests above rely on, as NCCL states it."""
    import pytest
    import torch.distributed as dist

    with emulated_nccl(monkeypatch), pytest.raises(RuntimeError, match="device type cpu"):
        dist.all_reduce(torch.zeros(1))
