"""`trainstack metrics JOB [--plot curve.png]`: the training curve, from the job's MLflow run or
else from its pods' logs."""

from __future__ import annotations

import argparse
from pathlib import Path

from cli import mlflow_api
from cli.commands.common import job_run, metric_records
from cli.errors import EXIT_FAILED
from cli.output import Output
from cli.stack import connect, known_job, load_outputs


def run(args: argparse.Namespace, out: Output) -> int:
    records, source = fetch(args, out)
    return render(args, records, source, out)


def fetch(args: argparse.Namespace, out: Output) -> tuple[list[dict], str]:
    """The job's records, one per step, and where they came from (its MLflow run, or the logs)."""
    outputs = load_outputs(args)
    known_job(outputs, args.job)
    found = job_run(args, outputs, args.job)
    records, source = [], "logs"
    if isinstance(found, mlflow_api.Run):
        try:
            records = mlflow_api.records(found.uri, found.run_id, args.timeout)
            source = f"MLflow run {found.run_id}"
        except mlflow_api.TrackingUnavailable as err:
            found = str(err)
    if isinstance(found, str):
        out.note(f"MLflow: {found}; reading the logs instead")
    if not records:
        cluster = connect(args, outputs)
        records = metric_records(cluster, cluster.job_pods(args.job))
    return records, source


def render(args: argparse.Namespace, records: list[dict], source: str, out: Output) -> int:
    if not records:
        out.line(f"no training metrics in the logs of {args.job} yet")
        return EXIT_FAILED
    if args.plot:
        plot(records, args.job, Path(args.plot))
    if out.as_json:
        out.dump({"job": args.job, "source": source, "records": records, "plot": args.plot})
        return 0
    out.line(f"from {source}")
    out.line(f"{'STEP':>8} {'LOSS':>8} {'VAL LOSS':>8} {'TOKENS/S':>12} {'MFU':>7} {'GOODPUT':>8}")
    for r in records:
        mfu = f"{r['mfu']:.1%}" if r.get("mfu") else "-"
        goodput = f"{r['goodput']:.1%}" if r.get("goodput") is not None else "-"
        val = f"{r['val_loss']:.4f}" if r.get("val_loss") is not None else "-"
        out.line(
            f"{r['step']:>8} {r['loss']:>8.4f} {val:>8} {r.get('tokens_per_s', 0):>12,.0f} {mfu:>7} {goodput:>8}"
        )
    if args.plot:
        out.line(f"\nwrote {args.plot}")
    return 0


def plot(records: list[dict], job: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in records]
    fig, axes = plt.subplots(3, 1, figsize=(8, 9), sharex=True)
    axes[0].plot(steps, [r["loss"] for r in records], label="loss")
    val = [(r["step"], r["val_loss"]) for r in records if r.get("val_loss") is not None]
    if val:
        axes[0].plot(*zip(*val, strict=True), marker="o", label="validation loss")
    axes[0].set_ylabel("loss")
    axes[0].legend()
    axes[1].plot(steps, [r.get("tokens_per_s") or 0 for r in records])
    axes[1].set_ylabel("tokens/s")
    axes[2].plot(steps, [(r.get("mfu") or 0) * 100 for r in records])
    axes[2].set_ylabel("MFU %")
    axes[2].set_xlabel("step")
    fig.suptitle(f"trainstack job {job}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
