"""A Ray job that checks its own nodes, as the training image runs it: Ray runs the job's worker
process setup hook (trainer.preflight.log_nccl_network) in each worker before the driver's directory
is on the worker's sys.path (ray default_worker.py: load_and_execute_setup_hook before the main loop),
so the trainer must import from the image's environment. The driver runs from the image's working
directory (workload/, laid out as /opt/trainstack) with the environment the Dockerfile's training
stage sets, its paths mapped to this checkout, and none of the test's own: a real local Ray 2.60."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from support.paths import WORKLOAD
from support.training import end_session, metrics_of
from test_workload import RAY_ON_A_LAPTOP


def image_environment() -> dict[str, str]:
    """The ENV the Dockerfile's training stage sets (one ENV line each), its WORKDIR mapped to the
    workload folder this checkout holds (what the image copies there)."""
    text = (WORKLOAD / "Dockerfile").read_text()
    stage = text.split("AS training", 1)[1]
    workdir = re.search(r"^WORKDIR (\S+)$", stage, re.M).group(1)
    found = {}
    for name, value in re.findall(r"^ENV (PYTHONPATH)=(\S+)$", stage, re.M):
        found[name] = value.replace(workdir, str(WORKLOAD))
    return found


@pytest.mark.slow(seconds=45)  # a local Ray cluster's start, two workers, three steps
def test_a_ray_job_that_checks_its_nodes_runs_its_hook_from_the_images_environment(tmp_path):
    script = f"""
import sys
from trainer.ray_train import main
sys.exit(main(["--num-workers", "2", "--steps", "3", "--log-every", "1", "--model", "tiny",
               "--batch-size", "2", "--seq-len", "64", "--preflight-gpus-per-node", "1",
               "--checkpoint-dir", {str(tmp_path / "ckpt")!r}, "--data-cache", {str(tmp_path / "data")!r},
               "--storage-path", {str(tmp_path / "ray")!r}]))
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
        end_session(driver.pid)
    out = stdout + stderr
    assert "No module named 'trainer'" not in out, out[-4000:]
    assert driver.returncode == 0, out[-4000:]
    # The check ran after the hook, on the gloo group the CPU gives the two workers.
    checks = [
        json.loads(line.split("preflight ", 1)[1]) for line in out.splitlines() if "preflight {" in line
    ]
    assert checks and all(c["ok"] and c["world_size"] == 2 for c in checks), out[-4000:]
    assert any(r.get("step") == 3 for r in metrics_of(out))
