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
import math
import os
import re
import subprocess
import sys
import threading
import traceback
import typing
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from cli import analysis, tracking
from cli.errors import EXIT_FAILED, EXIT_USAGE, CliError
from cli.kube import Cluster
from conventions import TRAINING_NAMESPACE


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

    def note(self, text: str) -> None:
        """A remark beside the answer (stderr), so stdout stays the answer, JSON included."""
        print(text, file=sys.stderr, flush=True)

    def dump(self, data: Any) -> None:
        print(json.dumps(data, indent=2, default=str), file=self.stream)


SHOW_OUTPUTS = "pulumi stack output --json --show-secrets > outputs.json"


def stack_outputs(args: argparse.Namespace) -> dict:
    if args.kubeconfig:  # a wrong --kubeconfig is the first thing to say, before asking pulumi
        kubeconfig_file(Path(args.kubeconfig))
    if args.outputs:
        return read_outputs_file(Path(args.outputs))
    cmd = ["pulumi", "stack", "output", "--json", "--show-secrets"] + (
        ["--stack", args.stack] if args.stack else []
    )
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, check=True, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise CliError(
            f"the pulumi CLI is not on PATH: pass --outputs FILE, written where pulumi runs by `{SHOW_OUTPUTS}`"
        ) from None
    except subprocess.CalledProcessError as err:
        said = [line.strip() for line in err.stderr.splitlines() if line.strip()]
        first = next((line for line in said if line.lower().startswith("error")), said[0] if said else "")
        if "no stack" in first.lower() or "no stack is selected" in err.stderr.lower():
            which = f"named '{args.stack}'" if args.stack else "selected"
            raise CliError(
                f"pulumi has no stack {which} here ({first}): list them with `pulumi stack ls`, "
                "pass --stack NAME, or pass --outputs FILE"
            ) from None
        raise CliError(f"`{' '.join(cmd)}` failed: {first or f'exit {err.returncode}'}") from None
    return outputs_object(done.stdout, "`pulumi stack output`")


def read_outputs_file(path: Path) -> dict:
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise CliError(
            f"cannot read the outputs file {path}: {reason}; write it with `{SHOW_OUTPUTS}`"
        ) from None
    return outputs_object(text, str(path))


def outputs_object(text: str, source: str) -> dict:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise CliError(
            f"{source} is not JSON ({err.msg} at line {err.lineno}, column {err.colno}): "
            f"write the outputs with `{SHOW_OUTPUTS}`"
        ) from None
    if not isinstance(data, dict):
        raise CliError(
            f"{source} holds a JSON {type(data).__name__}, not the stack's outputs (an object): "
            f"write them with `{SHOW_OUTPUTS}`"
        )
    return data


def connect(args: argparse.Namespace, outputs: dict) -> Cluster:
    namespace = args.namespace or outputs.get("trainingNamespace") or TRAINING_NAMESPACE
    if args.kubeconfig:
        return Cluster(
            kubeconfig_file(Path(args.kubeconfig)), namespace, args.timeout, f"--kubeconfig {args.kubeconfig}"
        )
    if outputs.get("kubeconfigFile"):  # a stack on the user's own cluster (kind): its own file
        path = outputs["kubeconfigFile"]
        config = with_context(kubeconfig_file(Path(path)), outputs.get("kubeContext"), path)
        return Cluster(config, namespace, args.timeout, f"the stack's kubeconfig file {path}")
    return Cluster(kubeconfig_from_outputs(outputs), namespace, args.timeout, "the outputs' kubeconfig")


def with_context(kubeconfig: dict, context: str | None, source: str) -> dict:
    """The kubeconfig with `context` current, as the stack's provider uses it."""
    if context is None:
        return kubeconfig
    names = [c.get("name") for c in kubeconfig.get("contexts") or []]
    if context not in names:
        raise CliError(
            f"{source} has no context {context} (it has: {', '.join(map(str, names)) or 'none'}): "
            "is the cluster still there (`kind get clusters`)?"
        )
    return {**kubeconfig, "current-context": context}


