"""`trainstack`: is my job training, how fast, why is it pending, is EFA in use, what did rank 7 say.

    trainstack status                      # jobs and node groups; exit 1 if something failed
    trainstack logs JOB [--follow] [--rank N] [--since 10m] [--tail 100]
    trainstack doctor                      # the checks an EKS training engineer runs, with fixes
    trainstack metrics JOB [--plot curve.png]
    trainstack estimate JOB --tokens 1e11 [--efficiency 0.9]

It reads the stack's outputs (`pulumi stack output --json --show-secrets`, or `--outputs FILE`)
for the cluster's kubeconfig, the namespace, the jobs and the node groups; `--kubeconfig` and
`--namespace` point it anywhere. `--json` prints machine-readable output on every command.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cli import analysis
from cli.kube import Cluster
from conventions import TRAINING_NAMESPACE

EXIT_FAILED = 1
EXIT_USAGE = 2


class Output:
    """Colours and progress on a terminal, plain text when piped, JSON with --json."""

    def __init__(self, as_json: bool, stream=None):
        self.as_json = as_json
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty() and not os.environ.get("NO_COLOR")

    def colour(self, text: str, ok: bool | None) -> str:
        if not self.tty or ok is None:
            return text
        return f"\033[{32 if ok else 31}m{text}\033[0m"

    def line(self, text: str = "") -> None:
        print(text, file=self.stream, flush=True)

    def progress(self, text: str) -> None:
        if self.tty and not self.as_json:
            print(f"\r{text}\033[K", end="", file=sys.stderr, flush=True)

    def done(self) -> None:
        if self.tty and not self.as_json:
            print("\r\033[K", end="", file=sys.stderr, flush=True)

    def dump(self, data: Any) -> None:
        print(json.dumps(data, indent=2, default=str), file=self.stream)


def stack_outputs(args: argparse.Namespace) -> dict:
    if args.outputs:
        return json.loads(Path(args.outputs).read_text())
    cmd = ["pulumi", "stack", "output", "--json", "--show-secrets"] + (
        ["--stack", args.stack] if args.stack else []
    )
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    except FileNotFoundError:
        raise SystemExit(
            "error: the pulumi CLI is not on PATH; pass --outputs FILE or --kubeconfig"
        ) from None
    except subprocess.CalledProcessError as err:
        raise SystemExit(f"error: `{' '.join(cmd)}` failed: {err.stderr.strip()}") from None
    return json.loads(done.stdout)


def connect(args: argparse.Namespace, outputs: dict) -> Cluster:
    kubeconfig = args.kubeconfig or outputs.get("kubeconfig")
    if isinstance(kubeconfig, str) and kubeconfig.lstrip().startswith("{"):
        kubeconfig = json.loads(kubeconfig)
    namespace = args.namespace or outputs.get("trainingNamespace") or TRAINING_NAMESPACE
    return Cluster(kubeconfig, namespace)


def age(timestamp: str | None) -> str:
    if not timestamp:
        return "-"
    seconds = (datetime.now(UTC) - datetime.fromisoformat(timestamp.replace("Z", "+00:00"))).total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def metric_records(cluster: Cluster, pods: list[dict], tail: int | None = None) -> list[dict]:
    """The trainer's metrics records in the pods' logs, one per step (merged), by step."""
    records: dict[int, dict] = {}
    for pod in pods:
        for r in analysis.parse_metrics(cluster.log(pod["metadata"]["name"], tail=tail)):
            records[r["step"]] = {**records.get(r["step"], {}), **r}
    return [records[s] for s in sorted(records)]


def job_kinds(outputs: dict) -> dict[str, str]:
    return {name: job["kind"] for name, job in (outputs.get("jobs") or {}).items()}


def cmd_status(args: argparse.Namespace, out: Output) -> int:
    outputs = stack_outputs(args)
    cluster = connect(args, outputs)
    jobs, failed = [], False
    for name, kind in job_kinds(outputs).items():
        out.progress(f"reading {kind} {name} ...")
        obj = cluster.job(kind, name)
        phase = analysis.job_phase(kind, obj)
        pods = cluster.job_pods(name)
        records = metric_records(cluster, pods, tail=500)
        latest = records[-1] if records else None
        jobs.append(
            {
                "name": name,
                "kind": kind,
                "phase": phase.name,
                "failed": phase.failed,
                "podsReady": sum(analysis.pod_ready(p) for p in pods),
                "podsExpected": analysis.expected_pods(kind, obj),
                "restarts": sum(analysis.restarts(p) for p in pods),
                "age": age((obj or {}).get("metadata", {}).get("creationTimestamp")),
                "metrics": {k: latest.get(k) for k in ("step", "loss", "tokens_per_s", "mfu")}
                if latest
                else None,
            }
        )
        failed |= phase.failed
    nodes = cluster.nodes()
    groups = [
        analysis.group_status(name, facts, nodes)
        for name, facts in (outputs.get("gpuNodeGroups") or {}).items()
    ]
    failed |= any(g.failed for g in groups)
    out.done()
    if out.as_json:
        out.dump(
            {"jobs": jobs, "nodeGroups": [asdict(g) | {"failed": g.failed} for g in groups], "failed": failed}
        )
        return EXIT_FAILED if failed else 0
    out.line(f"{'JOB':24} {'KIND':10} {'PHASE':26} {'PODS':7} {'RESTARTS':8} {'AGE':5} LATEST")
    for j in jobs:
        m = j["metrics"]
        latest = (
            f"step {m['step']} loss {m['loss']} {m['tokens_per_s'] or 0:,.0f} tok/s"
            + (f" MFU {m['mfu']:.1%}" if m.get("mfu") else "")
            if m
            else "-"
        )
        phase = out.colour(f"{j['phase']:26}", False if j["failed"] else None)
        out.line(
            f"{j['name']:24} {j['kind']:10} {phase} {j['podsReady']}/{j['podsExpected']:<5} "
            f"{j['restarts']:<8} {j['age']:5} {latest}"
        )
    out.line()
    out.line(f"{'NODE GROUP':24} {'READY':7} {'GPUS/NODE':16} EFA/NODE")
    for g in groups:
        ready = out.colour(f"{g.ready}/{g.expected}", g.ready >= g.expected)
        gpus = ",".join(map(str, g.gpus)) or "-"
        efa = ",".join(map(str, g.efa)) or "-"
        out.line(f"{g.name:24} {ready:7} {gpus + ' of ' + str(g.gpus_expected):16} {efa} of {g.efa_expected}")
    return EXIT_FAILED if failed else 0


SINCE = re.compile(r"([0-9]+)([smhd]?)")


def seconds(text: str) -> int:
    m = SINCE.fullmatch(text)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a duration such as 90s, 10m, 2h")
    return int(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


def cmd_logs(args: argparse.Namespace, out: Output) -> int:
    outputs = stack_outputs(args)
    cluster = connect(args, outputs)
    pods = sorted(
        cluster.job_pods(args.job), key=lambda p: (analysis.pod_rank(p) is None, analysis.pod_rank(p) or 0)
    )
    if args.rank is not None:
        pods = [p for p in pods if analysis.pod_rank(p) == args.rank]
    if not pods:
        out.line(f"no pods of job {args.job}" + (f" with rank {args.rank}" if args.rank is not None else ""))
        return EXIT_FAILED
    lock = threading.Lock()

    def emit(pod: dict, line: str) -> None:
        role = analysis.pod_role(pod)
        with lock:
            if out.as_json:
                out.line(json.dumps({"pod": pod["metadata"]["name"], "role": role, "line": line}))
            else:
                out.line(f"[{role}] {line}")

    if not args.follow:
        for pod in pods:
            for line in cluster.log(pod["metadata"]["name"], tail=args.tail, since=args.since).splitlines():
                emit(pod, line)
        return 0
    threads = [
        threading.Thread(
            target=lambda p=pod: [
                emit(p, line) for line in cluster.follow(p["metadata"]["name"], args.tail, args.since)
            ],
            daemon=True,
        )
        for pod in pods
    ]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    except KeyboardInterrupt:
        return 130
    return 0


def cmd_doctor(args: argparse.Namespace, out: Output) -> int:
    outputs = stack_outputs(args)
    cluster = connect(args, outputs)
    out.progress("reading the cluster ...")
    pods = cluster.pods()
    view = analysis.ClusterView(
        nodes=cluster.nodes(),
        daemonsets=cluster.daemonsets(),
        deployments=cluster.deployments(),
        crds=cluster.crds(),
        webhooks=cluster.webhooks(),
        pods=pods,
        gpu_groups=outputs.get("gpuNodeGroups") or {},
    )
    for pod in pods:
        out.progress(f"reading logs of {pod['metadata']['name']} ...")
        view.logs[pod["metadata"]["name"]] = cluster.log(pod["metadata"]["name"], tail=2000)
        if analysis.restarts(pod):
            view.previous_logs[pod["metadata"]["name"]] = cluster.log(
                pod["metadata"]["name"], tail=50, previous=True
            )
    out.done()
    checks = analysis.doctor(view)
    failed = [c for c in checks if not c.ok]
    if out.as_json:
        out.dump({"checks": [c.as_json() for c in checks], "failed": len(failed)})
    else:
        for c in checks:
            mark = out.colour("PASS" if c.ok else "FAIL", c.ok)
            out.line(f"{mark}  {c.name}: {c.detail}")
            if not c.ok and c.fix:
                out.line(f"      fix: {c.fix}")
        out.line(f"\n{len(checks) - len(failed)} passed, {len(failed)} failed")
    return EXIT_FAILED if failed else 0


def cmd_metrics(args: argparse.Namespace, out: Output) -> int:
    outputs = stack_outputs(args)
    cluster = connect(args, outputs)
    records = metric_records(cluster, cluster.job_pods(args.job))
    if not records:
        out.line(f"no training metrics in the logs of {args.job} yet")
        return EXIT_FAILED
    if args.plot:
        plot(records, args.job, Path(args.plot))
    if out.as_json:
        out.dump({"job": args.job, "records": records, "plot": args.plot})
        return 0
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


def cmd_estimate(args: argparse.Namespace, out: Output) -> int:
    outputs = stack_outputs(args)
    job = (outputs.get("jobs") or {}).get(args.job)
    if job is None:
        out.line(f"error: no job {args.job} in the stack's outputs")
        return EXIT_USAGE
    measured = args.tokens_per_s
    if measured is None:
        cluster = connect(args, outputs)
        records = metric_records(cluster, cluster.job_pods(args.job))
        measured = records[-1].get("tokens_per_s") if records else None
    if not measured:
        out.line("error: no measured throughput yet; wait for metrics or pass --tokens-per-s")
        return EXIT_FAILED
    nodes = int(job["nodes"])
    group = (outputs.get("gpuNodeGroups") or {}).get(job["nodeGroup"], {})
    per_node_usd = job["hourlyUsd"] / nodes if nodes else 0.0
    rows = analysis.estimate(
        args.tokens,
        measured,
        nodes,
        per_node_usd,
        args.max_nodes or max(8, int(group.get("nodes", nodes))),
        args.efficiency,
    )
    if out.as_json:
        out.dump(
            {
                "job": args.job,
                "tokens": args.tokens,
                "measured": {"tokensPerS": measured, "nodes": nodes},
                "efficiencyPerDoubling": args.efficiency,
                "rows": [asdict(r) for r in rows],
            }
        )
        return 0
    out.line(
        f"{args.tokens:.3g} tokens, measured {measured:,.0f} tokens/s on {nodes} node(s), "
        f"{args.efficiency:.0%} scaling efficiency per doubling"
    )
    out.line(f"{'NODES':>6} {'TOKENS/S':>14} {'HOURS':>10} {'COST':>12}")
    for r in rows:
        out.line(
            f"{r.nodes:>6} {r.tokens_per_s:>14,.0f} {r.hours:>10.1f} {'$' + format(r.cost_usd, ',.0f'):>12}"
        )
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="trainstack", description=__doc__.split("\n\n")[0])
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--stack", help="pulumi stack (default: the selected one)")
    common.add_argument("--outputs", help="a JSON file of the stack's outputs instead of asking pulumi")
    common.add_argument("--kubeconfig", help="kubeconfig file (default: the stack's)")
    common.add_argument("--namespace", help="namespace of the jobs (default: the stack's)")
    common.add_argument("--json", action="store_true", help="machine-readable output")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("status", parents=[common], help="jobs and node groups")
    logs = sub.add_parser("logs", parents=[common], help="logs of every pod of a job")
    logs.add_argument("job")
    logs.add_argument("--follow", "-f", action="store_true")
    logs.add_argument("--rank", type=int, help="only this node rank's pod")
    logs.add_argument("--since", type=seconds, help="e.g. 10m")
    logs.add_argument("--tail", type=int)
    sub.add_parser("doctor", parents=[common], help="checks with a fix for each failure")
    metrics = sub.add_parser("metrics", parents=[common], help="the training curve")
    metrics.add_argument("job")
    metrics.add_argument("--plot", help="write loss, tokens/s and MFU against step to this PNG")
    est = sub.add_parser("estimate", parents=[common], help="time and cost to a token budget")
    est.add_argument("job")
    est.add_argument("--tokens", type=float, required=True, help="token budget, e.g. 1e11")
    est.add_argument("--tokens-per-s", type=float, help="measured throughput (default: the job's latest)")
    est.add_argument("--efficiency", type=float, default=0.9, help="throughput kept per doubling of nodes")
    est.add_argument("--max-nodes", type=int, help="largest node count in the table")
    return p


COMMANDS = {
    "status": cmd_status,
    "logs": cmd_logs,
    "doctor": cmd_doctor,
    "metrics": cmd_metrics,
    "estimate": cmd_estimate,
}


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return COMMANDS[args.command](args, Output(args.json))


if __name__ == "__main__":
    sys.exit(main())
