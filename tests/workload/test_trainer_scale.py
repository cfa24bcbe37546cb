"""The trainer at scale, shown on CPU: node-local checkpoint volumes with S3, each rank uploading
only its own files, defaults per model size, metrics and the data loader. (SIGTERM on one node, as
a drain delivers it: the drill in test_workload.py.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import boto3
import numpy as np
import pytest
import torch
from support.ports import unused_port
from support.training import SHARES_THE_UNINTERRUPTED_RUN, static_node
from trainer import checkpoint
from trainer.config import parse_args
from trainer.data import Prefetcher, TokenWindows, write_synthetic_dataset
from trainer.metrics import PEAK_BF16_FLOPS
from trainer.model import FLOPS_CONVENTION, MODEL_SIZES, Transformer, flops_per_token


def records(output: str) -> list[dict]:
    return [json.loads(line.split("metrics ", 1)[1]) for line in output.splitlines() if "metrics {" in line]


def two_nodes(tmp: Path, ckpts: tuple[Path, Path], *args: str, env: dict | None = None) -> list[dict]:
    port = unused_port()
    procs = [static_node(tmp, r, port, ckpts[r], *args, env=env) for r in (0, 1)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    for p, out in zip(procs, outs, strict=True):
        assert p.returncode == 0, out[-3000:]
    return records(outs[0])


def s3_keys(prefix: str) -> list[str]:
    found = boto3.client("s3").list_objects_v2(Bucket="ckpt", Prefix=prefix).get("Contents", [])
    return sorted(o["Key"] for o in found)


@pytest.mark.slow(seconds=20)
def test_node_local_volumes_with_s3_resume_from_a_step_every_rank_can_load(tmp_path, moto_server):
    local = (tmp_path / "node0", tmp_path / "node1")
    uri = "s3://ckpt/run"
    # Keep the newest and every multiple of 10: S3 and each volume keep steps 10 and 20 (S3 is
    # pruned by the same rule as the volumes: with every 0 it would hold step 20 alone).
    args = (
        "--checkpoint-every",
        "10",
        "--keep-checkpoints",
        "1",
        "--keep-every",
        "10",
        "--s3-checkpoints",
        uri,
    )
    two_nodes(tmp_path, local, "--steps", "20", *args, env=moto_server)
    # Each node keeps only its own ranks' files, and prunes its own volume.
    assert sorted(p.name for p in local[1].iterdir() if p.name.startswith("step_")) == [
        "step_00000010",
        "step_00000020",
    ]
    assert sorted(p.name for p in checkpoint.step_dir(local[1], 20).iterdir()) == ["COMPLETE", "__1_0.distcp"]
    # Each rank uploaded its own shard, rank 0 the metadata, then the marker: one copy of each.
    assert s3_keys("run/step_00000020/") == [
        f"run/step_00000020/{n}" for n in (".metadata", "COMPLETE", "__0_0.distcp", "__1_0.distcp")
    ]
    # An upload interrupted before step 20's marker: S3's newest complete step is 10, which node 1
    # cannot load from its own disk (no metadata) and node 0 no longer has. Both must agree on 10.
    boto3.client("s3").delete_object(Bucket="ckpt", Key="run/step_00000020/COMPLETE")
    shutil.rmtree(checkpoint.step_dir(local[0], 10))
    events = two_nodes(tmp_path, local, "--steps", "30", *args, env=moto_server)
    assert events[0]["resumed_from"] == 10
    assert events[-2] == {"event": "checkpoint", "step": 30}  # the last save, then its window's record
    assert events[-1]["step"] == 30 and events[-1]["checkpoint_stall_s"] > 0


def test_each_rank_uploads_only_its_own_files(tmp_path):
    d = tmp_path / "step"
    d.mkdir()
    for name in (".metadata", "__0_0.distcp", "__1_0.distcp", "__2_0.distcp", "COMPLETE"):
        (d / name).write_bytes(b"x")
    owned = [sorted(p.name for p in checkpoint.rank_files(d, r)) for r in range(3)]
    assert owned == [[".metadata", "__0_0.distcp"], ["__1_0.distcp"], ["__2_0.distcp"]]


def test_model_size_defaults_seed_and_sequence_limits():
    tiny, big = parse_args(["--model", "tiny"]), parse_args(["--model", "1b"])
    assert (tiny.lr, tiny.warmup_steps) == (3e-3, 10)
    assert (big.lr, big.warmup_steps) == (3e-4, 200)
    assert parse_args(["--model", "1b", "--lr", "1e-4"]).lr == 1e-4
    with pytest.raises(SystemExit):
        parse_args(["--model", "tiny", "--seq-len", "129"])  # tiny's maximum is 128


def test_flops_convention_and_gpu_peaks():
    cfg = MODEL_SIZES["1b"]
    attention = 12 * cfg.n_layers * cfg.dim * 2048  # counted in full, as PaLM and torchtitan do
    assert flops_per_token(cfg, 2048) - flops_per_token(cfg, 0) == attention
    assert "counted in full" in FLOPS_CONVENTION
    peaks = dict(PEAK_BF16_FLOPS)
    names = [k for k, _ in PEAK_BF16_FLOPS]

    def peak(device_name: str) -> float:
        return next(v for k, v in PEAK_BF16_FLOPS if k in device_name)

    assert peak("NVIDIA H100 PCIe") == 756e12 and peak("NVIDIA H100 NVL") == 835e12
    assert peak("NVIDIA H100 80GB HBM3") == peaks["H100"] == 989e12
    assert peak("NVIDIA H200") == 989e12
    assert names.index("H100 PCIe") < names.index("H100")


def test_chunked_loss_equals_the_full_cross_entropy():
    from trainer import model as model_module

    torch.manual_seed(0)
    cfg = MODEL_SIZES["tiny"]
    m = Transformer(cfg)
    tokens = torch.randint(0, cfg.vocab_size, (3, 40))
    targets = torch.randint(0, cfg.vocab_size, (3, 40))
    full = torch.nn.functional.cross_entropy(m(tokens).flatten(0, 1), targets.flatten())
    old = model_module.LOSS_CHUNK_TOKENS
    model_module.LOSS_CHUNK_TOKENS = 7  # several chunks, the last one short
    try:
        assert torch.allclose(m(tokens, targets), full, atol=1e-5)
    finally:
        model_module.LOSS_CHUNK_TOKENS = old


def test_weight_init_follows_the_seed():
    def weights(seed):
        torch.manual_seed(seed)
        return Transformer(MODEL_SIZES["tiny"]).head.weight

    assert torch.equal(weights(1), weights(1)) and not torch.equal(weights(1), weights(2))


def test_the_shuffle_is_computed_once_per_epoch(tmp_path, monkeypatch):
    path = write_synthetic_dataset(tmp_path / "t.bin", 200_000, 256)
    data = TokenWindows(path, 256, 32, rank=0, world_size=1)
    calls = []
    real = np.random.default_rng

    def counting(seed):
        calls.append(seed)
        return real(seed)

    monkeypatch.setattr(np.random, "default_rng", counting)
    for step in range(50):
        data.batch(step, 4)
    assert len(calls) == 1


def test_prefetcher_yields_the_same_batches_in_order(tmp_path):
    path = write_synthetic_dataset(tmp_path / "t.bin", 50_000, 256)
    data = TokenWindows(path, 256, 32, rank=0, world_size=1)
    loader = Prefetcher(data, 3, 9, 4, depth=2, pin=False)
    try:
        for step in range(3, 9):
            x, y = loader.next()
            ex, ey = data.batch(step, 4)
            assert torch.equal(x, ex) and torch.equal(y, ey)
    finally:
        loader.close()


@pytest.mark.slow
@SHARES_THE_UNINTERRUPTED_RUN
def test_metrics_report_window_loss_validation_samples_and_goodput(uninterrupted_run):
    """The records of a two-rank torchrun run (UNINTERRUPTED_ARGS: 40 steps, a record every 5,
    validation and a checkpoint every 10)."""
    logged = [r for r in uninterrupted_run.records if "loss" in r]
    assert [r["step"] for r in logged] == [5, 10, 15, 20, 25, 30, 35, 40]  # one per window
    for r in logged:
        assert {"samples_per_s", "tokens_per_s", "goodput", "checkpoint_stall_s", "data_wait_s"} <= set(r)
        assert 0 < r["goodput"] <= 1
        assert ("val_loss" in r) == (r["step"] % 10 == 0)  # validation when it is due, only then
    at = {r["step"]: r for r in logged}
    # The step-10 save is counted in its own window (saves come before the record), the last one too.
    assert at[10]["checkpoint_stall_s"] > 0 and at[40]["checkpoint_stall_s"] > 0
    assert at[5]["checkpoint_stall_s"] == 0  # no save before step 10
    validation = [at[step]["val_loss"] for step in (10, 20, 30, 40)]
    assert validation == sorted(set(validation), reverse=True), validation  # falls at every check


def test_a_checkpoint_is_complete_at_the_first_agreement_after_every_rank_has_written_it(
    tmp_path, monkeypatch, capsys
):
    """A fault between two saves resumes from the newest written checkpoint, not the one before
    it: its marker does not wait for the next save. Writes here finish at once (a done future),
    so the marker follows at the next agreement (every log interval, 5 steps), before that step's
    record; the crash at step 25's record then leaves 10 and 20."""
    import concurrent.futures

    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from trainer.distributed import DistContext
    from trainer.train import train

    def written_now(state, checkpoint_id, process_group, **staging):
        dcp.save(state, checkpoint_id=checkpoint_id, process_group=process_group)
        done = concurrent.futures.Future()
        done.set_result(None)
        return done

    monkeypatch.setattr(dcp, "async_save", written_now)
    monkeypatch.setenv("LOCAL_RANK", "0")
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        ctx = DistContext(0, 1, 0, torch.device("cpu"), dist.new_group(backend="gloo"))
        args = parse_args(
            ["--steps", "40", "--checkpoint-every", "10", "--log-every", "5", "--no-compile",
             "--checkpoint-dir", str(tmp_path / "ckpt"), "--data-cache", str(tmp_path / "data")]
        )  # fmt: skip

        def crash_at_25(record: dict) -> None:
            if record.get("step") == 25:
                raise RuntimeError("node lost")

        with pytest.raises(RuntimeError, match="node lost"):
            train(args, ctx, report=crash_at_25)
    finally:
        dist.destroy_process_group()
    assert checkpoint.complete_steps(tmp_path / "ckpt") == [10, 20]
    events = [
        json.loads(x.removeprefix("metrics "))
        for x in capsys.readouterr().out.splitlines()
        if x.startswith("metrics ")
    ]
    assert [(e["step"], e["at_step"]) for e in events if e.get("event") == "checkpoint_complete"] == [
        (10, 15),
        (20, 25),
    ]
