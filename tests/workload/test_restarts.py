"""Restarts on production's layout: each pod its own checkpoint directory, S3 the only medium they
share. A rank reads more than its own shard (DCP keeps one copy of the values every rank holds, the
optimizer's `step` and `param_groups`, in one rank's file), so a pod resumes only once its
directory holds every file its load plan reads, fetched from S3 where it lacks them; and a complete
checkpoint that cannot be loaded ends the job with a sentence, never a start from step 0."""

from __future__ import annotations

import shutil

import pytest
from support.node_drill import QUICK_DETECTION, TwoNodeJob
from support.ports import unused_port
from support.training import SHARES_THE_UNINTERRUPTED_RUN, losses, metrics_of, static_node
from trainer import checkpoint
from trainer.resilience import CHECKPOINT_UNAVAILABLE_EXIT_CODE


@pytest.mark.slow(seconds=35)
def test_a_worker_killed_in_place_resumes_from_the_newest_checkpoint_with_its_pods_directory(
    tmp_path, moto_server
):
    """The trainer in worker-1's pod is SIGKILLed (an OOM kill, a watchdog exit): its torchrun
    restarts it in place and worker-0's torchrun restarts its own, directories as they were. Both
    resume from S3's newest complete step; rank 0's pod, which holds only its own shard, fetches
    nothing but what its load plan reads."""
    args = ["--steps", "40", "--checkpoint-every", "10", "--log-every", "5", "--collective-timeout", "30"]
    args += ["--keep-checkpoints", "4"]  # the resumed step stays on the volumes to be looked at
    job = TwoNodeJob(tmp_path / "job", args, f"s3://ckpt/{tmp_path.name}", env=QUICK_DETECTION)
    try:
        job.start("worker-0", hosts_store=True)
        job.start("worker-1")
        job.wait_for_checkpoint(10)
        job.kill_workers("worker-1")
        newest = job.s3_steps()[-1]  # no step, so no S3 marker, completes with a rank gone
        assert job.finish() == {"worker-0": 0, "worker-1": 0}
    finally:
        job.stop()

    logs = {name: job.log(name) for name in ("worker-0", "worker-1")}
    starts = [r["resumed_from"] for r in metrics_of(logs["worker-0"]) if r.get("event") == "start"]
    assert starts == [0, newest]
    assert "exitcode  : -9" in logs["worker-1"] or "exitcode: -9" in logs["worker-1"], logs["worker-1"][
        -3000:
    ]
    assert "FileNotFoundError" not in logs["worker-0"] + logs["worker-1"]
    assert max(losses(metrics_of(logs["worker-0"]))) == 40 and job.s3_steps()[-1] == 40
    # The resumed step on each pod: worker-1 fetched the metadata and rank 0's file it reads; both
    # marked it complete.
    resumed = {
        name: sorted(p.name for p in checkpoint.step_dir(job.volume(name), newest).iterdir()) for name in logs
    }
    assert resumed["worker-1"] == [".metadata", "COMPLETE", "__0_0.distcp", "__1_0.distcp"]
    assert "COMPLETE" in resumed["worker-0"] and "__0_0.distcp" in resumed["worker-0"]


@pytest.mark.slow(seconds=10)
@SHARES_THE_UNINTERRUPTED_RUN
def test_a_complete_checkpoint_no_rank_set_can_load_ends_the_job_with_a_sentence(tmp_path, uninterrupted_run):
    """Node-local directories without S3. Worker-0's directory holds what its pod saved of complete
    steps 20, 30 and 40 (those of the uninterrupted run: the metadata and rank 0's file; rank 1's
    file was on worker-1's node), and worker-1's pod was replaced by one with an empty directory.
    Rank 1 cannot read any of them: both exit, naming the newest step and the missing file,
    instead of training from step 0."""
    volumes = (tmp_path / "worker-0", tmp_path / "worker-1")
    args = ("--checkpoint-every", "10", "--log-every", "5")
    shutil.copytree(uninterrupted_run.directory / "ckpt", volumes[0], ignore=shutil.ignore_patterns("__1_*"))
    assert checkpoint.complete_steps(volumes[0]) == [20, 30, 40]
    port = unused_port()
    nodes = [static_node(tmp_path, rank, port, volumes[rank], "--steps", "50", *args) for rank in (0, 1)]
    outs = [proc.communicate(timeout=300)[0] for proc in nodes]
    for proc, out in zip(nodes, outs, strict=True):
        assert proc.returncode != 0, out[-3000:]
        assert (
            "checkpoint: step 40 is complete but rank 1 cannot load it: its volume lacks .metadata and "
            "no --s3-checkpoints is set; not starting from step 0"
        ) in out, out[-3000:]
        assert (
            f"exitcode  : {CHECKPOINT_UNAVAILABLE_EXIT_CODE}" in out
            or f"exitcode: {CHECKPOINT_UNAVAILABLE_EXIT_CODE}" in out
        )
    assert not [r for out in outs for r in metrics_of(out) if "loss" in r]  # no step trained
    assert all(f"checkpoint: step {step} passed over" in outs[0] for step in (40, 30, 20))


@pytest.mark.slow(seconds=10)
@SHARES_THE_UNINTERRUPTED_RUN
def test_a_pod_lost_before_the_first_s3_checkpoint_starts_the_job_from_step_0_loudly(
    tmp_path, uninterrupted_run, moto_server
):
    """With --s3-checkpoints, worker-1's pod was replaced (an empty volume) before any step was
    complete in S3: worker-0's volume holds its part of steps 20-40, which rank 1 can never load.
    Starting over loses only the steps since the start, where failing the job (exit 4, for good)
    loses the run: both ranks start from step 0, with a line that says so."""
    volumes = (tmp_path / "worker-0", tmp_path / "worker-1")
    shutil.copytree(uninterrupted_run.directory / "ckpt", volumes[0], ignore=shutil.ignore_patterns("__1_*"))
    args = ("--steps", "10", "--checkpoint-every", "10", "--s3-checkpoints", f"s3://ckpt/{tmp_path.name}")
    port = unused_port()
    nodes = [static_node(tmp_path, rank, port, volumes[rank], *args) for rank in (0, 1)]
    outs = [proc.communicate(timeout=300)[0] for proc in nodes]
    assert [proc.returncode for proc in nodes] == [0, 0], outs[0][-3000:]
    assert (
        "checkpoint: step 40 is complete but rank 1 cannot load it: its volume lacks .metadata and S3 "
        f"(s3://ckpt/{tmp_path.name}) does not hold it complete, and S3 holds no complete step yet"
    ) in outs[0]
    assert "STARTING FROM STEP 0" in outs[0]
    starts = [r["resumed_from"] for r in metrics_of(outs[0]) if r.get("event") == "start"]
    assert starts == [0]
    # Nothing deleted: the steps no rank set can load are set aside on the volume, kept.
    assert sorted(
        p.name.split(checkpoint.ABANDONED)[0] for p in volumes[0].glob(f"step_*{checkpoint.ABANDONED}-*")
    ) == [f"step_{n:08d}" for n in (20, 30, 40)]
