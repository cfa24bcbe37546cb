"""A two-node PyTorchJob or TrainJob on one machine, for node-loss and drain drills (the tests and
the benchmark).

Each "node" is `trainer.launch` (the pod's command) with the env the training operator gives a
worker pod: PET_NNODES, PET_RDZV_BACKEND c10d, PET_RDZV_ENDPOINT at worker-0, PET_MAX_RESTARTS; or
the env Trainer's torch plugin gives a TrainJob's pod (`trainjob_env`: a static rendezvous at node
0's pod, the pod's rank, no restarts of its own). A
node loss is a SIGKILL of its launcher and every worker under it, with no chance to clean up; a
drain is the kubelet's SIGTERM, to the launcher (the pod's PID 1) only; a replacement is a new
launcher with the same env, as the operator's recreated pod would be. The layout is production's
without FSx: each pod has its own checkpoint directory (its emptyDir, under volumes/<pod>; a
replacement starts with an empty one) and S3 (moto's server, whose endpoint the caller puts in the
environment) is the only medium the pods share. A worker killed in place (`kill_workers`) keeps
its pod's directory, as a container restart keeps an emptyDir. `operator_action` is what the
operator makes of a pod's exit code; `jobset_action` what Kubernetes' Job and JobSet make of a
TrainJob's pods' exits, by the rules of the stack's runtime.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from trainer import checkpoint

from components.jobs.training_runtime import torch_env
from support.paths import WORKLOAD
from support.ports import unused_port
from support.training import TEST_BATCH

# How soon the launchers see what happened, without changing what they do. An agent looks at its
# workers every 0.1 s (torchrun's default; the drill's launchers otherwise every 1 s). A lost node
# stays a participant of the rendezvous until its keep-alive heartbeats expire: torch's default is
# 3 missed beats 5 s apart, 15 s in which the survivor and the replacement only wait; here 5
# missed beats 1 s apart, so 5 s.
QUICK_DETECTION = {
    "PET_MONITOR_INTERVAL": "0.1",
    "PET_RDZV_CONF": "keep_alive_interval=1,keep_alive_max_attempt=5",
}


def operator_action(exit_code: int) -> str:
    """The training operator's `ExitCode` restart policy for a worker pod's exit code (v1.9.4,
    pkg/util/train/train_util.go IsRetryableExitCode: 128 and above; the pod is recreated), other
    failures permanent; 0 completes the pod, and an elastic PyTorchJob is Succeeded as soon as one
    worker pod completes (pkg/controller.v1/pytorch/pytorchjob_controller.go)."""
    if exit_code == 0:
        return "job succeeded"
    return "pod recreated" if exit_code >= 128 else "job failed"


def trainjob_env(rank: int, port: int) -> dict[str, str]:
    """What Trainer's torch plugin gives the pod of rank `rank` of a two-node TrainJob
    (training_runtime.torch_env), as this machine resolves it: the pod's completion index is its
    rank, node 0's first pod (JobSet's headless service name) is 127.0.0.1, on the test's port."""
    local = {"PET_NODE_RANK": str(rank), "PET_MASTER_ADDR": "127.0.0.1", "PET_MASTER_PORT": str(port)}
    return {v["name"]: local.get(v["name"], v.get("value", "")) for v in torch_env("job", 2, 1)}


def _matches(rule: dict, exit_code: int | None) -> bool:
    on = rule.get("onExitCodes")
    if on is None or exit_code is None:  # a lost node's pod reports no exit
        return False
    found = exit_code in on["values"]
    return found if on["operator"] == "In" else not found


def jobset_action(runtime_spec: dict, exits: dict[str, int | None], restarts: int = 0) -> str:
    """What becomes of a TrainJob whose pods ended so (None: the pod's node was lost), by its
    runtime's rules: the Job's pod failure policy (a FailJob rule fails the Job, reason
    PodFailurePolicy; else past backoffLimit, reason BackoffLimitExceeded: kubernetes
    pkg/controller/job/pod_failure_policy.go), then the JobSet's failure policy rules in order, else
    RestartJobSet while under maxRestarts (jobset v0.12.0 pkg/controllers/failure_policy.go)."""
    js = runtime_spec["template"]["spec"]
    (rjob,) = js["replicatedJobs"]
    job = rjob["template"]["spec"]
    failed = [code for code in exits.values() if code != 0]
    if not failed:
        return "job set completed"
    rules = job.get("podFailurePolicy", {}).get("rules", [])
    if any(r["action"] == "FailJob" and _matches(r, c) for r in rules for c in failed):
        reason = "PodFailurePolicy"
    elif len(failed) > job.get("backoffLimit", 6):
        reason = "BackoffLimitExceeded"
    else:
        return "pods recreated in place"
    policy = js.get("failurePolicy") or {}
    action = next(
        (r["action"] for r in policy.get("rules", []) if reason in r.get("onJobFailureReasons", [reason])),
        "RestartJobSet",
    )
    if action == "FailJobSet" or restarts >= policy.get("maxRestarts", 0):
        return "job set failed"
    return "gang restarted"


