"""What bounds a job that keeps failing, as the stack renders it (jobs[].maxRecreations):

- PyTorchJob with the default trainer: its launcher counts its pod's recreations without a newer
  checkpoint (trainer.recreations); the stack gives it the limit and the run's id. The training
  operator v1.9.4 bounds nothing under ExitCode (pkg/core/job.go PastBackoffLimit counts container
  restarts of running pods, 0 under the pod's restartPolicy Never that ExitCode sets).
- RayJob: KubeRay 1.7.0's backoffLimit, whole attempts on a new cluster (retried while
  status.failed < backoffLimit + 1: rayjob_controller.go, checkBackoffLimitAndUpdateStatusIfNeeded).
- The job's outputs carry the sentence `trainstack status` prints."""

from __future__ import annotations

import re

from support.jobs import all_kinds_jobs, body, groups, job
from support.manifests import env_of, worker_container
from support.plans import stack_values

from offline.engine import run_program

LIMIT, RUN = "TRAINSTACK_MAX_RECREATIONS", "TRAINSTACK_RUN"


def bounded_plan(**changes):
    jobs = [{**j, "maxRecreations": 5} if j["kind"] != "RayCluster" else j for j in all_kinds_jobs()]
    jobs[0] = {**jobs[0], **changes}
    # `jobs` holds a secret-looking env value: a secret key as a whole, as support.jobs.kinds_plan has it.
    return run_program("dev", stack_values("dev", gpuNodeGroups=groups(), jobs=jobs), ["trainstack:jobs"])


def test_the_default_trainers_pods_get_the_limit_and_the_runs_id(kinds_plan):
    env = env_of(body(job(kinds_plan, "fsdp")))
    assert env[LIMIT] == "2" and re.fullmatch(r"[0-9a-f]{16}", env[RUN])
    assert LIMIT not in env_of(body(job(kinds_plan, "ray-l4")))  # Ray: KubeRay's backoffLimit
    assert body(job(kinds_plan, "ray-l4"))["spec"]["backoffLimit"] == 2


def test_the_key_sets_both_bounds_and_other_flags_make_another_run(kinds_plan):
    run = bounded_plan()
    assert env_of(body(job(run, "fsdp")))[LIMIT] == "5"
    assert body(job(run, "ray-l4"))["spec"]["backoffLimit"] == 5
    same = env_of(body(job(run, "fsdp")))[RUN]
    assert same == env_of(body(job(kinds_plan, "fsdp")))[RUN]  # the limit is not the run
    other = env_of(body(job(bounded_plan(steps=600), "fsdp")))[RUN]
    assert other != same  # other flags: the count starts again


def test_a_command_is_not_counted_and_its_sentence_says_so():
    run = bounded_plan(command=["python", "-m", "trainer.train"])
    container = worker_container(body(job(run, "fsdp")))
    assert LIMIT not in env_of(body(job(run, "fsdp"))) and container["command"] == [
        "python",
        "-m",
        "trainer.train",
    ]
    assert run.outputs["jobs"]["fsdp"]["retries"].startswith("none: a command's pods are recreated")


def test_the_outputs_say_what_stops_each_kind(kinds_plan):
    retries = {name: j["retries"] for name, j in kinds_plan.outputs["jobs"].items()}
    assert retries["fsdp"] == (
        "fails once a pod has been recreated 2 time(s) without a newer checkpoint (jobs[].maxRecreations; "
        "its launcher exits 5); the operator itself bounds nothing under ExitCode"
    )
    assert retries["ray-l4"] == (
        "at most 3 attempt(s), each on a new Ray cluster (backoffLimit 2: every failed attempt counts, progress "
        "or not); within one, Ray Train restarts "
        "its workers up to 3 times"
    )
    assert retries["ray-box"].startswith("none: KubeRay recreates a RayCluster's pods")
