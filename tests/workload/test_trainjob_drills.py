"""The recovery drills of test_drain.py and test_restarts.py for a TrainJob: each pod's launcher
gets the env Trainer's torch plugin gives it (a static rendezvous at node 0's pod, its rank, no
restarts of its own), and what becomes of the job is the stack's runtime's rules read by
`jobset_action` (the Job's pod failure policy, then JobSet's failure policy). A drain or a lost
node restarts the whole gang, on fresh volumes, from the newest complete checkpoint in S3; a flag
the trainer refuses fails the job at once."""

from __future__ import annotations

import pytest
from support.node_drill import TwoNodeJob, jobset_action, trainjob_env
from support.training import losses, metrics_of
from trainer.resilience import CONFIG_EXIT_CODE, DRAINED_EXIT_CODE, PERMANENT_EXIT_CODES

from components.jobs.pods import Checkpoints
from components.jobs.training_runtime import MASTER_PORT, RuntimeArgs, runtime_spec
from components.jobs.training_runtime import PERMANENT_EXIT_CODES as RUNTIME_PERMANENT
from domain.placement import system_placement

RUNTIME = runtime_spec(
    RuntimeArgs(system_placement("m6i.large", 2, 8, None), Checkpoints(), None, None, None)
)
ARGS = ["--checkpoint-every", "10", "--log-every", "5", "--collective-timeout", "30"]


def test_the_runtime_fails_at_once_on_the_trainers_permanent_exits_only():
    assert RUNTIME_PERMANENT == PERMANENT_EXIT_CODES
    assert CONFIG_EXIT_CODE == 2
    both = {"node-0": CONFIG_EXIT_CODE, "node-1": CONFIG_EXIT_CODE}
    assert jobset_action(RUNTIME, both) == "job set failed"
    for code in PERMANENT_EXIT_CODES:
        assert jobset_action(RUNTIME, {"node-0": 1, "node-1": code}) == "job set failed"
    for code in (1, 86, 137, 138, DRAINED_EXIT_CODE):
        assert jobset_action(RUNTIME, {"node-0": 0, "node-1": code}) == "gang restarted"
    assert jobset_action(RUNTIME, {"node-0": 1, "node-1": None}) == "gang restarted"
    assert jobset_action(RUNTIME, {"node-0": 1, "node-1": None}, restarts=100) == "job set failed"
    assert jobset_action(RUNTIME, {"node-0": 0, "node-1": 0}) == "job set completed"


def test_the_launchers_env_is_the_torch_plugins():
    env = trainjob_env(1, 4242)
    assert env == {
        "PET_NNODES": "2",
        "PET_NPROC_PER_NODE": "1",
        "PET_NODE_RANK": "1",
        "PET_MASTER_ADDR": "127.0.0.1",
        "PET_MASTER_PORT": "4242",
    }
    assert MASTER_PORT == 29500  # Trainer's ContainerTrainerPort; the drill's own port is free


def start_gang(job: TwoNodeJob, attempt: int) -> None:
    job.start(f"node-0-{attempt}", hosts_store=True, rank=0)
    job.start(f"node-1-{attempt}", rank=1)


def finish_restarted_gang(job: TwoNodeJob) -> list[dict]:
    start_gang(job, 1)
    assert job.finish() == {"node-0-1": 0, "node-1-1": 0}
    return [r for name in sorted(job.tmp.glob("*.log")) for r in metrics_of(name.read_text())]


@pytest.mark.slow(seconds=40)
def test_a_drain_restarts_the_gang_from_the_drains_checkpoint(tmp_path, moto_server):
    args = ["--steps", "60", *ARGS[2:], "--checkpoint-every", "0"]
    job = TwoNodeJob(tmp_path / "job", args, f"s3://ckpt/{tmp_path.name}")
    try:
        start_gang(job, 0)
        job.wait_for(lambda r: r.get("step", 0) >= 5 and "loss" in r, "a training step")
        job.drain("node-1-0")
        exits = {"node-1-0": job.exit_code("node-1-0"), "node-0-0": job.exit_code("node-0-0")}
        assert exits["node-1-0"] == DRAINED_EXIT_CODE, job.log("node-1-0")[-3000:]
        assert exits["node-0-0"] not in PERMANENT_EXIT_CODES, job.log("node-0-0")[-3000:]
        assert jobset_action(RUNTIME, exits) == "gang restarted"
        (stopped,) = [r for _, r in job.records() if r.get("event") == "stopped"]
        assert job.s3_steps() == [stopped["step"]]
        records = finish_restarted_gang(job)
    finally:
        job.stop()
    starts = [r["resumed_from"] for r in records if r.get("event") == "start"]
    assert starts == [0, stopped["step"]] and 5 <= stopped["step"] < 60
    assert max(losses(records)) == 60 and job.s3_steps()[-1] == 60


@pytest.mark.slow(seconds=40)
def test_a_lost_node_restarts_the_gang_from_the_newest_checkpoint(tmp_path, moto_server):
    job = TwoNodeJob(tmp_path / "job", ["--steps", "40", *ARGS], f"s3://ckpt/{tmp_path.name}")
    try:
        start_gang(job, 0)
        job.wait_for_checkpoint(10)
        job.lose("node-1-0")
        newest = job.s3_steps()[-1]
        survivor = job.exit_code("node-0-0", timeout=180)  # its rendezvous peer is gone
        assert survivor not in (0, *PERMANENT_EXIT_CODES), job.log("node-0-0")[-3000:]
        assert jobset_action(RUNTIME, {"node-0-0": survivor, "node-1-0": None}) == "gang restarted"
        records = finish_restarted_gang(job)
    finally:
        job.stop()
    starts = [r["resumed_from"] for r in records if r.get("event") == "start"]
    assert starts == [0, newest]
    assert max(losses(records)) == 40 and job.s3_steps()[-1] == 40


@pytest.mark.slow(seconds=20)
def test_a_flag_the_trainer_refuses_fails_the_job_at_once(tmp_path, moto_server):
    job = TwoNodeJob(tmp_path / "job", ["--steps", "ten"], f"s3://ckpt/{tmp_path.name}")
    try:
        start_gang(job, 0)
        exits = {name: job.exit_code(name) for name in ("node-0-0", "node-1-0")}
    finally:
        job.stop()
    assert exits == {"node-0-0": CONFIG_EXIT_CODE, "node-1-0": CONFIG_EXIT_CODE}, job.log("node-0-0")[-3000:]
    assert "which no restart mends" in job.log("node-0-0")
    assert jobset_action(RUNTIME, exits) == "job set failed"
