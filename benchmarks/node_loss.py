"""What losing a node costs a PyTorchJob: steps lost and time to resume, per checkpoint interval.

    make bench-node-loss                                               # intervals 5, 10, 20 steps, tiny model, CPU
    PYTHONPATH=tests:workload python -m benchmarks.node_loss --intervals 10 50 --model small

Each run is the node-loss drill of tests/support/node_drill.py: two nodes under c10d rendezvous, as
a PyTorchJob's pods run `trainer.launch`, on production's layout: each pod its own checkpoint
directory, S3 (moto's server, started here) the only medium they share. The node that does not
host the rendezvous is SIGKILLed (launcher and workers) one step before a checkpoint would be
written, the worst place in the interval, and a replacement with an empty directory starts at once;
it fetches from S3 what it reads. Printed per interval:

- steps lost: the step reached at the loss minus the step the job resumed from (S3's newest
  complete checkpoint: a save is complete in S3 only once every rank's upload is, at an agreement);
- resume: seconds from the loss to the first step after it (failure detection, the new rendezvous,
  worker start, checkpoint load);
- recover: seconds until the job is back at the step it had reached.

Then a loss on EKS, modelled for larger intervals: a lost node's pod is evicted after 60 s (the
jobs' toleration), a new node joins and pulls the image (the plan's timeline figures), and the
lost steps are trained again at the given step time. The figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from support.node_drill import TwoNodeJob

from benchmarks.s3_on_loopback import s3_on_loopback
from components.jobs.pods import NODE_LOSS_TOLERATIONS
from domain.catalog import ADDED_LAYERS_COMPRESSED_GB, BASE_IMAGE_COMPRESSED_GB, image_pull_minutes
from offline.timeline import GPU_NODE_JOIN_MINUTES, NODE_CHECK_MINUTES, POD_START_MINUTES

EVICTION_MINUTES = NODE_LOSS_TOLERATIONS[0]["tolerationSeconds"] / 60


def drill(interval: int, model: str, tmp: Path, s3_uri: str) -> dict[str, float]:
    lose_at = 2 * interval + interval - 1
    args = ["--model", model, "--steps", str(4 * interval), "--checkpoint-every", str(interval)]
    job = TwoNodeJob(tmp, [*args, "--log-every", "1", "--collective-timeout", "30"], s3_uri)
    try:
        job.start("worker-0", hosts_store=True)
        job.start("worker-1")
        _, reached = job.wait_for(lambda r: r.get("step", 0) >= lose_at, f"step {lose_at}")
        lost = job.lose("worker-1")
        job.start("worker-1-replacement")
        _, start = job.wait_for(lambda r: r.get("event") == "start", "the resume", since=lost)
        resumed, _ = job.wait_for(lambda r: "loss" in r, "a step after the resume", since=lost)
        back, _ = job.wait_for(lambda r: r.get("step", 0) >= reached["step"], "the lost step", since=lost)
        job.finish()
    finally:
        job.stop()
    return {
        "interval": interval,
        "reached": reached["step"],
        "resumed_from": start["resumed_from"],
        "steps_lost": reached["step"] - start["resumed_from"],
        "resume_s": resumed - lost,
        "recover_s": back - lost,
        "step_s": reached["step_time_s"],
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--intervals", type=int, nargs="+", default=[5, 10, 20], help="--checkpoint-every values")
    p.add_argument("--model", default="tiny")
    p.add_argument(
        "--gpu-step-seconds", type=float, default=1.5, help="a real job's step time, for the model"
    )
    p.add_argument("--eks-intervals", type=int, nargs="+", default=[50, 200, 500], help="intervals to model")
    a = p.parse_args()

    print(f"node loss one step before a checkpoint, {a.model} model, 2 nodes x 1 CPU process (gloo)")
    print("each pod its own checkpoint directory, S3 (moto's server on loopback) shared")
    print(f"{'interval':>8} {'reached':>7} {'resumed':>7} {'lost':>5} {'resume s':>9} {'recover s':>9}")
    with s3_on_loopback():
        for interval in a.intervals:
            with tempfile.TemporaryDirectory() as tmp:
                r = drill(interval, a.model, Path(tmp), f"s3://drill/interval-{interval}")
            print(
                f"{r['interval']:>8} {r['reached']:>7} {r['resumed_from']:>7} {r['steps_lost']:>5} "
                f"{r['resume_s']:>9.1f} {r['recover_s']:>9.1f}"
            )

        pull = image_pull_minutes(BASE_IMAGE_COMPRESSED_GB["runtime"] + ADDED_LAYERS_COMPRESSED_GB)
        replace = EVICTION_MINUTES + GPU_NODE_JOIN_MINUTES + pull + POD_START_MINUTES + NODE_CHECK_MINUTES
        print(
            f"\nOn EKS (modelled): eviction {EVICTION_MINUTES:g} + node {GPU_NODE_JOIN_MINUTES:g} + image pull "
            f"{pull:.1f} + start {POD_START_MINUTES + NODE_CHECK_MINUTES:g} = {replace:.1f} min before training "
            f"resumes (checkpoint load not counted), then the lost steps at {a.gpu_step_seconds:g} s each:"
        )
        for interval in a.eks_intervals:
            worst = replace + interval * a.gpu_step_seconds / 60
            mean = replace + interval / 2 * a.gpu_step_seconds / 60
            print(f"  every {interval:>4} steps: {mean:.1f} min on average, {worst:.1f} min at worst")
    return 0


if __name__ == "__main__":
    sys.exit(main())