def descendants(pid: int) -> list[int]:
    """All processes below pid (torchrun starts each worker in a session of its own)."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = [], [pid]
    while frontier:
        children = [p for p, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


def kill_tree(proc: subprocess.Popen) -> None:
    for pid in [proc.pid, *descendants(proc.pid)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=60)


@dataclass
class TwoNodeJob:
    """The job's launchers by name; `logs` holds each one's output file."""

    tmp: Path
    trainer_args: list[str]
    # The job's checkpoints in S3 (on moto's server), a prefix of the test's own: moto keeps one
    # state per process, which every server it starts there shares.
    s3_uri: str
    # Over the operator's env: a test's shorter waits (QUICK_DETECTION); the benchmark keeps torch's.
    env: dict[str, str] = field(default_factory=dict)
    port: int = field(default_factory=unused_port)
    nodes: dict[str, subprocess.Popen] = field(default_factory=dict)
    # When each metrics line (log name, line number) was first seen, for the benchmark's timings.
    first_seen: dict[tuple[str, int], float] = field(default_factory=dict)

    def start(self, name: str, *, hosts_store: bool = False, rank: int | None = None) -> subprocess.Popen:
        """A node's launcher: a PyTorchJob worker's, or with `rank` a TrainJob pod's."""
        operator_env = {
            "PET_NNODES": "2",
            "PET_NPROC_PER_NODE": "1",
            "PET_RDZV_BACKEND": "c10d",
            "PET_RDZV_ENDPOINT": f"127.0.0.1:{self.port}",
            "PET_RDZV_ID": "job",
            "PET_MAX_RESTARTS": "3",
        }
        if rank is not None:
            operator_env = trainjob_env(rank, self.port)
        env = {**os.environ, "OMP_NUM_THREADS": "1", **operator_env, "PET_MONITOR_INTERVAL": "1", **self.env}
        cmd = [sys.executable, "-m", "trainer.launch", "-m", "trainer.train"]
        cmd += ["--data-cache", str(self.tmp / "data"), "--checkpoint-dir", str(self.volume(name))]
        cmd += ["--s3-checkpoints", self.s3_uri, *TEST_BATCH]
        self.tmp.mkdir(parents=True, exist_ok=True)
        log = (self.tmp / f"{name}.log").open("w")
        proc = subprocess.Popen(
            [*cmd, *self.trainer_args],
            cwd=WORKLOAD,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        self.nodes[name] = proc
        if hosts_store:  # worker-0 hosts the c10d store; the others start once it listens
            self._wait(lambda: _listening(self.port), f"{name} to host the rendezvous store")
        return proc

    def volume(self, name: str) -> Path:
        """The pod's own checkpoint directory (its emptyDir)."""
        return self.tmp / "volumes" / name

    def log(self, name: str) -> str:
        return (self.tmp / f"{name}.log").read_text()

    def records(self) -> list[tuple[float, dict]]:
        """Every metrics line rank 0 has printed, on whichever node, with when it was first seen."""
        found = []
        for log in sorted(self.tmp.glob("*.log")):
            for number, line in enumerate(log.read_text().splitlines()):
                if line.startswith("metrics {") and line.endswith("}"):
                    seen = self.first_seen.setdefault((log.name, number), time.monotonic())
                    found.append((seen, json.loads(line.split("metrics ", 1)[1])))
        return sorted(found, key=lambda pair: pair[0])

    def wait_for(self, matches, what: str, since: float = 0.0) -> tuple[float, dict]:
        """The first metrics record first seen after `since` that matches, and when it was seen."""

        def found() -> list[tuple[float, dict]]:
            return [(seen, r) for seen, r in self.records() if seen >= since and matches(r)]

        self._wait(found, what)
        return found()[0]

    def starts(self) -> list[dict]:
        """The start records so far, one per run of the job (a resume is a run)."""
        return [r for _, r in self.records() if r.get("event") == "start"]

    def wait_for_resume(self, starts_before: int) -> None:
        """Returns once a run after the first `starts_before` has started."""
        self._wait(lambda: len(self.starts()) > starts_before, "resumed run's start")

    def s3_steps(self) -> list[int]:
        """The job's complete checkpoints in S3."""
        return checkpoint.s3_complete_steps(self.s3_uri)

    def wait_for_checkpoint(self, step: int) -> int:
        """Until S3 holds a complete checkpoint of `step` or later; returns S3's newest."""
        self._wait(lambda: max(self.s3_steps(), default=0) >= step, f"checkpoint {step} in S3")
        return self.s3_steps()[-1]

    def lose(self, name: str) -> float:
        """SIGKILL the node's launcher and workers; returns when it happened (monotonic). No step
        completes after it (each needs the lost ranks), so later records are the resumed run's."""
        kill_tree(self.nodes.pop(name))
        lost = time.monotonic()
        self.records()
        return lost

    def kill_workers(self, name: str) -> None:
        """SIGKILL the pod's training workers only: its launcher (torchrun) sees a failed worker
        and restarts them in place, with the pod's directory as it was."""
        launcher = self.nodes[name].pid
        workers = [pid for pid in descendants(launcher) if "trainer.train" in _command_line(pid)]
        assert workers, f"no training worker under {name}'s launcher"
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def drain(self, name: str) -> None:
        """The kubelet's SIGTERM, to the node's launcher (PID 1) only, as a drain delivers it."""
        os.kill(self.nodes[name].pid, signal.SIGTERM)

    def exit_code(self, name: str, timeout: float = 120) -> int:
        """Wait for one launcher to end on its own, and take it out of the job."""
        return self.nodes.pop(name).wait(timeout=timeout)

    def finish(self, timeout: float = 300) -> dict[str, int]:
        return {name: proc.wait(timeout=timeout) for name, proc in self.nodes.items()}

    def stop(self) -> None:
        for proc in self.nodes.values():
            if proc.poll() is None:
                kill_tree(proc)

    def _wait(self, done, what: str, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            for name, proc in self.nodes.items():
                assert proc.poll() is None, f"{name} exited {proc.returncode}:\n{self.log(name)[-3000:]}"
            assert time.monotonic() < deadline, f"no {what} in {timeout} s"
            time.sleep(0.1)


def _command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), 0.2).close()
        return True
    except OSError:
        return False
