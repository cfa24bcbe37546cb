"""How `make plan`'s time grows with the number of jobs in one stack (it must grow linearly).

    python -m benchmarks.plan_scaling [--jobs 1 10 100] [--repeat 2]      # or make bench-plan

Runs the unchanged program under the mock engine for the dev stack with N PyTorchJobs on one node
group (queued: wait none), and prints seconds per run, resources registered and ms per job.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from offline.engine import run_program  # noqa: E402
from offline.stack_file import read_stack_file  # noqa: E402


def plan_seconds(jobs: int) -> tuple[float, int]:
    values, secrets = read_stack_file(ROOT / "Pulumi.dev.yaml")
    values["trainstack:jobs"] = json.dumps(
        [{"name": f"job-{i}", "kind": "PyTorchJob", "nodeGroup": "gpu", "wait": "none"} for i in range(jobs)]
    )
    start = time.perf_counter()
    run = run_program("dev", values, secrets)
    return time.perf_counter() - start, len(run.resources)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, nargs="+", default=[1, 10, 100])
    p.add_argument("--repeat", type=int, default=2, help="runs per size; the fastest is shown")
    args = p.parse_args()
    plan_seconds(1)  # warm-up: imports and the provider SDKs' first use
    rows = []
    for n in args.jobs:
        best, resources = min(plan_seconds(n) for _ in range(args.repeat))
        rows.append((n, best, resources))
    base_n, base_s, _ = rows[0]
    print(f"{'jobs':>6} {'seconds':>8} {'resources':>10} {'ms/job over the first':>22}")
    for n, seconds, resources in rows:
        per_job = (seconds - base_s) / (n - base_n) * 1000 if n != base_n else float("nan")
        print(f"{n:>6} {seconds:>8.2f} {resources:>10} {per_job:>22.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
