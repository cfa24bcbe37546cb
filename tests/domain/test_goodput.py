"""The goodput model (domain/goodput.py): the save cycle, and what bounds it.

The issue's case: the 1b model on 2 x p5 (16 H100) writes 6.6 GB per node every 50 steps. On the
root gp3 volume at gp3's unset 125 MiB/s that takes ~51 s per ~15 s of training (goodput ~30%);
on the 8-disk NVMe RAID0 under a second (goodput > 95%).
"""

from __future__ import annotations

import pytest

from domain.catalog import INSTANCE_TYPES
from domain.disks import checkpoint_disk
from domain.goodput import SAVE_FIXED_S, UPLOAD_FIXED_S, CheckpointPath, Goodput, modeled_goodput
from domain.model_facts import MODEL_SHAPES, peak_bf16_flops
from domain.step_time import compute_seconds

ONE_B = MODEL_SHAPES["1b"]
P5, G5 = INSTANCE_TYPES["p5.48xlarge"], INSTANCE_TYPES["g5.xlarge"]
H100 = peak_bf16_flops("H100")


def p5_goodput(write_gb_per_s: float, every: int = 50, minutes: float = 0.0) -> Goodput:
    path = CheckpointPath(write_gb_per_s, P5.baseline_gbps)
    return modeled_goodput(ONE_B, compute_seconds(ONE_B, 8, 2048, H100), 16, 8, every, minutes, path)


def test_root_gp3_at_its_default_throughput_spends_most_of_the_time_writing():
    g = p5_goodput(125 * 2**20 / 1e9)  # gp3 with no throughput set: 125 MiB/s
    assert g.checkpoint_gb_per_node == pytest.approx(6.63, abs=0.01)
    assert g.interval_s == pytest.approx(15.3, abs=0.1)
    assert g.write_s == pytest.approx(50.5, abs=0.1)
    assert g.bottleneck == "write"
    assert g.goodput == pytest.approx(0.30, abs=0.01)


def test_a_save_of_a_tiny_state_still_costs_its_fixed_stall_and_upload():
    """Without the fixed costs a tiny model's save took microseconds, and its goodput looked
    bound by nothing: each save stalls SAVE_FIXED_S, each upload takes UPLOAD_FIXED_S at least."""
    tiny = MODEL_SHAPES["tiny"]
    g = modeled_goodput(tiny, 0.007, 1, 1, 50, 0.0, CheckpointPath(1.0, 2.5))
    assert g.stage_s > SAVE_FIXED_S and g.upload_s > UPLOAD_FIXED_S
    assert g.bottleneck == "upload"  # 0.5 s of requests outlasts 50 steps of 7 ms
    assert g.goodput == pytest.approx(0.35 / (g.stage_s + g.upload_s))


def test_p5_nvme_raid0_keeps_goodput_over_95_percent():
    disk = checkpoint_disk(P5, 1000)
    assert disk.kind == "nvme-raid0"
    g = p5_goodput(disk.write_gb_per_s)
    assert g.write_s < g.interval_s and g.upload_s < g.interval_s
    assert g.bottleneck == "training"
    assert g.goodput == g.interval_s / (g.stage_s + g.interval_s)
    assert g.goodput >= 0.95


def test_a_time_cadence_shorter_than_the_steps_sets_the_interval():
    assert p5_goodput(8.0, every=50, minutes=0.1).interval_s == pytest.approx(6.0)
    assert p5_goodput(8.0, every=0, minutes=5).interval_s == 300
    assert p5_goodput(8.0, every=0, minutes=0).goodput == 1.0  # no save of its own, no stall


def test_upload_is_bounded_by_the_nodes_network():
    """g5.xlarge's 2.5 Gbps baseline uploads the small model's checkpoint at 0.3125 GB/s."""
    small = MODEL_SHAPES["small"]
    step = compute_seconds(small, 8, 1024, peak_bf16_flops("A10G"))
    g = modeled_goodput(small, step, 1, 1, 50, 0.0, CheckpointPath(1.0, 2.5))
    assert g.upload_s == pytest.approx(UPLOAD_FIXED_S + 12 * small.parameters / 1e9 / 0.3125)
    assert g.write_s == pytest.approx(12 * small.parameters / 1e9)
    no_s3 = modeled_goodput(small, step, 1, 1, 50, 0.0, CheckpointPath(1.0, 2.5, uploads=False))
    assert no_s3.upload_s == 0.0
