"""The training workload: model, data sharding, checkpoints, and real CPU training runs.

The runs use torchrun with 2 gloo processes and a local 2-CPU Ray, as the image would run them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import boto3
import numpy as np
import pytest
import torch
from moto import mock_aws
from support.node_drill import QUICK_DETECTION, TwoNodeJob, operator_action
from support.paths import WORKLOAD
from support.training import (
    SHARES_THE_UNINTERRUPTED_RUN,
    TEST_BATCH,
    UNINTERRUPTED_ARGS,
    end_session,
    image_environment,
    losses,
    metrics_of,
    torchrun,
)
from trainer import checkpoint
from trainer.data import (
    STALE_SECONDS,
    SYNTHETIC_RULES,
    TokenWindows,
    resolve_dataset,
    token_dtype,
    write_synthetic_dataset,
)
from trainer.model import FLOPS_CONVENTION, MODEL_SIZES, Transformer, flops_per_token, parameter_count
from trainer.resilience import DRAINED_EXIT_CODE, RETRYABLE_EXIT_CODE

# --- model and data -------------------------------------------------------------------------


def test_parameter_counts():
    tiny = MODEL_SIZES["tiny"]
    assert parameter_count(tiny) == sum(p.numel() for p in Transformer(tiny).parameters())
    with torch.device("meta"):
        big = Transformer(MODEL_SIZES["1b"])
    assert parameter_count(MODEL_SIZES["1b"]) == sum(p.numel() for p in big.parameters())
    assert 1.0e9 < parameter_count(MODEL_SIZES["1b"]) < 1.3e9
    assert flops_per_token(MODEL_SIZES["1b"], 2048) > 6e9


def test_model_is_causal():
    torch.manual_seed(0)
    cfg = MODEL_SIZES["tiny"]
    model = Transformer(cfg).eval()
    tokens = torch.randint(0, cfg.vocab_size, (1, 24))
    changed = tokens.clone()
    changed[0, 12:] = (changed[0, 12:] + 1) % cfg.vocab_size
    with torch.no_grad():
        a, b = model(tokens), model(changed)
    assert torch.allclose(a[0, :12], b[0, :12], atol=1e-6)
    assert not torch.allclose(a[0, 12:], b[0, 12:])


def test_token_dtype():
    assert token_dtype(32000) == np.uint16 and token_dtype(128256) == np.uint32


def test_synthetic_data_is_runs_of_16_to_63_tokens_each_following_one_rule(tmp_path):
    vocab = 32_000  # large enough that a run's first token almost never follows a rule by chance
    path = write_synthetic_dataset(tmp_path / "t.bin", 50_000, vocab, seed=3)
    tokens = np.fromfile(path, dtype=token_dtype(vocab)).astype(np.int64)
    assert len(tokens) == 50_000 and tokens.min() >= 0 and tokens.max() < vocab

    def follows(a: int, b: int, run: np.ndarray) -> np.ndarray:
        return (a * run[:-1] + b) % vocab == run[1:]

    # Only a run's first token breaks the rule: breaks are 16 to 63 tokens apart.
    breaks = np.flatnonzero(~np.logical_or.reduce([follows(a, b, tokens) for a, b in SYNTHETIC_RULES]))
    assert np.diff(breaks).min() >= 16 and np.diff(breaks).max() <= 63
    # Within a run, one rule holds throughout.
    for start, end in zip(breaks[:-1] + 1, breaks[1:], strict=True):
        run = tokens[start : end + 1]
        assert any(follows(a, b, run).all() for a, b in SYNTHETIC_RULES), (start, end)
    assert (
        write_synthetic_dataset(tmp_path / "again.bin", 50_000, vocab, seed=3).read_bytes()
        == path.read_bytes()
    )


def test_ranks_read_disjoint_deterministic_shards(tmp_path):
    path = write_synthetic_dataset(tmp_path / "tokens.bin", 50_000, 256, seed=1)
    r0 = TokenWindows(path, 256, 32, rank=0, world_size=2)
    r1 = TokenWindows(path, 256, 32, rank=1, world_size=2)
    x0, y0 = r0.batch(7, 4)
    x1, _ = r1.batch(7, 4)
    assert x0.shape == (4, 32) and torch.equal(x0[:, 1:], y0[:, :-1])
    rows0, rows1 = {tuple(r.tolist()) for r in x0}, {tuple(r.tolist()) for r in x1}
    assert not rows0 & rows1
    assert torch.equal(r0.batch(7, 4)[0], x0)  # same step, same batch: resume needs no loader state
    assert not torch.equal(r0.batch(8, 4)[0], x0)


def test_dataset_from_s3_is_cached(tmp_path, fake_aws):
    local = write_synthetic_dataset(tmp_path / "src.bin", 10_000, 256)
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="data")
        s3.upload_file(str(local), "data", "datasets/tokens.bin")
        path = resolve_dataset("s3://data/datasets/tokens.bin", tmp_path / "cache")
        etag = s3.head_object(Bucket="data", Key="datasets/tokens.bin")["ETag"].strip('"')
        assert path == tmp_path / "cache" / "datasets" / "tokens.bin" / etag / "tokens.bin"
        assert path.read_bytes() == local.read_bytes()
        # A later pod on the node (the cache is the node's) reads the same file, not a new download.
        written = path.stat().st_mtime_ns
        assert resolve_dataset("s3://data/datasets/tokens.bin", tmp_path / "cache") == path
        assert path.stat().st_mtime_ns == written
        # The object uploaded anew: fetched anew; the older copy stays while a pod may still be
        # opening it, and goes once it is stale, as does a download a killed pod left.
        other = write_synthetic_dataset(tmp_path / "other.bin", 10_000, 256, seed=1)
        s3.upload_file(str(other), "data", "datasets/tokens.bin")
        again = resolve_dataset("s3://data/datasets/tokens.bin", tmp_path / "cache")
        assert again != path and again.read_bytes() == other.read_bytes()
        assert path.exists()
        left = again.with_name("tokens.bin.0123.part")
        left.write_bytes(b"half")
        hours_ago = time.time() - 2 * STALE_SECONDS
        for old in (path.parent, left):
            os.utime(old, (hours_ago, hours_ago))
        assert resolve_dataset("s3://data/datasets/tokens.bin", tmp_path / "cache") == again
        assert sorted(
            str(p.relative_to(tmp_path)) for p in (tmp_path / "cache").rglob("*") if p.is_file()
        ) == [str(again.relative_to(tmp_path))]


def test_latest_complete_skips_torn_checkpoints(tmp_path):
    for step, complete in ((10, True), (20, True), (30, False)):
        d = checkpoint.step_dir(tmp_path, step)
        d.mkdir()
        (d / "__0_0.distcp").write_bytes(b"x")
        if complete:
            (d / checkpoint.MARKER).write_text("{}")
    assert checkpoint.latest_complete(tmp_path) == 20
    checkpoint.prune(tmp_path, keep=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "step_00000020",
        "step_00000030",
    ]  # newer torn one stays


# --- real training runs ---------------------------------------------------------------------


@pytest.mark.slow(seconds=60)
@SHARES_THE_UNINTERRUPTED_RUN
def test_a_drain_then_two_lost_nodes_each_resume_the_job_from_the_right_checkpoint(
    tmp_path, uninterrupted_run, moto_server
):
    """Two nodes under c10d rendezvous, as a PyTorchJob's pods run them, each with its own
    checkpoint directory and S3 as the only medium they share (tests/support/node_drill.py), through
    the faults a long job meets. A drain: the kubelet's SIGTERM to one pod's PID 1 (the launcher)
    only; every rank saves the same step, the drained pod exits retryable (143) and is recreated,
    the survivor's torchrun restarts its workers (exit 143, never 0: the operator would mark the
    elastic job Succeeded), and the replacement, its directory empty, resumes with the survivor from
    the drain's save. Then a node that does not host the rendezvous is lost, launcher and workers,
    with no chance to clean up: the survivor's torchrun restarts its workers and admits the next
    replacement. Then worker-0 is lost with the store: the survivor exits 138 (retryable), and the
    recreated pods, both with empty directories, meet in a new rendezvous. After each loss the job
    resumes from S3's newest complete checkpoint (never from a torn save), and it ends at the right
    step with the losses of an uninterrupted run of the same schedule, which is checked first: two
    torchrun processes whose loss goes down."""
    # A checkpoint every 5 steps: each loss comes once S3 holds a step newer than the last resume,
    # and a step's S3 marker lands at the agreement after it, so with saves every 10 the job could
    # reach step 40 between the newest marker and the loss, on a busy machine (it did).
    args = ["--steps", "40", "--checkpoint-every", "5", "--log-every", "5", "--collective-timeout", "30"]
    args += ["--keep-checkpoints", "8"]  # every save stays, on the volumes and in S3, to be looked at
    # The reference trains the same schedule (when it saves changes no loss).
    assert (UNINTERRUPTED_ARGS[:2], UNINTERRUPTED_ARGS[4:6]) == (tuple(args[:2]), tuple(args[4:6]))
    uninterrupted = uninterrupted_run.records
    reference = losses(uninterrupted)
    assert sorted(reference) == [5, 10, 15, 20, 25, 30, 35, 40] and reference[40] < reference[5] - 1.0
    assert uninterrupted[0] == {
        "event": "start",
        "resumed_from": 0,
        "steps": 40,
        "world_size": 2,
        "model": "tiny",
        "flops_convention": FLOPS_CONVENTION,
    }
    assert all(r["tokens_per_s"] > 0 and r["step_time_s"] > 0 for r in uninterrupted if "loss" in r)
    assert sorted(p.name for p in (uninterrupted_run.directory / "ckpt" / "step_00000040").iterdir()) == [
        ".metadata",
        "COMPLETE",
        "__0_0.distcp",
        "__1_0.distcp",
    ]

    job = TwoNodeJob(tmp_path / "job", args, f"s3://ckpt/{tmp_path.name}", env=QUICK_DETECTION)
    newest = []  # S3's newest complete step when the job resumes after each loss
    try:
        job.start("worker-0", hosts_store=True)
        job.start("worker-1")
        job.wait_for(lambda r: r.get("step", 0) >= 5 and "loss" in r, "a training step")
        job.drain("worker-1")
        drained = job.exit_code("worker-1")
        assert (drained, operator_action(drained)) == (DRAINED_EXIT_CODE, "pod recreated"), job.log(
            "worker-1"
        )[-3000:]
        # The survivor's torchrun restarts its workers, which wait in the rendezvous: it has not
        # exited (0 would end the job as Succeeded), and every rank saved the agreed step.
        assert job.nodes["worker-0"].poll() is None, job.log("worker-0")[-3000:]
        (stop,) = [r for _, r in job.records() if r.get("event") == "stopped"]
        stopped = stop["step"]
        # The periodic saves before the drain, then the drain's, uploaded whole before the pods
        # exited; each volume holds the same.
        saved = [*range(5, stopped, 5), stopped]
        assert job.s3_steps() == saved
        assert checkpoint.complete_steps(job.volume("worker-1")) == saved
        job.start("worker-1-replacement")
        job.wait_for_checkpoint(stopped + 1)
        drained_ranks = _ranks_after_resuming(job, ("worker-0", "worker-1-replacement"))
        _assert_each_volume_took_what_its_rank_reads(job, stopped, drained_ranks)

        runs = len(job.starts())
        job.lose("worker-1-replacement")
        # A save that never finished, newer than any step the job can resume from (S3's newest at
        # the loss, or the next, whose marker a surviving rank 0 may have been putting up), at a
        # step no save of this schedule uses.
        torn = checkpoint.step_dir(job.volume("worker-0"), job.s3_steps()[-1] + 8)
        torn.mkdir()
        (torn / "__0_0.distcp").write_bytes(b"half a shard")
        job.start("worker-1-second-replacement")
        # Read once the job has resumed: no marker of the resumed run's own comes before its first
        # save and the agreement after it.
        job.wait_for_resume(runs)
        newest.append(job.s3_steps()[-1])
        job.wait_for_checkpoint(newest[0] + 1)
        runs = len(job.starts())
        job.lose("worker-0")
        assert job.exit_code("worker-1-second-replacement") == RETRYABLE_EXIT_CODE
        assert "the rendezvous store (127.0.0.1:" in job.log("worker-1-second-replacement")
        # Read now: rank 0 went with worker-0 and its survivor has exited, so nothing puts a marker
        # up until the recreated pods run (read after their start, a loaded machine can let their
        # first save land first).
        newest.append(job.s3_steps()[-1])
        job.start("worker-0-replacement", hosts_store=True)
        job.start("worker-1-recreated")
        job.wait_for_resume(runs)
        assert job.finish() == {"worker-0-replacement": 0, "worker-1-recreated": 0}
    finally:
        job.stop()

    assert DRAINED_EXIT_CODE == 143  # 128 + SIGTERM
    assert "launch: SIGTERM (a drain)" in job.log("worker-1")
    # The survivor's workers stopped retryable (143), not 0, and were restarted by its torchrun.
    assert "exitcode  : 143" in job.log("worker-0") or "exitcode: 143" in job.log("worker-0")
    assert "mismatch" not in job.log("worker-0") + job.log("worker-1")
    pods = (
        "worker-0",
        "worker-1",
        "worker-1-replacement",
        "worker-1-second-replacement",
        "worker-0-replacement",
        "worker-1-recreated",
    )
    records = [r for name in pods for r in metrics_of(job.log(name))]
    assert [r for r in records if r.get("event") == "stopped"] == [stop]  # the drain's, only
    assert 5 <= stopped < 40 and stop["reason"] == "SIGTERM"
    starts = [r["resumed_from"] for r in records if r.get("event") == "start"]
    # The drain's save, then at each loss the newest complete, not the torn one.
    assert starts == [0, stopped, *newest] and stopped < newest[0] < newest[1] < 40
    trained = losses(records)
    assert max(trained) == 40 and job.s3_steps()[-1] == 40
    assert checkpoint.complete_steps(job.volume("worker-1-recreated"))[-1] == 40
    for step, value in trained.items():
        if not any(step - 5 < start < step for start in starts):  # a window cut by a resume is partial
            assert value == pytest.approx(reference[step], abs=2e-3), (step, value, reference[step])


def _ranks_after_resuming(job: TwoNodeJob, names: tuple[str, str]) -> dict[str, int]:
    """Ranks are dealt afresh at the rendezvous, in the order of the nodes' (address, pid) (torch's
    dynamic_rendezvous `_mark_rendezvous_complete`): a replacement may come back as either rank.
    Rank 0 prints the metrics, so the node whose log holds the resumed start is rank 0."""
    resumed_on = [
        name
        for name in names
        if any(r.get("event") == "start" and r["resumed_from"] for r in metrics_of(job.log(name)))
    ]
    ranks = {name: 0 if [name] == resumed_on else 1 for name in names}
    assert sorted(ranks.values()) == [0, 1], resumed_on
    return ranks


def _assert_each_volume_took_what_its_rank_reads(job: TwoNodeJob, step: int, ranks: dict[str, int]) -> None:
    """Each volume took from S3 what its rank reads: the metadata, rank 0's file (every rank reads
    it) and its own shard; the replacement's empty directory nothing more."""

    def read_by(rank: int) -> set[str]:
        return {".metadata", "COMPLETE", "__0_0.distcp", f"__{rank}_0.distcp"}

    def held(name: str) -> set[str]:
        return {p.name for p in checkpoint.step_dir(job.volume(name), step).iterdir()}

    survivor, replacement = ranks
    assert held(replacement) == read_by(ranks[replacement])
    assert read_by(ranks[survivor]) <= held(survivor)


