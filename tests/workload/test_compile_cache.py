"""torch.compile's work survives a gang's restart (workload/trainer/compile_cache.py): a TrainJob's two
pods, each its own checkpoint directory and its own empty Inductor cache, S3 (moto's server) the only
medium between runs. The first run compiles from nothing, every FX graph a miss, and rank 0 saves
torch's portable cache beside the checkpoints; the next run's pods, new and empty, load it before
their first step and compile every graph from it: hits, no misses. On CPU (Inductor's C++ backend),
as `--compile` runs it there; on GPUs the same cache holds Triton's kernels too."""

from __future__ import annotations

import boto3
import pytest
from support.node_drill import TwoNodeJob
from support.training import metrics_of
from trainer.compile_cache import CACHE_DIR

ARGS = [
    "--compile",
    "--steps",
    "3",
    "--log-every",
    "1",
    "--checkpoint-every",
    "0",
    "--collective-timeout",
    "60",
]


def run_gang(tmp_path, name: str, s3_uri: str, steps: int) -> dict:
    """One run of the gang on new pods to `steps`: new volumes, a new Inductor and Triton cache
    directory; it resumes from the run before's last checkpoint."""
    caches = tmp_path / f"{name}-caches"
    env = {"TORCHINDUCTOR_CACHE_DIR": str(caches / "inductor"), "TRITON_CACHE_DIR": str(caches / "triton")}
    job = TwoNodeJob(tmp_path / name, [*ARGS, "--steps", str(steps)], s3_uri, env=env)
    try:
        job.start("node-0", rank=0)
        job.start("node-1", rank=1)
        assert job.finish(timeout=600) == {"node-0": 0, "node-1": 0}, job.log("node-0")[-3000:]
    finally:
        job.stop()
    (record,) = [r for r in metrics_of(job.log("node-0")) if r.get("event") == "compile_cache"]
    return record


@pytest.mark.slow(seconds=150)
def test_the_next_run_compiles_from_what_the_first_run_saved_beside_its_checkpoints(tmp_path, moto_server):
    s3_uri = f"s3://ckpt/{tmp_path.name}"
    first = run_gang(tmp_path, "first", s3_uri, 3)
    assert first["loaded_bytes"] == 0 and first["saved_bytes"] > 0, first
    assert first["fx_graph_misses"] > 0 and first["fx_graph_hits"] == 0, first
    listed = boto3.client("s3").list_objects_v2(Bucket="ckpt", Prefix=f"{tmp_path.name}/{CACHE_DIR}/")
    (saved,) = listed["Contents"]
    assert saved["Size"] == first["saved_bytes"]

    again = run_gang(tmp_path, "again", s3_uri, 5)
    assert again["loaded_bytes"] == first["saved_bytes"] and again["saved_bytes"] == 0, again
    assert again["fx_graph_misses"] == 0 and again["fx_graph_hits"] == first["fx_graph_misses"], again
