"""Real CPU training runs: torchrun with two gloo processes, as a pod runs the trainer, and the
`metrics` records they print."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from support.paths import WORKLOAD


def metrics_of(output: str) -> list[dict]:
    return [json.loads(line.split("metrics ", 1)[1]) for line in output.splitlines() if "metrics {" in line]


def losses(records: list[dict]) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in records if "loss" in r}


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


def run_to_end(tmp: Path, *args: str, env: dict | None = None) -> list[dict]:
    proc = torchrun(tmp, *args, env=env)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-3000:]
    return metrics_of(out)