@pytest.mark.slow(seconds=15)
def test_a_rank_that_hangs_is_ended_by_the_step_watchdog(tmp_path):
    """Rank 1 stops at step 5 (as on a GPU that fell off the bus); rank 0 waits in the next
    all-reduce. Both watchdogs end their ranks after 5 s without a step, with every thread's stack,
    and torchrun sees a failed worker (it would restart them, within maxRestarts) instead of a job
    that hangs until someone notices."""
    proc = torchrun(tmp_path, "--steps", "40", "--inject-hang-step", "5", "--step-timeout", "5")
    out, _ = proc.communicate(timeout=240)  # a bound for the test, far above the watchdog's
    assert proc.returncode != 0, out[-3000:]
    assert "watchdog: rank 1 made no progress" in out and "limit 5 s" in out
    assert "Thread 0x" in out and "in _watch" in out  # faulthandler's dump of every thread
    assert "exitcode  : 86" in out or "exitcode: 86" in out, out[-3000:]


@pytest.mark.slow(seconds=15)
def test_survivors_of_a_dead_peer_leave_at_the_tightened_timeout(tmp_path):
    """Rank 1 freezes at step 5 (its watchdog off); rank 0 waits in the next collective. After the
    first step the training group's timeout is --train-collective-timeout (5 s here), not the 120 s
    the group started with: gloo gives up on the frozen peer at 5 s, rank 0 fails, and torchrun stops
    the gang (it would restart it, within maxRestarts). Before, rank 0 waited the whole start-up
    timeout, and in production the 300 s default."""
    proc = torchrun(
        tmp_path,
        *("--steps", "40", "--inject-hang-step", "5", "--step-timeout", "0"),
        *("--collective-timeout", "120", "--train-collective-timeout", "5"),
        env={"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "5"},
    )
    out, _ = proc.communicate(timeout=240)  # a bound for the test, far above either timeout
    assert proc.returncode != 0, out[-3000:]
    assert '"event": "collective_timeout", "seconds": 5.0' in out, out[-3000:]
    assert "5000ms" in out and "120000ms" not in out, out[-3000:]  # gloo's own words for the wait


# Ray's settings for a one-machine run that a test waits on; none changes what Ray Train does.
RAY_ON_A_LAPTOP = {
    # The Train controller polls its workers every 2 s; a worker holds one report until a poll
    # takes it (a queue of one), so a report (a record, a checkpoint) made less than a poll after
    # the last one waits, and so does the run's end. Most of this test's time was those waits.
    "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.1",
    # An actor (a process) per run that polls Ray for node drains: nothing drains here.
    "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",
    # Ray lowers its workers' priority (niceness 15): harmless on a node of its own, but beside
    # the suite's other tests on a shared CPU they got almost none of it (this test took 4x as
    # long under `make test` as alone).
    "RAY_worker_niceness": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
}


@pytest.mark.slow(seconds=45)  # mostly Ray's own start-up: a local cluster, then actors per run
def test_ray_train_trains_and_resumes(tmp_path):
    """Two runs on a real local Ray, the driver started as the training image starts it: from the
    image's working directory (workload/, laid out as /opt/trainstack) with the environment the
    Dockerfile's training stage sets and none of the test's own. The first checks its own nodes, so
    Ray runs the job's worker process setup hook (trainer.preflight.log_nccl_network) in each worker,
    before the driver's directory is on the worker's sys.path (ray default_worker.py:
    load_and_execute_setup_hook before the main loop): the trainer must import from the image's
    environment (without the Dockerfile's PYTHONPATH: ModuleNotFoundError, the worker dies)."""
    from trainer.ray_train import UPLOADS

    script = f"""
import sys
import time
from trainer.ray_train import main
common = ["--num-workers", "2", "--checkpoint-every", "10", "--log-every", "5",
          "--checkpoint-dir", {str(tmp_path / "ckpt")!r}, "--data-cache", {str(tmp_path / "data")!r},
          "--storage-path", {str(tmp_path / "ray")!r}, *{TEST_BATCH!r}]
assert main(common + ["--steps", "20", "--preflight-gpus-per-node", "1"]) == 0
# Ray restores its latest reported checkpoint into a worker group (a restart, or a rerun with the
# same name and storage): here onto a fresh, empty volume. (Resuming from the job's own volume is
# the same loop as under torchrun, tested there.)
fresh = [a if a != {str(tmp_path / "ckpt")!r} else {str(tmp_path / "fresh")!r} for a in common]
assert main(fresh + ["--steps", "30"]) == 0
"""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PYTHONPATH")}
    driver = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=WORKLOAD,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**env, **image_environment(), "OMP_NUM_THREADS": "1", "RAY_DEDUP_LOGS": "0", **RAY_ON_A_LAPTOP},
        start_new_session=True,
    )
    try:
        stdout, stderr = driver.communicate(timeout=400)
    finally:
        end_session(driver.pid)  # the local Ray cluster, whatever of it is left
    out = stdout + stderr
    assert "No module named 'trainer'" not in out, out[-4000:]
    assert driver.returncode == 0, out[-4000:]
    # The first run's check ran after the hook, on the gloo group the CPU gives the two workers.
    checks = [
        json.loads(line.split("preflight ", 1)[1]) for line in out.splitlines() if "preflight {" in line
    ]
    assert checks and all(c["ok"] and c["world_size"] == 2 for c in checks), out[-4000:]
    starts = [r for r in metrics_of(out) if r.get("event") == "start"]
    assert [r["resumed_from"] for r in starts] == [0, 20]  # the second run: from Ray's checkpoint
    loss = losses(metrics_of(out))
    assert loss[20] < loss[5]
    assert checkpoint.complete_steps(tmp_path / "ckpt") == [10, 20]
    assert checkpoint.complete_steps(tmp_path / "fresh")[-1] == 30
    # Ray uploaded in the background from hard links, and removed each set once uploaded.
    assert list((tmp_path / "ckpt" / UPLOADS).iterdir()) == []
    # Ray Train holds the checkpoints too, assembled from each worker's own files (no copies).
    reported = [p for p in (tmp_path / "ray").rglob("checkpoint_*") if p.is_dir()]
    assert reported
    assert sorted(f.name for f in max(reported, key=lambda p: p.stat().st_mtime).iterdir()) == [
        ".metadata",
        "COMPLETE",
        "__0_0.distcp",
        "__1_0.distcp",
    ]


