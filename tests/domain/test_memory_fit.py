"""The memory model of the default trainer (domain/memory_fit.py): what a GPU holds per term, which
jobs fit which instance types, and what the refusal proposes instead.

The A10G figures, worked by hand for the 1b model (1,104,218,112 parameters, 2048 tokens per
sequence, 22888 MiB = 22.35 GiB per GPU):
- one g5.xlarge GPU holds all the fp32 state alone: 16 x 1.104e9 = 17.7 GB (16.5 GiB); the blocks
  save 130,184 bytes per token each (16 of them: 2.08 MB a token) and the loss 128,000 (fp32
  log-probabilities over 32k words): 4.3 GiB saved a sequence, 0.4 more for its chunk of
  logits, so not even batch 1 fits (24.3 GiB);
- four g5.12xlarge GPUs shard the state to 4.1 GiB each; batch 2 is 9.3 GiB of activations and
  16.6 GiB in all, batch 3 21.2 GiB, batch 4 over 25 GiB: 3 is the most that fits.
"""

from __future__ import annotations

import pytest

from domain.catalog import INSTANCE_TYPES
from domain.memory_fit import (
    GIB,
    SUGGESTED_SHARE,
    JobShape,
    activation_bytes,
    gpu_fit_problem,
    gpu_memory_need,
    largest_batch,
    staging_bytes_per_node,
    staging_problem,
)
from domain.model_facts import MODEL_SHAPES

ONE_B = MODEL_SHAPES["1b"]
G5, G5_12, G6E, P5 = (INSTANCE_TYPES[n] for n in ("g5.xlarge", "g5.12xlarge", "g6e.xlarge", "p5.48xlarge"))


def test_state_is_16_bytes_and_a_checkpoint_12_bytes_a_parameter():
    assert ONE_B.parameters == 1_104_218_112
    assert gpu_memory_need(ONE_B, 1, 2048, world_size=1).state == 16 * 1_104_218_112
    assert gpu_memory_need(ONE_B, 1, 2048, world_size=16).state == 16 * 1_104_218_112 // 16
    # The 13.3 GB the issue measured per checkpoint, all of it pinned on a one-GPU node.
    assert staging_bytes_per_node(ONE_B, world_size=1, ranks_per_node=1) == 13_250_617_344
    assert staging_bytes_per_node(ONE_B, world_size=16, ranks_per_node=8) == 13_250_617_344 // 2


def test_activations_grow_with_tokens_not_their_square():
    """SDPA's flash kernels keep no seq x seq scores: twice the sequence, twice the bytes."""
    assert activation_bytes(ONE_B, 4096) == 2 * activation_bytes(ONE_B, 2048)
    assert activation_bytes(ONE_B, 2048) / GIB == pytest.approx(4.26, abs=0.01)


def test_1b_at_batch_8_is_refused_on_one_a10g():
    why, fits = gpu_fit_problem(JobShape("1b", 8, 2048, nodes=1), G5)
    assert why.startswith("the 1b model at batch 8 x 2048 tokens over 1 GPU(s) needs ~55.2 GiB per GPU")
    assert why.endswith("more than the 22.4 GiB of each A10G on g5.xlarge")
    assert fits == (
        "model: small (fits at --batch-size 8), or a node group of p5.4xlarge "
        "(the cheapest type the job fits as it is)"
    )
    assert largest_batch(ONE_B, 2048, 1, G5) == 0
    assert gpu_memory_need(ONE_B, 1, 2048, 1).total / GIB == pytest.approx(24.3, abs=0.05)


def test_1b_at_batch_2_fits_four_a10g():
    assert gpu_fit_problem(JobShape("1b", 2, 2048, nodes=1), G5_12) is None
    assert gpu_memory_need(ONE_B, 2, 2048, 4).total / GIB == pytest.approx(16.6, abs=0.05)
    assert largest_batch(ONE_B, 2048, 4, G5_12) == 3
    _, fits = gpu_fit_problem(JobShape("1b", 8, 2048, nodes=1), G5_12)
    # Batch 3 fits (21.2 of 22.35 GiB, 95%), too close to suggest: 2 leaves 10% of the GPU free.
    assert gpu_fit_problem(JobShape("1b", 3, 2048, nodes=1), G5_12) is None
    assert largest_batch(ONE_B, 2048, 4, G5_12, SUGGESTED_SHARE) == 2
    assert fits == "--batch-size 2 or less in args (the most that leaves 10% of the GPU free)"


def test_a_shorter_sequence_fits_a_larger_batch():
    assert largest_batch(ONE_B, 1024, 4, G5_12) == 6
    assert gpu_fit_problem(JobShape("1b", 6, 1024, nodes=1), G5_12) is None


def test_prod_job_fits_two_p5_with_room():
    job = JobShape("1b", 8, 2048, nodes=2)
    assert gpu_fit_problem(job, P5) is None and staging_problem(job, P5) is None
    assert gpu_memory_need(ONE_B, 8, 2048, 16).total / GIB == pytest.approx(39.8, abs=0.05)
    assert largest_batch(ONE_B, 2048, 16, P5) == 17


def test_staging_must_leave_half_the_node():
    why, fits = staging_problem(JobShape("1b", 1, 2048, nodes=1), G5)
    assert why.startswith("async checkpoints pin each rank's shard of the fp32 parameters and Adam")
    assert "~12.3 GiB on each g5.xlarge node, more than half its 16 GiB" in why
    assert fits == "2 or more nodes, a smaller model, or an instance type with more memory"
    # g6e.xlarge has 32 GiB: the same 12.3 GiB is under half.
    assert staging_problem(JobShape("1b", 1, 2048, nodes=1), G6E) is None
    assert staging_problem(JobShape("small", 8, 1024, nodes=1), G5) is None