def kubeconfig_file(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.expanduser().read_text())
    except OSError as err:
        raise CliError(f"--kubeconfig {path}: {err.strerror or err}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise CliError(
            f"--kubeconfig {path} is not a kubeconfig (not YAML: {str(err).splitlines()[0]})"
        ) from None
    if not isinstance(data, dict) or not data:
        raise CliError(
            f"--kubeconfig {path} is empty or not a kubeconfig: point it at one (`aws eks update-kubeconfig`)"
        )
    return data


def kubeconfig_from_outputs(outputs: dict) -> dict:
    fix = f"write the outputs with `{SHOW_OUTPUTS}`, or pass --kubeconfig"
    kubeconfig = outputs.get("kubeconfig")
    if kubeconfig is None:
        raise CliError(f"the outputs have no kubeconfig: {fix}")
    if kubeconfig == "[secret]":
        raise CliError(f'the outputs\' kubeconfig is redacted ("[secret]"): it is a secret, so {fix}')
    if isinstance(kubeconfig, str):
        try:
            kubeconfig = yaml.safe_load(kubeconfig) if kubeconfig.strip() else None
        except yaml.YAMLError:
            raise CliError(f"the outputs' kubeconfig is neither JSON nor YAML: {fix}") from None
    if not kubeconfig:
        raise CliError(f"the outputs' kubeconfig is empty: {fix}")
    if not isinstance(kubeconfig, dict):
        raise CliError(f"the outputs' kubeconfig is a {type(kubeconfig).__name__}, not a kubeconfig: {fix}")
    return kubeconfig


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


def stack_jobs(outputs: dict) -> dict[str, dict]:
    jobs = outputs.get("jobs") or {}
    if not isinstance(jobs, dict) or not all(isinstance(j, dict) and "kind" in j for j in jobs.values()):
        raise CliError(
            f"the outputs' `jobs` is not the stack's map of jobs: write the outputs with `{SHOW_OUTPUTS}`"
        )
    return jobs


def job_kinds(outputs: dict) -> dict[str, str]:
    return {name: job["kind"] for name, job in stack_jobs(outputs).items()}


def known_job(outputs: dict, name: str) -> dict | None:
    """The job's outputs; a name the stack does not launch is a usage error (outputs without any
    jobs, as from --kubeconfig on another cluster, let any name through)."""
    jobs = stack_jobs(outputs)
    if jobs and name not in jobs:
        raise CliError(
            f"no job {name} in the stack's outputs: the stack's jobs are {', '.join(sorted(jobs))}"
        )
    return jobs.get(name)


def job_run(args: argparse.Namespace, outputs: dict, job: str) -> tracking.Run | str | None:
    """The job's MLflow run; a line saying why it cannot be read; None without tracking."""
    if not outputs.get("trackingUri"):
        return None
    uri = tracking.tracking_uri(args.tracking_uri, outputs)
    if uri is None:
        return f"run `{outputs['trackingPortForward']}`, then pass --tracking-uri http://localhost:5000"
    try:
        return (
            tracking.find_run(uri, outputs.get("trackingExperiment", ""), job, args.timeout) or "no run yet"
        )
    except tracking.TrackingUnavailable as err:
        return str(err)


