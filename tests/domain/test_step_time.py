"""The modeled step (domain/step_time.py): compute, the traffic FSDP sends between nodes over the
link the group has (EFA, else the instance's sustained baseline, never its burst), and the launch
floor; the largest bounds the step.

The issue's case: a newcomer's Llama 1b FSDP on 4 x g6e.xlarge printed "step 0.42 s": FLOPs over
the L40S's peak. FSDP moves ~6.4 GB through each node's link per step, which the 2.5 Gbps
baseline carries in ~20 s.
"""

from __future__ import annotations

import pytest

from domain.catalog import INSTANCE_TYPES
from domain.model_facts import MODEL_SHAPES, has_bf16_tensor_cores, peak_bf16_flops
from domain.step_time import (
    ASSUMED_MFU,
    LAUNCH_S_PER_BLOCK,
    LAUNCH_S_PER_STEP,
    Link,
    compute_seconds,
    ddp_node_bytes,
    fsdp_node_bytes,
    step_time,
)

ONE_B, TINY = MODEL_SHAPES["1b"], MODEL_SHAPES["tiny"]
G6E = INSTANCE_TYPES["g6e.xlarge"]
P5 = INSTANCE_TYPES["p5.48xlarge"]


def test_compute_is_flops_over_the_assumed_share_of_peak():
    flops = ONE_B.flops_per_token(2048) * 8 * 2048  # one rank's step: 1.15e14
    assert compute_seconds(ONE_B, 8, 2048, 989e12) == flops / (989e12 * ASSUMED_MFU)
    assert compute_seconds(ONE_B, 8, 2048, 989e12) == pytest.approx(0.307, abs=0.001)


def test_fsdp_sends_params_gathered_twice_and_fp32_gradients_reduced():
    """bf16 all-gathers for the forward and the backward (the last block, head and norm keep
    theirs), fp32 reduce-scatter, each (W-1)/W of the whole through a node's link."""
    p = ONE_B.parameters
    kept = ONE_B.block_parameters + ONE_B.vocab_size * ONE_B.dim + ONE_B.dim
    assert fsdp_node_bytes(ONE_B, 4) == 3 / 4 * (2 * p + 2 * (p - kept) + 4 * p)
    assert fsdp_node_bytes(ONE_B, 4) == pytest.approx(6.44e9, rel=0.01)
    assert fsdp_node_bytes(ONE_B, 1) == 0
    # DDP's ring all-reduce of bf16 gradients: twice (W-1)/W of 2 bytes per parameter.
    assert ddp_node_bytes(ONE_B, 4) == 2 * 3 / 4 * 2 * p


def test_the_newcomers_g6e_job_is_network_bound_on_the_sustained_baseline():
    assert (G6E.baseline_gbps, G6E.efa_supported) == (2.5, False)  # bursts to 20 Gbps, sustains 2.5
    s = step_time(ONE_B, 4, 2048, peak_bf16_flops("L40S"), 4, 1, Link(G6E.baseline_gbps, efa=False))
    assert s.compute_s == pytest.approx(0.42, abs=0.01)
    assert s.communication_s == pytest.approx(6.44e9 / (2.5e9 / 8), rel=0.01)  # ~20.6 s
    assert s.bound == "network" and s.step_s == s.communication_s


def test_efa_on_p5_leaves_the_step_compute_bound():
    s = step_time(ONE_B, 8, 2048, peak_bf16_flops("H100"), 2, 8, Link(P5.baseline_gbps, efa=True))
    assert s.communication_s == pytest.approx(fsdp_node_bytes(ONE_B, 16) / 400e9)
    assert s.communication_s < s.compute_s and s.bound == "compute" and s.step_s == s.compute_s


def test_one_node_sends_nothing_between_nodes():
    s = step_time(ONE_B, 8, 2048, peak_bf16_flops("H100"), 1, 8, Link(P5.baseline_gbps, efa=True))
    assert s.communication_s is None and s.bound == "compute"


def test_a_tiny_model_is_bound_by_its_launches():
    """FLOPs over the L4's peak make a 0.02 ms step; the launches of its 2 blocks take 7 ms."""
    s = step_time(TINY, 8, 128, peak_bf16_flops("L4"), 1, 1, Link(2.5, efa=False))
    assert s.compute_s < 1e-4
    assert s.launch_s == LAUNCH_S_PER_STEP + 2 * LAUNCH_S_PER_BLOCK
    assert s.bound == "launch" and s.step_s == s.launch_s


def test_b200_has_its_peak_and_pre_ampere_gpus_have_no_bf16_tensor_cores():
    assert peak_bf16_flops(INSTANCE_TYPES["p6-b200.48xlarge"].gpu_model) == 2.25e15
    for gpu in ("T4", "T4g", "V100", "K80", "M60"):
        assert not has_bf16_tensor_cores(gpu)
    for name in ("g5.xlarge", "g6.xlarge", "g6e.xlarge", "p4d.24xlarge", "p5.48xlarge", "p6-b200.48xlarge"):
        assert has_bf16_tensor_cores(INSTANCE_TYPES[name].gpu_model)
