"""What a fault costs a TrainJob's gang, phase by phase, with its restart cold and warm.

    make bench-restart                                                 # tiny model, compiled, CPU
    PYTHONPATH=tests:workload python -m benchmarks.gang_restart --model small

A TrainJob has no elastic rendezvous: when a node is lost, the survivors' collectives fail, they exit,
and JobSet recreates the whole gang on new pods (empty containers, empty checkpoint directories) that
resume from S3's newest complete checkpoint. Here: two pods as a TrainJob's run `trainer.launch`
(tests/support/node_drill.py), each its own checkpoint directory and Inductor cache, S3 moto's server
on loopback, `--compile` (what GPUs run by default). One pod is SIGKILLed after a checkpoint; the
survivor's exit is timed; then the gang starts again on new pods twice:

- cold: as before this change, nothing kept but the checkpoints (the compile cache removed from S3);
- warm: with the compile cache the first run saved beside the checkpoints (trainer/compile_cache.py).

Printed: `detect` (the loss to the survivor's exit); per restart `start` (the new pods' launch to the
trainer's start record: processes, rendezvous, the checkpoint fetched and loaded), `first step` (the
start record to the first step's: Dynamo's trace, which no cache keeps, the compile and the step),
the total from the new pods' launch, and rank 0's FX graphs found in the cache and compiled anew.
On EKS the pods' scheduling, image pull and node (when one is replaced) come before `start`; the
plan's timeline models those. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import boto3
from support.node_drill import TwoNodeJob
from trainer.compile_cache import CACHE_DIR

from benchmarks.s3_on_loopback import BUCKET, s3_on_loopback

CHECKPOINT_EVERY = 4


def gang(tmp: Path, run: str, args: list[str], s3_uri: str) -> TwoNodeJob:
    """A run of the gang on new pods: new volumes, new Inductor and Triton caches."""
    caches = tmp / f"{run}-caches"
    env = {"TORCHINDUCTOR_CACHE_DIR": str(caches / "inductor"), "TRITON_CACHE_DIR": str(caches / "triton")}
    return TwoNodeJob(tmp / run, args, s3_uri, env=env)


def restart(tmp: Path, run: str, args: list[str], s3_uri: str) -> dict[str, float]:
    job = gang(tmp, run, args, s3_uri)
    try:
        launched = time.monotonic()
        job.start("node-0", rank=0)
        job.start("node-1", rank=1)
        started, record = job.wait_for(lambda r: r.get("event") == "start", "the restart's start")
        stepped, _ = job.wait_for(lambda r: "loss" in r, "the restart's first step")
        _, cache = job.wait_for(lambda r: r.get("event") == "compile_cache", "the compile cache's record")
        job.finish()
    finally:
        job.stop()
    return {
        "resumed_from": record["resumed_from"],
        "start_s": started - launched,
        "step_s": stepped - started,
        "graphs": f"{cache['fx_graph_hits']}/{cache['fx_graph_misses']}",
    }


def measure(model: str) -> None:
    """The first run, the loss, then the cold and the warm restart, printed."""
    s3 = boto3.client("s3")
    s3_uri = f"s3://{BUCKET}/gang"
    common = [
        "--model",
        model,
        "--compile",
        "--log-every",
        "1",
        "--checkpoint-every",
        str(CHECKPOINT_EVERY),
    ]
    common += ["--collective-timeout", "60", "--train-collective-timeout", "20"]
    print(f"a TrainJob's gang of 2 pods x 1 CPU process (gloo), {model} model, compiled; S3 on loopback")
    with tempfile.TemporaryDirectory() as tmp:
        first = gang(Path(tmp), "first", [*common, "--steps", "1000"], s3_uri)
        try:
            first.start("node-0", rank=0)
            first.start("node-1", rank=1)
            first.wait_for_checkpoint(CHECKPOINT_EVERY)
            lost = first.lose("node-1")
            code = first.exit_code("node-0", timeout=300)
            detect = time.monotonic() - lost
        finally:
            first.stop()
        print(f"detect: the survivor exited {code} {detect:.1f} s after its peer was lost")
        saved = s3.list_objects_v2(Bucket=BUCKET, Prefix=f"gang/{CACHE_DIR}/").get("Contents", [])
        blobs = {o["Key"]: s3.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read() for o in saved}
        print(
            f"{'restart':>8} {'resumed':>7} {'start s':>8} {'first step s':>13} {'total s':>8} {'graphs hit/missed':>18}"
        )
        for run in ("cold", "warm"):
            for key in blobs:
                s3.delete_object(Bucket=BUCKET, Key=key)
            if run == "warm":
                for key, blob in blobs.items():
                    s3.put_object(Bucket=BUCKET, Key=key, Body=blob)
            steps = max(first.s3_steps()) + 2  # each restart trains two steps past S3's newest
            r = restart(Path(tmp), run, [*common, "--steps", str(steps)], s3_uri)
            total = r["start_s"] + r["step_s"]
            print(
                f"{run:>8} {r['resumed_from']:>7} {r['start_s']:>8.1f} {r['step_s']:>13.1f} {total:>8.1f} "
                f"{r['graphs']:>18}"
            )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="tiny")
    a = p.parse_args()
    with s3_on_loopback():
        measure(a.model)
    return 0


if __name__ == "__main__":
    sys.exit(main())
