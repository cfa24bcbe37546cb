"""`trainstack status`: each job's phase, queue, pods, restarts, age, latest metrics and MLflow run;
each GPU node group's nodes and devices. Exit 1 if something failed."""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass

from cli import mlflow_api
from cli.analysis import phases, queues
from cli.analysis.phases import GroupStatus
from cli.commands.common import job_run, metric_records
from cli.errors import EXIT_FAILED
from cli.output import Output, age
from cli.stack import connect, load_outputs, stack_jobs


@dataclass
class Status:
    jobs: list[dict]  # one row each, as --json prints it
    groups: list[GroupStatus]
    failed: bool


def run(args: argparse.Namespace, out: Output) -> int:
    return render(fetch(args, out), out)


def fetch(args: argparse.Namespace, out: Output) -> Status:
    outputs = load_outputs(args)
    cluster = connect(args, outputs)
    jobs, failed = [], False
    workloads, requests = cluster.workloads(), cluster.provisioning_requests()
    for name, summary in stack_jobs(outputs).items():
        kind = summary["kind"]
        out.progress(f"reading {kind} {name} ...")
        obj = cluster.job(kind, name)
        phase = phases.job_phase(kind, obj)
        queued = queues.queue_state(kind, name, workloads, requests) if obj else None
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
                "podsReady": sum(phases.pod_ready(p) for p in pods),
                "podsExpected": phases.expected_pods(kind, obj),
                "restarts": sum(phases.restarts(p) for p in pods),
                "retries": phases.retry_state(kind, obj, summary.get("retries")),
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
        phases.group_status(name, facts, nodes)
        for name, facts in (outputs.get("gpuNodeGroups") or {}).items()
    ]
    failed |= any(g.failed for g in groups)
    out.done()
    return Status(jobs, groups, failed)


def run_summary(found: mlflow_api.Run | str | None) -> dict | None:
    if found is None:
        return None
    if isinstance(found, str):
        return {"note": found}
    return {"id": found.run_id, "status": found.status, "experiment": found.experiment}


def render(status: Status, out: Output) -> int:
    jobs, groups, failed = status.jobs, status.groups, status.failed
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
        # What stops it, once it has failed or is failing again.
        failing = j["failed"] or j["restarts"] or j["phase"] == "Restarting" or "(Retrying)" in j["phase"]
        if j["retries"] and (failing or "failed so far" in j["retries"]):
            out.line(f"{'':24} retries: {j['retries']}")
        if mlflow := j["mlflowRun"]:
            out.line(
                f"{'':24} MLflow: "
                + (f"run {mlflow['id']} ({mlflow['status']})" if mlflow.get("id") else mlflow["note"])
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
