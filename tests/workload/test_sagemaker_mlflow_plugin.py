"""The image's sagemaker-mlflow plugin, there for a SageMaker MLflow ARN, must not disturb tracking to
any other server: its request header provider claims every request and fails on a URI that is not
an ARN, and MLflow logs a warning on each call (every batch of metrics) unless the trainer drops it
(trainer.mlflow_run.without_sagemaker_headers). In a process of its own, as a trainer's rank 0 is."""

from __future__ import annotations

import os
import subprocess
import sys

from support.paths import ROOT

WARNING = "Encountered unexpected error during resolving request headers"
PROBE = """
import logging
logging.basicConfig(level=logging.WARNING)
from mlflow.tracking.request_header.registry import resolve_request_headers
from trainer.mlflow_run import without_sagemaker_headers
resolve_request_headers()
print("--dropped--", file=__import__("sys").stderr, flush=True)
without_sagemaker_headers()
headers = resolve_request_headers()
print(sorted(headers))
"""


def test_the_plugins_header_provider_warns_on_every_call_until_the_trainer_drops_it():
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "workload"),
        "MLFLOW_TRACKING_URI": "https://mlflow.example.com",
    }
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    before, after = done.stderr.split("--dropped--")
    assert WARNING in before  # the plugin as installed: the regression the trainer guards against
    assert WARNING not in after, after
    assert "User-Agent" in done.stdout  # MLflow's own headers still go