def cmd_status(args: argparse.Namespace, out: Output) -> int:
    outputs = stack_outputs(args)
    cluster = connect(args, outputs)
    jobs, failed = [], False
    workloads, requests = cluster.workloads(), cluster.provisioning_requests()
    for name, kind in job_kinds(outputs).items():
        out.progress(f"reading {kind} {name} ...")
        obj = cluster.job(kind, name)
        phase = analysis.job_phase(kind, obj)
        queued = analysis.queue_state(kind, name, workloads, requests) if obj else None
        pods = cluster.job_pods(name)
        records = metric_records(cluster, pods, tail=500)
        latest = records[-1] if records else None
        jobs.append(
            {
                "name": name,
                "kind": kind,
                "phase": phase.name,
                "failed": phase.failed or bool(queued and queued.failed),
                "queue": asdict(queued) if queued else None,
                "podsReady": sum(analysis.pod_ready(p) for p in pods),
                "podsExpected": analysis.expected_pods(kind, obj),
                "restarts": sum(analysis.restarts(p) for p in pods),
                "age": age((obj or {}).get("metadata", {}).get("creationTimestamp")),
                "metrics": {k: latest.get(k) for k in ("step", "loss", "tokens_per_s", "mfu")}
                if latest
                else None,
                "mlflowRun": run_summary(job_run(args, outputs, name)),
            }
        )
        failed |= jobs[-1]["failed"]
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
    out.line(f"{'JOB':24} {'KIND':10} {'PHASE':26} {'QUEUE':13} {'PODS':7} {'RESTARTS':8} {'AGE':5} LATEST")
    for j in jobs:
        m = j["metrics"]
        latest = (
            f"step {m['step']} loss {m['loss']} {m['tokens_per_s'] or 0:,.0f} tok/s"
            + (f" MFU {m['mfu']:.1%}" if m.get("mfu") else "")
            if m
            else "-"
        )
        phase = out.colour(f"{j['phase']:26}", False if j["failed"] else None)
        queue = j["queue"] or {"state": "-", "detail": "", "failed": False}
        state = out.colour(f"{queue['state']:13}", False if queue["failed"] else None)
        out.line(
            f"{j['name']:24} {j['kind']:10} {phase} {state} {j['podsReady']}/{j['podsExpected']:<5} "
            f"{j['restarts']:<8} {j['age']:5} {latest}"
        )
        if queue["state"] not in ("admitted", "finished", "-"):
            out.line(f"{'':24} {queue['detail']}")
        if run := j["mlflowRun"]:
            out.line(
                f"{'':24} MLflow: " + (f"run {run['id']} ({run['status']})" if run.get("id") else run["note"])
            )
    out.line()
    out.line(f"{'NODE GROUP':24} {'READY/NODES':12} {'MIN-MAX':8} {'GPUS/NODE':16} EFA/NODE")
    for g in groups:
        ready = out.colour(f"{g.ready}/{g.nodes:<10}", g.ready >= g.minimum)
        gpus = ",".join(map(str, g.gpus)) or "-"
        efa = ",".join(map(str, g.efa)) or "-"
        span = f"{g.minimum}-{g.maximum}"
        out.line(
            f"{g.name:24} {ready} {span:8} {gpus + ' of ' + str(g.gpus_expected):16} {efa} of {g.efa_expected}"
        )
    return EXIT_FAILED if failed else 0


