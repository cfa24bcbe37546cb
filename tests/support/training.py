"""Real CPU training runs: torchrun with two gloo processes, as a pod runs the trainer, and the
`metrics` records they print."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.paths import WORKLOAD


def metrics_of(output: str) -> list[dict]:
    return [json.loads(line.split("metrics ", 1)[1]) for line in output.splitlines() if "metrics {" in line]


def losses(records: list[dict]) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in records if "loss" in r}


# The batch the suite's runs train on: a quarter of the default's tokens (4 x 64 instead of
# 8 x 128). What they check (restarts, checkpoints, agreement, records) holds for any batch, and
# a CPU step costs about a quarter less (its fixed cost, FSDP's hooks and gloo's collectives,
# stays): about 0.7 CPU-s less a rank over 40 steps.
TEST_BATCH = ("--batch-size", "4", "--seq-len", "64")


def torchrun(tmp: Path, *args: str, env: dict | None = None, **popen) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "trainer.train",
    ]
    cmd += [
        "--data-cache",
        str(tmp / "data"),
        "--checkpoint-dir",
        str(tmp / "ckpt"),
        "--log-every",
        "5",
        *TEST_BATCH,
        *args,
    ]
    return subprocess.Popen(
        cmd,
        cwd=WORKLOAD,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
        start_new_session=True,
        **popen,
    )


def static_node(
    tmp: Path, node_rank: int, port: int, ckpt: Path, *args: str, env: dict | None = None
) -> subprocess.Popen:
    """One 'node' of a two-node job on this machine (static rendezvous at 127.0.0.1:port): its own
    torchrun agent, one worker, and its own checkpoint directory."""
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
        "--node-rank", str(node_rank), "--rdzv-backend", "static", "--master-addr", "127.0.0.1",
        "--master-port", str(port), "-m", "trainer.train",
        "--data-cache", str(tmp / f"data-{node_rank}"), "--checkpoint-dir", str(ckpt), "--log-every", "5",
        *TEST_BATCH, *args,
    ]  # fmt: skip
    return subprocess.Popen(
        cmd, cwd=WORKLOAD, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}, start_new_session=True,
    )  # fmt: skip


def end_session(session: int) -> None:
    """SIGKILL every process left in a session (a subprocess started with start_new_session=True
    has its pid as the session id): Ray's actors have been seen to outlive the driver that
    started them."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == session:  # state, ppid, pgrp, session
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(stat.parent.name), signal.SIGKILL)


def run_to_end(tmp: Path, *args: str, env: dict | None = None) -> list[dict]:
    proc = torchrun(tmp, *args, env=env)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-3000:]
    return metrics_of(out)


# --- one uninterrupted run, shared ------------------------------------------------------------
# The `uninterrupted_run` fixture (tests/workload/conftest.py) trains this once for every test
# that reads it: a launch costs seconds of start-up, its steps little. Those tests carry
# `SHARES_THE_UNINTERRUPTED_RUN`, so that xdist runs them on one worker, which trains once.
SHARES_THE_UNINTERRUPTED_RUN = pytest.mark.xdist_group("uninterrupted-run")
# 40 steps, a checkpoint every 10, a record every 5 (the node-loss drill trains the same schedule),
# validation every 10.
UNINTERRUPTED_ARGS = ("--steps", "40", "--checkpoint-every", "10", "--log-every", "5", "--val-every", "10")


@dataclass(frozen=True)
class Run:
    directory: Path  # its checkpoints are in ckpt/
    records: list[dict]  # every `metrics` record rank 0 printed


def image_environment() -> dict[str, str]:
    """The PYTHONPATH the Dockerfile's training stage sets (an ENV line), its WORKDIR mapped to the
    workload folder this checkout holds (what the image copies there); none where it sets none."""
    stage = (WORKLOAD / "Dockerfile").read_text().split("AS training", 1)[1]
    workdir = re.search(r"^WORKDIR (\S+)$", stage, re.M).group(1)
    return {
        name: value.replace(workdir, str(WORKLOAD))
        for name, value in re.findall(r"^ENV (PYTHONPATH)=(\S+)$", stage, re.M)
    }
