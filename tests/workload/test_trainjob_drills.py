"""The recovery drills of test_workload.py and test_restarts.py for a TrainJob: each pod's launcher
gets the env Trainer's torch plugin gives it (a static rendezvous at node 0's pod, its rank, no
restarts of its own), and what becomes of the job is the stack's runtime's rules read by
`jobset_action` (the Job's pod failure policy, then JobSet's failure policy). A drain, and then a
lost node, each restart the whole gang, on fresh volumes, from the newest complete checkpoint in S3;
a flag the trainer refuses fails the job at once."""

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


@pytest.mark.slow(seconds=50)
def test_a_drain_then_a_lost_node_each_restart_the_gang_from_the_right_checkpoint(tmp_path, moto_server):
    """One job through two faults, as a long job meets them: a drain (the kubelet's SIGTERM to one
    pod's launcher) restarts the gang from the checkpoint the drain saved; then, in the restarted
    gang, a node lost without a chance to save restarts it again from S3's newest complete
    checkpoint. Each restart is JobSet's, read from the stack's runtime (`jobset_action`), and each
    gang starts on fresh volumes: S3 is the only medium between them."""
    job = TwoNodeJob(tmp_path / "job", ["--steps", "40", *ARGS], f"s3://ckpt/{tmp_path.name}")
    try:
        start_gang(job, 0)
        job.wait_for(lambda r: r.get("step", 0) >= 5 and "loss" in r, "a training step")
        job.drain("node-1-0")
        exits = {"node-1-0": job.exit_code("node-1-0"), "node-0-0": job.exit_code("node-0-0")}
        assert exits["node-1-0"] == DRAINED_EXIT_CODE, job.log("node-1-0")[-3000:]
        assert exits["node-0-0"] not in PERMANENT_EXIT_CODES, job.log("node-0-0")[-3000:]
        assert jobset_action(RUNTIME, exits) == "gang restarted"
        (stopped,) = [r for _, r in job.records() if r.get("event") == "stopped"]
        # Uploaded whole before the pods exited: the periodic saves before the drain, then the drain's.
        assert job.s3_steps() == [*range(10, stopped["step"], 10), stopped["step"]]

        start_gang(job, 1)
        job.wait_for_checkpoint(stopped["step"] + 1)  # a periodic save after the resume
        job.lose("node-1-1")
        newest = job.s3_steps()[-1]  # no step, so no save, completes after the loss
        survivor = job.exit_code("node-0-1", timeout=180)  # its rendezvous peer is gone
        assert survivor not in (0, *PERMANENT_EXIT_CODES), job.log("node-0-1")[-3000:]
        assert jobset_action(RUNTIME, {"node-0-1": survivor, "node-1-1": None}) == "gang restarted"

        start_gang(job, 2)
        assert job.finish() == {"node-0-2": 0, "node-1-2": 0}
    finally:
        job.stop()
    records = [r for name in sorted(job.tmp.glob("*.log")) for r in metrics_of(name.read_text())]
    starts = [r["resumed_from"] for r in records if r.get("event") == "start"]
    assert starts == [0, stopped["step"], newest], starts
    assert 5 <= stopped["step"] < newest < 40
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
