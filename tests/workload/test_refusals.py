"""Failures the same pods would meet again exit with a permanent code and a sentence, so the operator
fails the job at once (PyTorchJob's ExitCode policy: 1-127 permanent; a TrainJob's pod failure
policy: trainer.resilience.PERMANENT_EXIT_CODES) instead of restarting the gang into them: a pod
given GPUs whose CUDA does not start (it would otherwise train on its CPUs over gloo, and on an EFA
group report "not EFA"), and --float8 on a GPU without float8 tensor cores."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from support.paths import WORKLOAD
from trainer.distributed import training_device
from trainer.model import MODEL_SIZES, Transformer
from trainer.parallelize import enable_float8
from trainer.resilience import CONFIG_EXIT_CODE, PERMANENT_EXIT_CODES, PREFLIGHT_EXIT_CODE

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA starts here: the CPU's case")


def test_a_pod_given_gpus_whose_cuda_does_not_start_stops_permanently(monkeypatch, capsys):
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", "GPU-2f1c9a0e-0b1d-4c6e-9d53-7a1b2c3d4e5f")
    with pytest.raises(SystemExit) as err:
        training_device(0)
    assert err.value.code == PREFLIGHT_EXIT_CODE and err.value.code in PERMANENT_EXIT_CODES
    assert "this pod was given GPUs (NVIDIA_VISIBLE_DEVICES=GPU-2f1c9a0e" in capsys.readouterr().err


@pytest.mark.parametrize("visible", [None, "all", "void", "none", ""])
def test_a_pod_given_no_gpu_trains_on_its_cpus(monkeypatch, visible):
    """CUDA images set NVIDIA_VISIBLE_DEVICES=all themselves: a CPU group's pods run them too."""
    if visible is None:
        monkeypatch.delenv("NVIDIA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", visible)
    assert training_device(0) == torch.device("cpu")


def test_the_trainer_process_exits_3_with_the_sentence():
    """The real entry point, as the pod runs it (a bare process: world size 1)."""
    env = {**os.environ, "NVIDIA_VISIBLE_DEVICES": "GPU-0", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "trainer.train", "--model", "tiny", "--steps", "1"],
        cwd=WORKLOAD,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == PREFLIGHT_EXIT_CODE, done.stderr[-2000:]
    assert "CUDA does not start in it" in done.stderr


def test_float8_without_float8_tensor_cores_is_a_config_refusal(capsys):
    model = Transformer(MODEL_SIZES["tiny"])
    with pytest.raises(SystemExit) as err:
        enable_float8(model, torch.device("cpu"))
    assert err.value.code == CONFIG_EXIT_CODE and err.value.code in PERMANENT_EXIT_CODES
    assert "--float8 needs a GPU with float8 tensor cores" in capsys.readouterr().err
