"""A drain as the kubelet delivers it: SIGTERM to one pod's PID 1 (trainer.launch, torchrun), not
to the trainer. Every rank saves the same step; no pod completes before the last step (the operator
would mark the elastic job Succeeded); the drained pod exits retryable and is recreated; the job
resumes from the drain's checkpoint and ends at its last step. Each pod has its own checkpoint
directory (the replacement's is empty) and S3 on moto's server is all the pods share."""

from __future__ import annotations

import pytest
from support.node_drill import QUICK_DETECTION, TwoNodeJob, operator_action
from support.training import losses, metrics_of
from trainer import checkpoint
from trainer.resilience import DRAINED_EXIT_CODE


@pytest.mark.slow(seconds=30)
def test_a_drained_node_is_recreated_and_the_job_resumes_from_the_drains_checkpoint(tmp_path, moto_server):
    # Steps long enough to drain mid-run; checkpoints only at the end (and on the drain).
    args = ["--steps", "60", "--checkpoint-every", "0", "--log-every", "5", "--collective-timeout", "30"]
    job = TwoNodeJob(tmp_path / "job", args, f"s3://ckpt/{tmp_path.name}", env=QUICK_DETECTION)
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
        (stopped,) = [r for _, r in job.records() if r.get("event") == "stopped"]
        assert job.s3_steps() == [stopped["step"]]  # uploaded whole before the pods exited
        assert checkpoint.complete_steps(job.volume("worker-1")) == [stopped["step"]]
        job.start("worker-1-replacement")
        finished = job.finish()
    finally:
        job.stop()

    assert DRAINED_EXIT_CODE == 143  # 128 + SIGTERM
    assert "launch: SIGTERM (a drain)" in job.log("worker-1")
    assert finished == {"worker-0": 0, "worker-1-replacement": 0}  # only at the last step
    assert 5 <= stopped["step"] < 60 and stopped["reason"] == "SIGTERM"
    # The survivor's workers stopped retryable (143), not 0, and were restarted by its torchrun.
    assert "exitcode  : 143" in job.log("worker-0") or "exitcode: 143" in job.log("worker-0")

    records = [
        r for name in ("worker-0", "worker-1", "worker-1-replacement") for r in metrics_of(job.log(name))
    ]
    starts = [r["resumed_from"] for r in records if r.get("event") == "start"]
    assert starts == [0, stopped["step"]]  # resumed from the drain's checkpoint
    assert max(losses(records)) == 60 and job.s3_steps()[-1] == 60
    # Ranks are dealt afresh at the rendezvous, in the order of the nodes' (address, pid) (torch's
    # dynamic_rendezvous `_mark_rendezvous_complete`): the replacement may come back as either rank.
    # Rank 0 prints the metrics, so the node whose log holds the resumed start is rank 0. Each
    # volume took from S3 what its rank reads: the metadata, rank 0's file (every rank reads it)
    # and its own shard; the replacement's empty directory nothing more.
    resumed_on = [
        name
        for name in ("worker-0", "worker-1-replacement")
        if any(r.get("event") == "start" and r["resumed_from"] for r in metrics_of(job.log(name)))
    ]
    ranks = {name: 0 if [name] == resumed_on else 1 for name in ("worker-0", "worker-1-replacement")}
    assert sorted(ranks.values()) == [0, 1], resumed_on

    def read_by(rank: int) -> set[str]:
        return {".metadata", "COMPLETE", "__0_0.distcp", f"__{rank}_0.distcp"}

    def held(name: str) -> set[str]:
        return {p.name for p in checkpoint.step_dir(job.volume(name), stopped["step"]).iterdir()}

    assert held("worker-1-replacement") == read_by(ranks["worker-1-replacement"])
    assert read_by(ranks["worker-0"]) <= held("worker-0")
    assert "mismatch" not in job.log("worker-0") + job.log("worker-1")