def non_negative(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of 0 or more")
    return int(text)


SINCE = re.compile(r"([0-9]+)([smhd]?)")


def seconds(text: str) -> int:
    m = SINCE.fullmatch(text)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a duration such as 90s, 10m, 2h")
    return int(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


def cmd_logs(args: argparse.Namespace, out: Output) -> int:
    outputs = stack_outputs(args)
    known_job(outputs, args.job)
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
    failures: list[CliError] = []

    def follow(p: dict) -> None:
        try:
            for line in cluster.follow(p["metadata"]["name"], args.tail, args.since):
                emit(p, line)
        except CliError as err:
            failures.append(err)
        except Exception as err:  # the stream broke off mid-way
            failures.append(
                CliError(f"following the log of {p['metadata']['name']} stopped: {err}", EXIT_FAILED)
            )

    threads = [threading.Thread(target=follow, args=(pod,), daemon=True) for pod in pods]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise failures[0]
    return 0


def cmd_doctor(args: argparse.Namespace, out: Output) -> int:
    outputs = stack_outputs(args)
    cluster = connect(args, outputs)
    out.progress("reading the cluster ...")
    pods = cluster.pods()
    view = analysis.ClusterView(
        nodes=cluster.nodes(),
        node_events=cluster.node_events(),
        daemonsets=cluster.daemonsets(),
        deployments=cluster.deployments(),
        crds=cluster.crds(),
        webhooks=cluster.webhooks(),
        pods=pods,
        gpu_groups=outputs.get("gpuNodeGroups") or {},
        jobs={name: kind for name, kind in job_kinds(outputs).items() if cluster.job(kind, name)},
        workloads=cluster.workloads(),
        provisioning_requests=cluster.provisioning_requests(),
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


def run_summary(run: tracking.Run | str | None) -> dict | None:
    if run is None:
        return None
    if isinstance(run, str):
        return {"note": run}
    return {"id": run.run_id, "status": run.status, "experiment": run.experiment}


def cmd_metrics(args: argparse.Namespace, out: Output) -> int:
    outputs = stack_outputs(args)
    known_job(outputs, args.job)
    run = job_run(args, outputs, args.job)
    records, source = [], "logs"
    if isinstance(run, tracking.Run):
        try:
            records, source = tracking.records(run.uri, run.run_id, args.timeout), f"MLflow run {run.run_id}"
        except tracking.TrackingUnavailable as err:
            run = str(err)
    if isinstance(run, str):
        out.note(f"MLflow: {run}; reading the logs instead")
    if not records:
        cluster = connect(args, outputs)
        records = metric_records(cluster, cluster.job_pods(args.job))
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


def cmd_estimate(args: argparse.Namespace, out: Output) -> int:
    outputs = stack_outputs(args)
    job = known_job(outputs, args.job)
    if job is None:
        raise CliError(f"no job {args.job} in the stack's outputs: the stack launches no jobs")
    measured = args.tokens_per_s
    if measured is None:
        cluster = connect(args, outputs)
        records = metric_records(cluster, cluster.job_pods(args.job))
        measured = records[-1].get("tokens_per_s") if records else None
    if not measured:
        raise CliError("no measured throughput yet: wait for metrics, or pass --tokens-per-s", EXIT_FAILED)
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


class Parser(argparse.ArgumentParser):
    """argparse, with a mistake said in one line (not the usage block) and exit 2."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def positive(kind: type) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not (math.isfinite(value) and value > 0):
            raise argparse.ArgumentTypeError(f"{text!r} must be a positive number")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


def fraction(text: str) -> float:
    value = positive(float)(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at most 1 (the throughput kept per doubling)")
    return value


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="trainstack", description=__doc__.split("\n\n")[0])
    common = Parser(add_help=False)
    common.add_argument("--stack", help="pulumi stack (default: the selected one)")
    common.add_argument("--outputs", help="a JSON file of the stack's outputs instead of asking pulumi")
    common.add_argument("--kubeconfig", help="kubeconfig file (default: the stack's)")
    common.add_argument("--namespace", help="namespace of the jobs (default: the stack's)")
    common.add_argument("--json", action="store_true", help="machine-readable output")
    common.add_argument(
        "--timeout", type=positive(float), default=20.0, help="seconds to wait for the cluster per call"
    )
    common.add_argument("--debug", action="store_true", help="show the traceback of an unexpected error")
    common.add_argument(
        "--tracking-uri", help="MLflow server (default: $MLFLOW_TRACKING_URI, or the stack's external one)"
    )
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("status", parents=[common], help="jobs and node groups")
    logs = sub.add_parser("logs", parents=[common], help="logs of every pod of a job")
    logs.add_argument("job")
    logs.add_argument("--follow", "-f", action="store_true")
    logs.add_argument("--rank", type=non_negative, help="only this node rank's pod")
    logs.add_argument("--since", type=seconds, help="e.g. 10m")
    logs.add_argument("--tail", type=non_negative)
    sub.add_parser("doctor", parents=[common], help="checks with a fix for each failure")
    metrics = sub.add_parser("metrics", parents=[common], help="the training curve")
    metrics.add_argument("job")
    metrics.add_argument("--plot", help="write loss, tokens/s and MFU against step to this PNG")
    est = sub.add_parser("estimate", parents=[common], help="time and cost to a token budget")
    est.add_argument("job")
    est.add_argument("--tokens", type=positive(float), required=True, help="token budget, e.g. 1e11")
    est.add_argument(
        "--tokens-per-s", type=positive(float), help="measured throughput (default: the job's latest)"
    )
    est.add_argument("--efficiency", type=fraction, default=0.9, help="throughput kept per doubling of nodes")
    est.add_argument("--max-nodes", type=positive(int), help="largest node count in the table")
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
    try:
        return COMMANDS[args.command](args, Output(args.json))
    except CliError as err:
        print(f"trainstack {args.command}: error: {err}", file=sys.stderr)
        return err.code
    except KeyboardInterrupt:
        return 130
    except Exception as err:  # a bug or a case no check foresaw: still one line, unless --debug
        if args.debug:
            traceback.print_exc()
        else:
            print(
                f"trainstack {args.command}: error: unexpected {type(err).__name__}: {_first_line(err)} "
                "(run again with --debug for the traceback, and report it)",
                file=sys.stderr,
            )
        return EXIT_FAILED


def _first_line(err: Exception) -> str:
    return (str(err).strip().splitlines() or [""])[0][:300]


if __name__ == "__main__":
    sys.exit(main())
