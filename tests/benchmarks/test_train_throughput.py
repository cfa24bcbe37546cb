"""The throughput benchmark runs the trainer's own loop and sums its windows without re-rounding."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import types

import pytest
import torch
from support.paths import ROOT
from support.ports import unused_port

from benchmarks.train_throughput import report, summarize


def window(step: int, step_time: float, goodput: float, **more) -> dict:
    return {
        "step": step,
        "loss": 1.0,
        "step_time_s": step_time,
        "goodput": goodput,
        "tokens_per_s": more.get("tokens_per_s", 100.0),
        "mfu": more.get("mfu"),
        "checkpoint_stall_s": more.get("stall", 0.0),
        "data_wait_s": more.get("wait", 0.0),
    }


def test_the_summary_weighs_each_window_by_its_steps_and_leaves_out_the_warm_up():
    records = [
        {"event": "start", "resumed_from": 0},
        window(5, 1.0, 0.5, mfu=0.01),  # compilation: left out
        window(10, 0.1, 1.0, mfu=0.4, wait=0.1),
        {"event": "checkpoint", "step": 10},
        window(12, 0.2, 0.5, mfu=0.2, tokens_per_s=50.0, stall=0.4),  # the last, partial window
    ]
    s = summarize(records, warmup_windows=1)
    assert (s["windows"], s["steps"]) == (2, 7)
    # Training 5 x 0.1 + 2 x 0.2 = 0.9 s; wall 0.5 / 1.0 + 0.4 / 0.5 = 1.3 s.
    assert s["goodput"] == pytest.approx(0.9 / 1.3)
    assert s["step_time_s"] == pytest.approx(0.9 / 7)
    assert s["mfu"] == pytest.approx((0.4 * 5 + 0.2 * 2) / 7)
    assert s["tokens_per_s"] == pytest.approx((100 * 0.5 + 50 * 0.4) / 0.9)
    assert (s["checkpoint_stall_s"], s["data_wait_s"]) == (pytest.approx(0.4), pytest.approx(0.1))
    assert s["checkpoint_run_s"] == pytest.approx(0.4)  # no stall in the warm-up window


def test_the_report_shows_reserved_memory_beside_allocated():
    """The caching allocator holds more than the tensors use, and it is what must fit the GPU."""
    cfg = types.SimpleNamespace(
        model="tiny",
        batch_size=8,
        sequence_length=128,
        checkpoint_every=4,
        checkpoint_minutes=0,
        compile=False,
        float8=False,
    )
    ctx = types.SimpleNamespace(world_size=1, device=torch.device("cpu"))
    s = summarize([window(4, 0.1, 1.0), window(8, 0.1, 0.5, stall=0.1)], warmup_windows=0)
    out = report(cfg, ctx, s, memory=(3 * 2**30, 5 * 2**30))
    assert "peak memory  3.0 GiB allocated, 5.0 GiB reserved on rank 0's GPU" in out
    assert "checkpoint stalls 0.100 s; 0.100 s in the whole run, the last save included" in out
    assert "peak memory" not in report(cfg, ctx, s, memory=None)


def test_a_run_too_short_for_a_measured_window_says_so():
    with pytest.raises(SystemExit, match="no log window after the warm-up"):
        summarize([window(5, 1.0, 0.5)], warmup_windows=1)


SHORT_RUN = ("--steps", "12", "--log-every", "4", "--checkpoint-every", "4", "--no-compile")


@pytest.mark.slow(seconds=15)
def test_the_benchmark_trains_the_production_loop_with_checkpoints(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.train_throughput", *SHORT_RUN],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env={
            **os.environ,
            "PYTHONPATH": "workload",
            "OMP_NUM_THREADS": "1",
            "MASTER_PORT": str(unused_port()),
        },
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "model tiny" in out and "checkpoints every 4 steps" in out
    assert "measured over 8 steps (2 log windows after the warm-up)" in out
    goodput = float(re.search(r"goodput +([0-9.]+)%", out).group(1))
    assert 0 < goodput <= 100
    # Saves at 4 (warm-up), 8 and 12, the last before the last record: all counted.
    run_stall = float(re.search(r"([0-9.]+) s in the whole run, the last save included", out).group(1))
    assert run_stall > 0
    assert "MFU          n/a" in out  # no peak figure for a CPU
