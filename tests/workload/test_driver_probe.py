"""The driver probe as its Job runs it (components/driver_probe.py): `python -m trainer.driver_probe`
from the image's working directory, with the stack's arguments, a node's `/sys/module` (here a copy
holding the file the nvidia kernel module shows), and the image's CUDA_VERSION: its exit code and the
termination message pulumi-kubernetes shows when the Job fails."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from support.paths import WORKLOAD

from components.driver_probe import DriverProbeArgs, probe_args
from domain.placement import Placement

GROUP = Placement("p5", "p5.48xlarge", 8, 32, 192, 2048, 98.32, {"trainstack.dev/node-group": "p5"})


def args(cuda: str | None = None) -> list[str]:
    probe = DriverProbeArgs(
        "llama", "llama-driver", GROUP, "image", cuda, "training", None, 30, "the AMI", []
    )
    return probe_args(probe)


def probe(tmp_path, driver: str | None, cuda_env: str | None, cuda: str | None = None):
    modules = tmp_path / "sys-module"
    (modules / "nvidia").mkdir(parents=True, exist_ok=True)
    if driver is not None:
        (modules / "nvidia" / "version").write_text(f"{driver}\n")
    log = tmp_path / "termination-log"
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VERSION", "PYTHONPATH")}
    env |= {"NODE_NAME": "ip-10-0-1-5", **({"CUDA_VERSION": cuda_env} if cuda_env else {})}
    argv = [a if a != "/host/sys/module" else str(modules) for a in args(cuda)]
    done = subprocess.run(
        [sys.executable, "-m", "trainer.driver_probe", *argv, "--termination-log", str(log)],
        cwd=WORKLOAD,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    return done.returncode, log.read_text() if log.exists() else ""


def test_a_driver_older_than_the_images_cuda_fails_the_probe_with_a_sentence(tmp_path):
    code, message = probe(tmp_path, "570.195.03", "13.0.3")
    assert code == 1
    assert message == (
        "job llama on gpuNodeGroups p5: node ip-10-0-1-5 has NVIDIA driver 570.195.03 (R570); the training "
        "image's CUDA 13.0 needs R580 or newer, and its containers would not start there: move the group's "
        "nodes to an AMI with R580 (the AMI), or build on a base image of an older CUDA (image.baseImage)"
    )


@pytest.mark.parametrize(("driver", "cuda_env"), [("580.65.06", "13.0.3"), ("570.195.03", "12.8.1")])
def test_a_driver_new_enough_passes(tmp_path, driver, cuda_env):
    code, message = probe(tmp_path, driver, cuda_env)
    assert code == 0
    assert message.endswith(": ok")


def test_a_node_without_an_nvidia_driver_fails_closed(tmp_path):
    code, message = probe(tmp_path, None, "13.0.3")
    assert code == 1
    assert "node ip-10-0-1-5 shows no NVIDIA driver (no loaded nvidia kernel module" in message


def test_another_images_release_is_judged_where_the_stack_knows_it(tmp_path):
    """The job runs an image of its own: its release as given (`--cuda`), not the probe's image's."""
    assert probe(tmp_path, "570.195.03", "12.8.1", cuda="13.0")[0] == 1
    code, message = probe(tmp_path, "570.195.03", "13.0.3", cuda="unknown")
    assert code == 0
    assert "the job's image names no CUDA release: not compared" in message
