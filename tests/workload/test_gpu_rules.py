"""The code paths that only run on GPU nodes, held to NCCL's rules on CPU (see collective_spy.py):
every collective on the default group carries tensors on the training device, every one on the
gloo control group CPU tensors. On a GPU machine the same code runs for real (README: GPU checks)."""

from __future__ import annotations

import json

import pytest
import torch
from support.collective_spy import TRAINING_DEVICE, emulated_nccl
from trainer import preflight
from trainer.data import Prefetcher, TokenWindows, write_synthetic_dataset
from trainer.distributed import DistContext
from trainer.metrics import Window, validation_loss
from trainer.model import MODEL_SIZES, Transformer
from trainer.resilience import Agreement, Decision

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
        # (Meta tensors read as 1: every flag comes back set.)
        decision = Agreement(ctx, checkpoint_seconds=0, every=5).decide(
            stop=True, writing=False, uploading=True
        )
        assert decision == Decision(stop=True, checkpoint_due=True, any_writing=True, any_uploading=True)
        window.metrics(10, ctx, tokens_per_step=64, batch_size=2, fpt=1.0, peak=None)
        validation_loss(model, data, ctx, batches=2, batch_size=2)
    assert [c[1:] for c in spy.calls] == [("default", "meta")] * 3


def test_the_spy_refuses_a_cpu_tensor_on_the_default_group(monkeypatch):
    """The rule the tests above rely on, as NCCL states it."""
    import torch.distributed as dist

    with emulated_nccl(monkeypatch), pytest.raises(RuntimeError, match="device type cpu"):
        dist.all_reduce(torch.zeros(1))


def test_a_jobs_own_node_check_runs_before_step_0_and_fails_the_job_for_good(monkeypatch, tmp_path, capsys):
    """On an EFA group the default trainer checks the nodes it got before its first step: devices,
    the network NCCL chose, bus bandwidth. A failure exits 3, which the PyTorchJob's ExitCode policy
    treats as permanent; nothing trains over TCP."""
    import torch.distributed as dist
    from trainer.config import parse_args
    from trainer.resilience import PREFLIGHT_EXIT_CODE
    from trainer.train import train

    gathered_on = []

    def all_gather_object(out, obj, group=None):
        gathered_on.append(group)
        out[:] = [obj] * len(out)

    monkeypatch.setattr(dist, "all_gather_object", all_gather_object)
    monkeypatch.setattr(preflight, "TERMINATION_LOG", tmp_path / "termination-log")
    monkeypatch.setattr(preflight, "RDMA_DEVICES", tmp_path / "no-infiniband")
    args = parse_args(
        [
            "--preflight-gpus-per-node",
            "8",
            "--preflight-efa-per-node",
            "32",
            "--preflight-min-bus-bandwidth",
            "200",
        ]
    )
    with emulated_nccl(monkeypatch) as spy, pytest.raises(SystemExit) as stopped:
        train(args, gpu_context())
    assert stopped.value.code == PREFLIGHT_EXIT_CODE == 3
    # Gathered over gloo: NCCL would need the objects on the GPU.
    assert gathered_on == [CONTROL]
    assert {c[1:] for c in spy.calls if c[0] == "all_reduce"} == {("default", "meta")}
    out = capsys.readouterr().out
    assert "metrics" not in out  # no step ran
    (line,) = [x for x in out.splitlines() if x.startswith("preflight ")]
    problems = json.loads(line.removeprefix("preflight "))["problems"]
    assert any("0 EFA devices given to the pod" in p for p in problems)
    assert any(p.startswith("the collectives use") and "not EFA" in p for p in problems)
    assert any(p.startswith("all-reduce bus bandwidth") for p in problems)
    assert (tmp_path / "termination-log").read_text().startswith(problems[0][:40])


def test_the_agreement_reads_its_flags_back_once(monkeypatch):
    """Each agreement (every log step: test_agreement.py) is one all-reduce and one read back to
    the host: on a GPU each read waits for the stream, so four flags read one by one were four."""
    with emulated_nccl(monkeypatch) as spy:
        decision = Agreement(gpu_context(), checkpoint_seconds=0, every=5).decide(stop=False)
    assert decision == Decision(stop=True, checkpoint_due=True, any_writing=True, any_uploading=True)
    assert spy.host_reads == 1


def test_batches_are_pinned_and_handed_over_contiguous(monkeypatch, tmp_path):
    """A pinned view keeps its strides (aten's _pin_memory), and CUDA copies a non-contiguous
    tensor from a staging copy in pageable memory, synchronously, non_blocking or not. Pinning
    itself needs CUDA: here every tensor the prefetcher pins is recorded instead."""
    data = TokenWindows(write_synthetic_dataset(tmp_path / "d.bin", 20_000, 256), 256, 32, 0, 1)
    pinned = []

    def pin_memory(t: torch.Tensor) -> torch.Tensor:
        pinned.append(t.is_contiguous())
        return t

    monkeypatch.setattr(torch.Tensor, "pin_memory", pin_memory)
    loader = Prefetcher(data, 0, 3, 4, depth=2, pin=True)
    try:
        handed = [loader.next() for _ in range(3)]
    finally:
        loader.close()
    assert pinned == [True] * 6
    assert all(t.is_contiguous() for batch in handed for t in batch)
    assert all(t.is_contiguous() for t in data.fixed_batch(0, 4))  # validation batches too


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinned memory needs CUDA")
def test_pinned_batches_on_a_gpu_machine(tmp_path):
    data = TokenWindows(write_synthetic_dataset(tmp_path / "d.bin", 20_000, 256), 256, 32, 0, 1)
    loader = Prefetcher(data, 0, 1, 4, depth=1, pin=True)
    try:
        inputs, targets = loader.next()
    finally:
        loader.close()
    assert inputs.is_pinned() and targets.is_pinned()
    assert inputs.is_contiguous() and targets.is_contiguous()


def test_a_watchdogs_stacks_reach_a_shared_pipe_in_whole_lines(monkeypatch):
    """A pod's ranks share one stdout and their watchdogs fire together: each write is whole lines,
    none over PIPE_BUF (a pipe's atomic size), so two ranks' dumps interleave by line at worst.
    faulthandler itself writes a stack in pieces of a few bytes."""
    import select

    from trainer.resilience import all_stacks, write_whole

    writes: list[bytes] = []
    monkeypatch.setattr("os.write", lambda fd, data: writes.append(data) or len(data))
    stacks = all_stacks()
    text = stacks * (3 * select.PIPE_BUF // len(stacks) + 1)
    write_whole(text)
    assert b"".join(writes) == text and len(writes) > 1
    assert all(len(w) <= select.PIPE_BUF and w.endswith(b"\n") for w in writes)
    assert b"Current thread 0x" in stacks and b"test_a_watchdogs_stacks_reach" in stacks