def test_ray_trainer_uses_rays_fault_tolerance(monkeypatch):
    monkeypatch.setenv("AWS_REGION", "us-east-1")  # a job pod's (else Arrow asks the bucket's)
    from trainer.ray_train import build_trainer

    trainer = build_trainer(["--num-workers", "2", "--s3-checkpoints", "s3://bucket/checkpoints/job"])
    run = trainer.run_config
    assert run.failure_config.max_failures == 3
    # Storage every node reaches: the checkpoints' prefix, so Ray registers them where they are.
    assert (run.storage_path, run.name) == ("bucket/checkpoints", "job")  # on run.storage_filesystem
    assert build_trainer(["--max-failures", "5"]).run_config.failure_config.max_failures == 5


def test_a_metrics_line_is_one_write(monkeypatch):
    """Ranks share one pipe: a line written in two parts (print's text, then its newline, as
    Python does unbuffered) can have another process's warning spliced into it."""
    from trainer import metrics

    writes = []

    class Recorder:
        def write(self, text):
            writes.append(text)

        def flush(self):
            pass

    class RankZero:
        rank = 0

    monkeypatch.setattr(sys, "stdout", Recorder())
    metrics.log(RankZero(), {"event": "checkpoint", "step": 30})
    assert writes == ['metrics {"event": "checkpoint", "step": 30}\n']
