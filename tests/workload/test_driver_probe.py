"""The driver probe as its Job runs it (components/driver_probe.py): the container's own command (a
shell that hands the probe's source to `python3 -c`), with the stack's arguments and environment, a
node's `/sys/module` (here a copy holding the file the nvidia kernel module shows), and the image's
CUDA_VERSION: its exit code and the termination message pulumi-kubernetes shows when the Job fails."""

from __future__ import annotations

import os
import subprocess

from components.driver_probe import MODULE_DIR, PROBE_COMMAND, PROBE_SOURCE, DriverProbeArgs, probe_args
from domain.placement import Placement

GROUP = Placement("p5", "p5.48xlarge", 8, 32, 192, 2048, 98.32, {"trainstack.dev/node-group": "p5"})


def probe(tmp_path, driver: str | None, cuda_env: str | None):
    """The probe's container run here: its command and args, the node's module directory and the
    termination log in the test's folder (their paths the only change), no trainer on the path."""
    modules = tmp_path / "sys-module"
    (modules / "nvidia").mkdir(parents=True, exist_ok=True)
    if driver is not None:
        (modules / "nvidia" / "version").write_text(f"{driver}\n")
    log = tmp_path / "termination-log"
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VERSION", "PYTHONPATH")}
    env |= {"NODE_NAME": "ip-10-0-1-5", "DRIVER_PROBE": PROBE_SOURCE, "NVIDIA_VISIBLE_DEVICES": "void"}
    env |= {"CUDA_VERSION": cuda_env} if cuda_env else {}
    args = DriverProbeArgs("llama", "llama-driver", GROUP, "image", "training", None, 30, "the AMI", [])
    argv = [str(modules) if a == MODULE_DIR else a for a in probe_args(args)]
    done = subprocess.run(
        [*PROBE_COMMAND, *argv, "--termination-log", str(log)],
        cwd=tmp_path,
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


def test_a_driver_new_enough_passes(tmp_path):
    for driver, cuda in (("580.65.06", "13.0.3"), ("570.195.03", "12.8.1")):
        code, message = probe(tmp_path, driver, cuda)
        assert (code, message.rsplit(": ", 1)[-1]) == (0, "ok"), (driver, cuda, message)


def test_a_node_without_an_nvidia_driver_fails_closed(tmp_path):
    code, message = probe(tmp_path, None, "13.0.3")
    assert code == 1
    assert "node ip-10-0-1-5 shows no NVIDIA driver (no loaded nvidia kernel module" in message


def test_an_image_that_names_no_cuda_release_is_reported_not_compared(tmp_path):
    code, message = probe(tmp_path, "570.195.03", None)
    assert code == 0
    assert message.endswith("the job's image names no CUDA release (CUDA_VERSION): not compared")
